"""Choices of the CLI whose stages are heavy to load, kept apart so that typer can build every command
(`traceview --help`) without importing DuckDB: the pictures `traceview plot` draws.

The other choices already live in light modules: output.Format, segment.Method, diff.Metric.
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """The pictures `traceview plot` draws."""

    timeline = "timeline"
    layers = "layers"
    diff = "diff"
