"""traceview: per-transformer-layer analysis of GPU profiler traces in DuckDB.

>>> import traceview
>>> traceview.ingest(["run.pt.trace.json.gz"], "run.db")
>>> con = traceview.connect("run.db")
>>> con.sql("SELECT layer, count(*) FROM gpu_activity GROUP BY layer")
"""

from .api import RunSummary, connect, ingest, layers, run_ids, summarize
from .errors import BadInputError, DatabaseError, ToolMissingError, TraceviewError, UsageError
from .ingest import IngestOptions
from .segment import Method, SegmentOptions, SegmentResult
from .version import SCHEMA_VERSION, __version__

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
