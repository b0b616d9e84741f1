"""Running one fuzz case (tests/fuzzing.py) in a worker process with a timeout, and judging the outcome.

A case passes when ingest either succeeds (the database opens read-only and keeps the schema's
invariants; a planted token is not in the file) or raises a TraceviewError whose message is one line
`FILE: problem — remedy`, leaving no database (new) or the database as it was (existing), and no
`*.tmp-*` files. Anything else — another exception, a hang past the per-case timeout, a worker that
dies — is a failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import multiprocessing.connection
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from fuzzing import BASE_TRACE, TOKEN, Case


@dataclass(frozen=True)
class Outcome:
    """ok (ingested), clean_error (one-line TraceviewError), failure or hang; detail says more."""

    kind: str
    detail: str = ""
    stats: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------
# Running and judging one case (inside a worker process)


def db_fingerprint(path: Path) -> str:
    """A digest of every row of every table (the logical content of the database)."""
    import duckdb

    digest = hashlib.sha256()
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT temporary ORDER BY table_name"
        ).fetchall()
        for (table,) in tables:
            rows = con.execute(f'SELECT * FROM "{table}" ORDER BY ALL').fetchall()
            digest.update(f"{table}:{rows!r}".encode())
    finally:
        con.close()
    return digest.hexdigest()


def leftovers(directory: Path) -> list[str]:
    """Files an ingest must not leave behind: temporary databases and their WAL or spill folders."""
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name or p.name.endswith(".tmp"))


def check_database(path: Path) -> list[str]:
    """Invariants an ingested database keeps whatever the input was."""
    import duckdb

    problems = []
    con = duckdb.connect(str(path), read_only=True)
    try:
        checks = {
            "runs": "SELECT count(*) = 0 FROM runs",
            "end before start": "SELECT count(*) > 0 FROM gpu_activity WHERE end_ns < start_ns",
            "launch end before start": "SELECT count(*) > 0 FROM launches WHERE end_ns < start_ns",
            "range end before start": "SELECT count(*) > 0 FROM cpu_ranges WHERE end_ns < start_ns",
            "no events counter": "SELECT count(*) = 0 FROM ingest_stats WHERE name = 'events'",
            "dangling launch_id": """SELECT count(*) > 0 FROM gpu_activity g WHERE launch_id IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM launches l WHERE l.run_id = g.run_id AND l.launch_id = g.launch_id)""",
            "rank without ranks row": """SELECT count(*) > 0 FROM gpu_activity g
                  WHERE NOT EXISTS (SELECT 1 FROM ranks r WHERE r.run_id = g.run_id AND r.rank = g.rank)""",
            "nan stat": "SELECT count(*) > 0 FROM ingest_stats WHERE isnan(value) OR isinf(value)",
        }
        for name, sql in checks.items():
            if con.execute(sql).fetchall()[0][0]:
                problems.append(name)
    finally:
        con.close()
    return problems


def stats_of(path: Path) -> dict[str, float]:
    """ingest_stats of the last run, summed over ranks."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT name, sum(value) FROM ingest_stats WHERE run_id = (SELECT max(run_id) FROM runs) GROUP BY name"
        ).fetchall()
    finally:
        con.close()
    return {name: float(value) for name, value in rows}


@cache
def _base_database(workdir: str, trace: Path = BASE_TRACE) -> Path:
    from traceview import api

    path = Path(workdir) / f"base-{trace.name}.db"
    api.ingest([trace], path)
    return path


def run_case(case: Case, workdir: Path) -> Outcome:
    """Run `case` in this process as its kind says and judge the result (the caller enforces the timeout)."""
    case_dir = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    try:
        if case.kind == "database":
            return _read_database(case, case_dir)
        if case.kind == "cli":
            return _run_command(case, case_dir, workdir)
        return _ingest(case, case_dir, workdir)
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def _input(case: Case, case_dir: Path) -> Path:
    """The case's trace file, or its directory of files, written into `case_dir`."""
    trace = case_dir / case.file_name
    if case.kind == "parquet":
        trace.mkdir()
        for name, data in case.files:
            (trace / name).write_bytes(data)
    else:
        trace.write_bytes(case.data)
    return trace


def _ingest(case: Case, case_dir: Path, workdir: Path) -> Outcome:
    from traceview import api
    from traceview.errors import TraceviewError
    from traceview.ingest import IngestOptions

    trace = _input(case, case_dir)
    db = case_dir / "out.db"
    before = None
    if case.existing_db:
        shutil.copyfile(_base_database(str(workdir)), db)
        before = db_fingerprint(db)
    try:
        api.ingest([trace], db, IngestOptions(label="case", salvage=case.salvage))
    except TraceviewError as error:
        return _judge_error(error, trace, db, before, case_dir)
    except Exception:
        return Outcome("failure", "unexpected exception:\n" + traceback.format_exc())
    left = leftovers(case_dir)
    if left:
        return Outcome("failure", f"ingest succeeded but left {left}")
    try:
        problems = check_database(db)
    except Exception:
        return Outcome("failure", "the database does not open read-only:\n" + traceback.format_exc())
    if problems:
        return Outcome("failure", f"ingested database breaks invariants: {problems}")
    if TOKEN.encode() in case.data and TOKEN.encode() in db.read_bytes():
        return Outcome("failure", "the planted token landed in the database file")
    return Outcome("ok", "", stats_of(db))


def _read_database(case: Case, case_dir: Path) -> Outcome:
    """Change a copy of a database as the case says (an attacker's plain DuckDB), then read it with every reading
    command: each works or fails in one line naming the file, changes no byte of it, and leaves nothing."""
    import duckdb
    from fuzzing_formats import damaged_bytes

    from traceview import api
    from traceview.db import damage_error
    from traceview.errors import TraceviewError

    db = case_dir / case.file_name
    db.write_bytes(case.data)
    with duckdb.connect(str(db)) as con:
        for statement in case.sql:
            with contextlib.suppress(duckdb.Error):
                con.execute(statement)
    if case.byte_seed is not None:
        db.write_bytes(damaged_bytes(case, db.read_bytes()))
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    readers = {"info": lambda: _info(db), "layers": lambda: api.layers(db), "diff": lambda: api.diff(db, db)}
    errors = []
    for name, read in readers.items():
        try:
            read()
        except Exception as error:  # judged here: worded (as the CLI words a damaged file) or not
            worded = error if isinstance(error, TraceviewError) else damage_error(error, [db])
            if worded is None:
                return Outcome("failure", f"{name}: unexpected exception:\n" + traceback.format_exc())
            message = str(worded)
            if "\n" in message or " — " not in message or not message.startswith(f"{db}: "):
                return Outcome("failure", f"{name}: not one line naming the file: {message!r}")
            errors.append(_problem_of(message, db))
    if hashlib.sha256(db.read_bytes()).hexdigest() != before:
        return Outcome("failure", "reading the database changed it")
    if leftovers(case_dir) or len(list(case_dir.iterdir())) > 1:
        return Outcome("failure", f"reading left {sorted(p.name for p in case_dir.iterdir())}")
    return Outcome("clean_error", errors[0]) if errors else Outcome("ok")


def _info(db: Path) -> list[object]:
    """What `traceview info` reads."""
    from traceview import api

    with api.connect(db) as con:
        return [api.summarize(con, run_id) for run_id in api.run_ids(con)]


def _run_command(case: Case, case_dir: Path, workdir: Path) -> Outcome:
    """Run the case's command line as a user does: exit 0, 1 (a failed gate) or 2, and on failure one `error:` line
    with its remedy; never a traceback; nothing left but what the command writes."""
    import subprocess
    import sys

    from fuzzing_formats import DATABASE_SEED

    places = {"{db}": case_dir / "run.db", "{trace}": case_dir / "trace.json.gz", "{out}": case_dir / "out.json"}
    shutil.copyfile(_base_database(str(workdir), DATABASE_SEED), places["{db}"])
    shutil.copyfile(BASE_TRACE, places["{trace}"])
    argv = [str(places.get(arg, arg)) for arg in case.argv]
    command = [sys.executable, "-m", "traceview.cli", *argv]
    try:
        done = subprocess.run(command, cwd=case_dir, capture_output=True, text=True, errors="replace", timeout=50)
    except subprocess.TimeoutExpired:
        return Outcome("hang", "the command ran past 50 s")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    if "Traceback" in done.stderr or done.returncode not in (0, 1, 2):
        return Outcome("failure", f"exit {done.returncode}: {done.stderr[-2000:]}")
    if done.returncode == 2 and (len(errors) != 1 or " — " not in errors[0]):
        return Outcome("failure", f"exit 2 without one worded error line: {done.stderr[-2000:]!r}")
    if leftovers(case_dir):
        return Outcome("failure", f"the command left {leftovers(case_dir)}")
    return Outcome("clean_error", errors[0][7:].split(" — ")[0][-80:]) if errors else Outcome("ok")


def _judge_error(error: Exception, trace: Path, db: Path, before: str | None, case_dir: Path) -> Outcome:
    message = str(error)
    problems = []
    if "\n" in message or "\r" in message:
        problems.append("message spans several lines")
    if " — " not in message:
        problems.append("message lacks ' — remedy'")
    if not (message.startswith(f"{trace}: ") or message.startswith(f"{trace}/") or message.startswith(f"{db}: ")):
        problems.append("message does not start with the file")
    if before is None and db.exists():
        problems.append("a database was created")
    if before is not None:
        try:
            if db_fingerprint(db) != before:
                problems.append("the existing database changed")
        except Exception as fingerprint_error:
            problems.append(f"the existing database no longer opens ({fingerprint_error})")
    left = leftovers(case_dir)
    if left:
        problems.append(f"left {left}")
    if problems:
        return Outcome("failure", f"{'; '.join(problems)}: {type(error).__name__}: {message!r}")
    return Outcome("clean_error", _problem_of(message, trace))


def _problem_of(message: str, trace: Path) -> str:
    problem = message.split(" — ")[0].removeprefix(f"{trace}: ")
    return problem.split("(")[0].strip()[:80]


# ---------------------------------------------------------------------------------------------------------
# A worker process with a per-case timeout


def _worker(conn: multiprocessing.connection.Connection, workdir: str) -> None:
    while True:
        case = conn.recv()
        if case is None:
            return
        try:
            outcome = run_case(case, Path(workdir))
        except BaseException:
            outcome = Outcome("failure", "the harness failed:\n" + traceback.format_exc())
        conn.send(outcome)


class CaseRunner:
    """Runs cases in a separate process, so a hang or a crash is caught and cannot take the caller down."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._tmp = tempfile.TemporaryDirectory(prefix="traceview-fuzz-")
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_worker, args=(child, self._tmp.name), daemon=True)
        self._process.start()
        child.close()

    def run(self, case: Case) -> Outcome:
        self._conn.send(case)
        if self._conn.poll(self.timeout_s):
            try:
                return self._conn.recv()
            except EOFError:
                pass
        hung = self._process.is_alive()
        code = self._process.exitcode
        self._process.kill()
        self._process.join()
        self._start()
        if hung:
            return Outcome("hang", f"no result within {self.timeout_s:g} s")
        return Outcome("failure", f"the worker process died (exit code {code})")

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self._conn.send(None)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
        self._tmp.cleanup()

    def __enter__(self) -> CaseRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
