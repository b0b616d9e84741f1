"""traceview: per-transformer-layer analysis of GPU profiler traces in DuckDB.

>>> import traceview
>>> traceview.ingest(["run.pt.trace.json.gz"], "run.db")
>>> con = traceview.connect("run.db")
>>> con.sql("SELECT layer, count(*) FROM gpu_activity GROUP BY layer")

The API's functions load on first use (`traceview.ingest` imports DuckDB and the ingest stages then), so
that importing the package, or a light module of it such as the CLI's, stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import BadInputError, DatabaseError, ToolMissingError, TraceviewError, UsageError
from .ingest import IngestOptions
from .segment import Method, SegmentOptions, SegmentResult
from .version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:
    from .api import RunSummary, connect, ingest, layers, run_ids, summarize

# Importing the ingest subpackage above bound the name `ingest` here to it; the name belongs to the API's
# ingest function, which __getattr__ loads on first use (the subpackage stays importable as traceview.ingest).
del globals()["ingest"]
_API = ("RunSummary", "connect", "ingest", "layers", "run_ids", "summarize")

__all__ = [
    "SCHEMA_VERSION",
    "BadInputError",
    "DatabaseError",
    "IngestOptions",
    "Method",
    "RunSummary",
    "SegmentOptions",
    "SegmentResult",
    "ToolMissingError",
    "TraceviewError",
    "UsageError",
    "__version__",
    "connect",
    "ingest",
    "layers",
    "run_ids",
    "summarize",
]


def __getattr__(name: str) -> object:
    """The API's functions, imported from traceview.api when first asked for (PEP 562), then kept here."""
    if name not in _API:
        raise AttributeError(f"module 'traceview' has no attribute {name!r}")
    value = getattr(importlib.import_module(".api", __name__), name)
    globals()[name] = value
    return value
