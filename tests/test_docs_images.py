"""The README pictures are what the sample traces draw now: each PNG in docs/images has beside it what it says
(NAME.json, written by docs/images/make_images.py), and drawing the same picture today must say the same. What
is compared is texts and bar heights, not pixels, so a matplotlib release that moves a pixel does not fail it."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from picture_checks import text_problems

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "docs" / "images" / "make_images.py"
REGENERATE = "run `python docs/images/make_images.py` and commit docs/images"


def _script():
    spec = importlib.util.spec_from_file_location("make_images", SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_readme_shows_exactly_the_pictures_the_script_draws() -> None:
    shown = set(re.findall(r"\]\((docs/images/[^)]+\.png)\)", (ROOT / "README.md").read_text()))
    drawn = {f"docs/images/{name}.png" for name in _script().PICTURES}
    assert shown == drawn
    on_disk = {f"docs/images/{p.name}" for p in (ROOT / "docs" / "images").glob("*.png")}
    assert on_disk == drawn, f"pictures no script draws: {sorted(on_disk - drawn)}"


def test_readme_pictures_are_up_to_date(ingested: Callable[[Path], Path]) -> None:
    script = _script()
    stale = []
    for name, figure in script.figures(ingested):
        stored = script.OUT / f"{name}.json"
        if not stored.exists() or stored.read_text() != script.content_text(figure):
            stale.append(name)
        assert not text_problems(figure), name
    assert not stale, f"docs/images out of date: {', '.join(stale)} — {REGENERATE}"


@pytest.mark.parametrize("change", ["label", "data"])
def test_a_changed_picture_is_seen(change: str, ingested: Callable[[Path], Path]) -> None:
    """The comparison fails on what a stale picture would show: another title, or other bar heights."""
    script = _script()
    name, figure = next(script.figures(ingested))
    if change == "label":
        figure.axes[0].set_title(figure.axes[0].get_title().replace("steps", "step 0"))
    else:
        figure.axes[0].patches[0].set_height(figure.axes[0].patches[0].get_height() * 2)
    assert (script.OUT / f"{name}.json").read_text() != script.content_text(figure)
