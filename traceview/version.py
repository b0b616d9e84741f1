"""The traceview version and the database schema version it writes.

`__version__` is the one place the version is written: pyproject.toml reads it from here (setuptools reads
the literal without importing the package), so that start-up need not ask importlib.metadata (~25 ms).
"""

__version__ = "0.1.0"

# Bump when schema.sql changes in a way older databases do not have.
SCHEMA_VERSION = 3  # 3: fused_comm_ns, speculative roles (gpu_activity.role/draft_pass, steps.draft_passes)
# 2: kernel_busy and kernel_gaps (segment/busy.py); no primary keys on the big tables
