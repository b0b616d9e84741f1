"""Shared pytest fixtures: paths to the bundled real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
HTA = DATA / "hta"
SAMPLES = Path(__file__).parent.parent / "sample_traces"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's database goes (not created yet)."""
    return tmp_path / "run.db"
