"""The README's CLI reference must list every command that `traceview --help` shows."""

from __future__ import annotations

import re
from pathlib import Path

from traceview.cli import app

README = Path(__file__).parent.parent / "README.md"


def test_every_command_is_in_the_readme_cli_reference() -> None:
    import typer.main

    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    reference = README.read_text().split("## CLI reference", 1)[1]
    documented = set(re.findall(r"^### `traceview ([a-z-]+)", reference, flags=re.MULTILINE))
    assert commands == documented
