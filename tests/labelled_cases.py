"""pytest cases for a directory of labelled bare traces (the zoo, the speculative runs): one per run, the runs
traceview does not yet get right marked as strict expected failures with their cause."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "sample_traces" / "corpus"), str(ROOT / "bench")]

import zoo_accuracy  # noqa: E402 - bench/zoo_accuracy.py


def labelled_cases(root: Path, misses: dict[str, str]) -> list[Any]:
    """(labels, trace) of every labelled run in `root`, as pytest params named by the labels file."""
    return [
        pytest.param(
            labels,
            trace,
            id=labels.stem,
            marks=[pytest.mark.xfail(reason=misses[labels.stem], strict=True)] if labels.stem in misses else [],
        )
        for labels, trace in zoo_accuracy.zoo_cases(root)
    ]
