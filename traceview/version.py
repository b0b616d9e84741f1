"""The traceview version and the database schema version it writes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("traceview")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

# Bump when schema.sql changes in a way older databases do not have.
SCHEMA_VERSION = 2  # 2: kernel_busy and kernel_gaps (segment/busy.py); no primary keys on the big tables
