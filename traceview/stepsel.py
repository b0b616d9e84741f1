"""Step numbers as users read and type them: every command selects steps by `steps.step`, the trace's own number.

Light on purpose (no imports beyond the standard library): ingest, the SQL library and the pictures all use it.
"""

from __future__ import annotations

from collections.abc import Sequence


def format_steps(steps: Sequence[int]) -> str:
    """(0, 1, 2, 5, 7, 8) -> `0-2, 5, 7-8`: step numbers as a user would type them, for messages."""
    runs: list[list[int]] = []
    for step in sorted(set(steps)):
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs) or "none"


def steps_phrase(phase: str | None) -> str:
    """How a summary names the steps it covers: `decode steps` (of one phase), `steady steps` (steps past warm-up
    whose phase could not be told, `unknown`), `all steps` (no phase chosen)."""
    if phase is None:
        return "all steps"
    return "steady steps" if phase == "unknown" else f"{phase} steps"
