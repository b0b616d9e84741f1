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


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """The README's test command is the one `.ci/run` runs; CI then runs the heavy cases it leaves out."""
    match = re.search(r"```sh\n(python3 -m venv [^\n]*pytest -q)\n```", README.read_text())
    assert match, "the README has no test command"
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert match.group(1) in ci
    assert any(line.startswith(".venv/bin/python -m pytest -q -m heavy") for line in ci)
