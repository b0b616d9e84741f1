"""Hostile-input fuzzing for ingest: mutate real traces, ingest each mutant in a worker process, judge it.

Used by tests/test_fuzz_*.py (a bounded sample under hypothesis) and bench/fuzz.py (10,000+ cases);
tests/fuzz_runner.py runs and judges the cases. Mutators take a `random.Random`, so hypothesis can drive
them (`st.randoms()`) and the script can replay a case from its seed.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
HTA = HERE / "data" / "hta"
NSYS_DATA = HERE / "data" / "nsys"
SAMPLES = HERE.parent / "sample_traces"
BASE_TRACE = HTA / "trace_compare" / "base" / "base.json.gz"

MAX_EVENTS = 300
TOKEN = "hf_FAKEtoken123456789"

# ---------------------------------------------------------------------------------------------------------
# Seeds: real traces cut down to a few hundred events


def kineto_seed_files() -> list[Path]:
    """Small real Kineto traces (bundled HTA fixtures and the sample traces)."""
    files = sorted(p for p in HTA.rglob("*.json.gz") if p.stat().st_size < 3_000_000)
    return files + sorted(SAMPLES.glob("*.pt.trace.json.gz"))


def nsys_seed_files() -> list[Path]:
    """Real Nsight Systems SQLite exports."""
    return sorted(NSYS_DATA.glob("*.sqlite")) + sorted(SAMPLES.glob("*.sqlite"))


@cache
def kineto_seed(path: Path, max_events: int = MAX_EVENTS) -> bytes:
    """`path` as JSON with at most `max_events` events: every metadata event, then the earliest others."""
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes())
    events = doc.get("traceEvents") or []
    meta = [e for e in events if isinstance(e, dict) and e.get("ph") == "M"][:50]
    rest = [e for e in events if isinstance(e, dict) and e.get("ph") != "M"]
    rest.sort(key=lambda e: float(e.get("ts", 0) or 0))
    doc["traceEvents"] = meta + rest[: max_events - len(meta)]
    return json.dumps(doc).encode()


def cut_down_sqlite(source: Path, target: Path, max_rows: int = MAX_EVENTS) -> Path:
    """Copy an nsys export keeping the earliest `max_rows` rows of every large table."""
    shutil.copyfile(source, target)
    con = sqlite3.connect(target)
    try:
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            if table == "StringIds" or table.startswith("ENUM_"):
                continue
            n = con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]
            if n <= max_rows:
                continue
            columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")').fetchall()]
            order = "start" if "start" in columns else "rowid"
            con.execute(
                f'DELETE FROM "{table}" WHERE rowid NOT IN '
                f'(SELECT rowid FROM "{table}" ORDER BY "{order}" LIMIT {max_rows})'
            )
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return target


@cache
def nsys_seed(path: Path) -> bytes:
    """The bytes of a cut-down copy of an nsys export."""
    with tempfile.TemporaryDirectory(prefix="traceview-seed-") as tmp:
        return cut_down_sqlite(path, Path(tmp) / path.name).read_bytes()


# ---------------------------------------------------------------------------------------------------------
# Hostile values

HOSTILE_NUMBERS: list[Any] = [-1, 0, -0.0, 0.5, 1e300, -1e300, 1e-300, 2**31, 2**63 - 1, 2**63, 2**64, 2**70]
HOSTILE_NUMBERS += [-(2**63), -(2**70), 10**40]
HOSTILE_STRINGS: list[str] = ["", "\x00", "\x01\x02\x1b[31m\x7f", "a\nb\tc\r", "\u202eevil", "名前", "\ud800"]
HOSTILE_STRINGS += ["🔥" * 20]
HOSTILE_STRINGS += ['"quoted"', "\\", "]}", "},{", '"traceEvents": [', "'; DROP TABLE runs; --", "%s%n%x", "x" * 5000]
HOSTILE_STRINGS += ["nccl:all_reduce", "ncclKernel_AllReduce_RING_LL_Sum_float", "nn.Module: x", "12.5", "-3", "1e999"]
HOSTILE_STRINGS += ["ProfilerStep#", "ProfilerStep#-1", "ProfilerStep#99999999999999999999", "NaN"]
HOSTILE_STRINGS += ["model.layers.99999999999999999999", "void f<(anonymous namespace)::A<<<<<(((", ">>>)))]]]"]
HOSTILE_VALUES: list[Any] = [*HOSTILE_NUMBERS, *HOSTILE_STRINGS[:6], "12.5", "abc", None, True, False, [], [1, 2, 3]]
HOSTILE_VALUES += [[None], ["a", "b"], {}, {"a": 1}, float("nan"), float("inf")]
EVENT_FIELDS = ("ts", "dur", "name", "cat", "ph", "pid", "tid", "args", "id")
ARG_FIELDS = ("correlation", "device", "stream", "grid", "block", "bytes", "Collective name", "graph id")
ARG_FIELDS += ("graph node id", "name", "External id")
TOP_LEVEL_KEYS = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion", "cupti_version")
TOP_LEVEL_KEYS += ("cuda_runtime_version", "host_name", "traceName", "displayTimeUnit")


def hostile_value(rng: random.Random) -> Any:
    """A value of the wrong type or an extreme size."""
    pool = rng.choice([HOSTILE_VALUES, HOSTILE_NUMBERS, HOSTILE_STRINGS])
    return copy.deepcopy(rng.choice(pool))


# ---------------------------------------------------------------------------------------------------------
# Kineto mutations: (rng, document) -> None, changing the document in place

Doc = dict[str, Any]


def _events(doc: Doc) -> list[Any]:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


KEPT_CATEGORIES = {
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_runtime",
    "cuda_driver",
    "user_annotation",
    "gpu_user_annotation",
}


def _pick(rng: random.Random, events: list[Any], where: Callable[[dict[str, Any]], bool] | None = None) -> list[Any]:
    """1, a few or many events (matching `where`); half the time only of the categories traceview keeps."""
    if where is None and rng.random() < 0.5:
        where = lambda e: str(e.get("cat", "")).lower() in KEPT_CATEGORIES  # noqa: E731
    pool = [e for e in events if isinstance(e, dict) and (where is None or where(e))]
    if not pool:
        return []
    return rng.sample(pool, rng.randint(1, min(len(pool), rng.choice([1, 3, 30]))))


def _is_kernel(e: dict[str, Any]) -> bool:
    return str(e.get("cat", "")).lower() == "kernel"


def _is_launch(e: dict[str, Any]) -> bool:
    return str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime", "hip_runtime")


def m_delete_events(rng: random.Random, doc: Doc) -> None:
    events = _events(doc)
    for e in _pick(rng, events):
        events.remove(e)


def m_duplicate_events(rng: random.Random, doc: Doc) -> None:
    events = _events(doc)
    for e in _pick(rng, events):
        events.insert(rng.randrange(len(events) + 1), copy.deepcopy(e))


def m_shuffle(rng: random.Random, doc: Doc) -> None:
    rng.shuffle(_events(doc))


def m_reverse(rng: random.Random, doc: Doc) -> None:
    _events(doc).reverse()


def m_field_wrong_type(rng: random.Random, doc: Doc) -> None:
    name = rng.choice(EVENT_FIELDS)
    value = hostile_value(rng)
    for e in _pick(rng, _events(doc)):
        e[name] = copy.deepcopy(value)


def m_field_missing(rng: random.Random, doc: Doc) -> None:
    name = rng.choice(EVENT_FIELDS)
    for e in _pick(rng, _events(doc)):
        e.pop(name, None)


def m_arg_wrong_type(rng: random.Random, doc: Doc) -> None:
    name = rng.choice(ARG_FIELDS)
    value = hostile_value(rng)
    for e in _pick(rng, _events(doc), lambda e: isinstance(e.get("args"), dict)):
        e["args"][name] = copy.deepcopy(value)


def m_args_not_a_dict(rng: random.Random, doc: Doc) -> None:
    value = rng.choice([[], [1, 2], ["correlation", 5], "args", 7, None])
    for e in _pick(rng, _events(doc)):
        e["args"] = copy.deepcopy(value)


def m_hostile_name(rng: random.Random, doc: Doc) -> None:
    for e in _pick(rng, _events(doc)):
        e["name"] = rng.choice(HOSTILE_STRINGS) + rng.choice(["", str(e.get("name", ""))])


def m_extreme_times(rng: random.Random, doc: Doc) -> None:
    key = rng.choice(["ts", "dur"])
    value = rng.choice(HOSTILE_NUMBERS)
    for e in _pick(rng, _events(doc)):
        e[key] = value


def m_end_before_start(rng: random.Random, doc: Doc) -> None:
    for e in _pick(rng, _events(doc), _is_kernel) or _pick(rng, _events(doc)):
        dur = e.get("dur")
        number = dur if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur else 1
        e["dur"] = -abs(number) * rng.choice([1, 1000])


def m_times_as_strings(rng: random.Random, doc: Doc) -> None:
    for e in _pick(rng, _events(doc)):
        key = rng.choice(["ts", "dur"])
        if key in e:
            e[key] = rng.choice([str(e[key]), f" {e[key]} ", f"{e[key]}us"])


def m_unclosed_ranges(rng: random.Random, doc: Doc) -> None:
    events = _events(doc)
    for e in _pick(rng, events, lambda e: e.get("ph") == "X"):
        choice = rng.randrange(3)
        if choice == 0:
            e["ph"] = "B"
            e.pop("dur", None)
        elif choice == 1:
            e.pop("dur", None)
        else:
            e["dur"] = 1e15
    if rng.random() < 0.3:
        events.append({"ph": "E", "pid": 1, "tid": 1, "ts": 0})


def m_correlation_nowhere(rng: random.Random, doc: Doc) -> None:
    for e in _pick(rng, _events(doc), lambda e: _is_kernel(e) and isinstance(e.get("args"), dict)):
        e["args"]["correlation"] = rng.choice([999_999_999, -5, 0, 2**62])


def m_correlation_shared(rng: random.Random, doc: Doc) -> None:
    launches = _pick(rng, _events(doc), lambda e: _is_launch(e) and isinstance(e.get("args"), dict))
    kernels = _pick(rng, _events(doc), lambda e: _is_kernel(e) and isinstance(e.get("args"), dict))
    shared = rng.choice([1, 424242])
    for e in launches + kernels:
        e["args"]["correlation"] = shared


def m_top_level(rng: random.Random, doc: Doc) -> None:
    key = rng.choice(TOP_LEVEL_KEYS)
    value = hostile_value(rng)
    if key == "distributedInfo" and rng.random() < 0.6:
        value = {"rank": hostile_value(rng), "world_size": hostile_value(rng), "backend": "nccl"}
    if key == "deviceProperties" and rng.random() < 0.6:
        value = [{"id": hostile_value(rng), "name": hostile_value(rng)}, hostile_value(rng)]
    if rng.random() < 0.5:
        doc[key] = value
    else:  # after the traceEvents array
        events = doc.pop("traceEvents", [])
        doc["traceEvents"] = events
        doc[key] = value


def m_trace_events_not_a_list(rng: random.Random, doc: Doc) -> None:
    doc["traceEvents"] = rng.choice([None, {}, {"a": 1}, "[]", 5, [[]], [1, 2], [None], [[{"ph": "X"}]]])


def m_plant_token(rng: random.Random, doc: Doc) -> None:
    doc[rng.choice(["mast_job_environment", "env", "environment"])] = {"HF_TOKEN": TOKEN, "PATH": "/usr/bin"}


KINETO_MUTATIONS: dict[str, Callable[[random.Random, Doc], None]] = {
    name.removeprefix("m_"): fn for name, fn in globals().items() if name.startswith("m_") and callable(fn)
}


# ---------------------------------------------------------------------------------------------------------
# Byte mutations: (rng, bytes) -> bytes


def b_truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def b_delete_span(rng: random.Random, data: bytes) -> bytes:
    start = rng.randrange(len(data) + 1)
    return data[:start] + data[start + rng.randint(1, 200) :]


def b_duplicate_span(rng: random.Random, data: bytes) -> bytes:
    start = rng.randrange(len(data) + 1)
    return data[: start + 200] + data[start:]


def b_insert_bytes(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    junk = rng.choice([b"\x00", b"\xff\xfe", b"\xc3\x28", b"]", b"}", b"{", b",", b'"', b"\\", rng.randbytes(8)])
    return data[:at] + junk + data[at:]


def b_flip_bytes(rng: random.Random, data: bytes) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if buffer:
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
    return bytes(buffer)


BYTE_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    name.removeprefix("b_"): fn for name, fn in globals().items() if name.startswith("b_") and callable(fn)
}


def serialize(rng: random.Random, doc: Any) -> bytes:
    """JSON the way a profiler might write it: PyTorch's layout, compact, spaced or indented; ASCII or UTF-8."""
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and rng.random() < 0.5:
        return pytorch_layout(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    indent = rng.choice([None, None, 1, 2])
    separators = rng.choice([None, (",", ":")]) if indent is None else None
    text = json.dumps(doc, indent=indent, separators=separators, ensure_ascii=rng.random() < 0.5)
    return text.encode("utf-8", "surrogatepass")


def pytorch_layout(doc: dict[str, Any], ensure_ascii: bool = True) -> str:
    """`doc` laid out as torch.profiler writes traces: one event per `  {\n    ...\n  }` block (the layout
    traceview's fast path splits at `\n  },\n  {\n`), the other keys around the array."""

    def member(key: str, value: Any) -> str:
        return f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=ensure_ascii)}"

    def event(e: Any) -> str:
        if not isinstance(e, dict) or not e:
            return "  " + json.dumps(e, ensure_ascii=ensure_ascii)
        body = ", ".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=ensure_ascii)}" for k, v in e.items())
        return "  {\n    " + body + "\n  }"

    keys = list(doc)
    at = keys.index("traceEvents")
    before = [member(k, doc[k]) for k in keys[:at]]
    after = [member(k, doc[k]) for k in keys[at + 1 :]]
    array = '  "traceEvents": [\n' + ",\n".join(event(e) for e in doc["traceEvents"]) + "\n]"
    return "{\n" + ",\n".join([*before, array, *after]) + "\n}\n"


# ---------------------------------------------------------------------------------------------------------
# nsys SQLite mutations: (rng, connection) -> None


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")').fetchall()]


INTERESTING_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "StringIds",
    "ThreadNames",
    "PROCESSES",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_CAPTURE",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "CUDA_GRAPH_NODE_EVENTS",
)


def _table(rng: random.Random, con: sqlite3.Connection) -> str:
    present = _tables(con)
    preferred = [t for t in INTERESTING_TABLES if t in present]
    return rng.choice(preferred if preferred and rng.random() < 0.85 else present)


# Columns traceview reads (mutated more often than the rest).
_READ_COLUMNS = (
    "start end globalPid globalTid deviceId streamId correlationId demangledName shortName nameId eventType text "
    "textId domainId gridX gridY gridZ blockX blockY blockZ bytes copyKind srcKind dstKind memKind graphId "
    "graphNodeId eventClass name value id cudaId gpuId cuDevice utcEpochNs systemClockNs stopTime duration"
)
READ_COLUMNS = frozenset(_READ_COLUMNS.split())


def _column(rng: random.Random, con: sqlite3.Connection, table: str) -> str:
    columns = _columns(con, table)
    read = [c for c in columns if c in READ_COLUMNS]
    return rng.choice(read if read and rng.random() < 0.8 else columns)


def _some_rows(rng: random.Random, con: sqlite3.Connection, table: str) -> str:
    """A WHERE clause picking 1 to all rows, the same ones for the same rng (no SQLite random())."""
    n = rng.choice([1, 3, 30, 100000])
    order = f"(rowid * {rng.randrange(1, 1 << 20)} + {rng.randrange(1 << 20)}) % 1000003"
    return f'rowid IN (SELECT rowid FROM "{table}" ORDER BY {order} LIMIT {n})'


SQLITE_VALUES: list[Any] = [
    *["abc", "", "12", " 12", "1e3", "\x00", "名前", b"\x00\xff", b"\xed\xa0\x80"],
    *[1.5, -1, 0, 2**31, 2**63 - 1, -(2**63), 1e300, -1e300, float("inf"), float("-inf"), float("nan")],
]


def s_drop_table(rng: random.Random, con: sqlite3.Connection) -> None:
    con.execute(f'DROP TABLE "{_table(rng, con)}"')


def _update(con: sqlite3.Connection, table: str, sql: str, params: list[Any]) -> None:
    """Run an UPDATE; when a NOT NULL or CHECK constraint refuses it, drop the table's constraints and retry."""
    try:
        con.execute(sql, params)
    except sqlite3.IntegrityError:
        con.execute(f'CREATE TABLE "_loose" AS SELECT * FROM "{table}"')
        con.execute(f'DROP TABLE "{table}"')
        con.execute(f'ALTER TABLE "_loose" RENAME TO "{table}"')
        con.execute(sql, params)


def s_nulls(rng: random.Random, con: sqlite3.Connection) -> None:
    table = _table(rng, con)
    column = _column(rng, con, table)
    _update(con, table, f'UPDATE "{table}" SET "{column}" = NULL WHERE {_some_rows(rng, con, table)}', [])


def s_wrong_type(rng: random.Random, con: sqlite3.Connection) -> None:
    table = _table(rng, con)
    column = _column(rng, con, table)
    value = rng.choice(SQLITE_VALUES)
    _update(con, table, f'UPDATE "{table}" SET "{column}" = ? WHERE {_some_rows(rng, con, table)}', [value])


def s_delete_rows(rng: random.Random, con: sqlite3.Connection) -> None:
    table = rng.choice(["StringIds", _table(rng, con)])
    if table in _tables(con):
        con.execute(f'DELETE FROM "{table}" WHERE {_some_rows(rng, con, table)}')


def s_duplicate_rows(rng: random.Random, con: sqlite3.Connection) -> None:
    table = _table(rng, con)
    columns = ", ".join(f'"{c}"' for c in _columns(con, table) if c != "id")
    con.execute(f'INSERT OR IGNORE INTO "{table}" ({columns}) SELECT {columns} FROM "{table}" LIMIT 20')


def s_end_before_start(rng: random.Random, con: sqlite3.Connection) -> None:
    tables = [t for t in _tables(con) if {"start", "end"} <= set(_columns(con, t))]
    if tables:
        table = rng.choice(tables)
        con.execute(f'UPDATE "{table}" SET "end" = "start" - 1000 WHERE {_some_rows(rng, con, table)}')


def s_unclosed_ranges(rng: random.Random, con: sqlite3.Connection) -> None:
    if "NVTX_EVENTS" in _tables(con):
        con.execute(f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE {_some_rows(rng, con, "NVTX_EVENTS")}')


def s_correlation(rng: random.Random, con: sqlite3.Connection) -> None:
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        if table in _tables(con) and "correlationId" in _columns(con, table):
            value = rng.choice([1, 999_999_999, -1])
            con.execute(f'UPDATE "{table}" SET correlationId = ? WHERE {_some_rows(rng, con, table)}', [value])


def s_hostile_strings(rng: random.Random, con: sqlite3.Connection) -> None:
    if "StringIds" in _tables(con):
        value = rng.choice(HOSTILE_STRINGS).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        con.execute(f"UPDATE StringIds SET value = ? || value WHERE {_some_rows(rng, con, 'StringIds')}", [value])


def s_invalid_utf8(rng: random.Random, con: sqlite3.Connection) -> None:
    table = rng.choice(["StringIds", _table(rng, con)])
    column = "value" if table == "StringIds" else _column(rng, con, table)
    junk = rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\xc3\x28", b"a\x00b"])
    where = _some_rows(rng, con, table)
    _update(con, table, f'UPDATE "{table}" SET "{column}" = CAST(? AS TEXT) WHERE {where}', [junk])


def s_extreme_times(rng: random.Random, con: sqlite3.Connection) -> None:
    tables = [t for t in _tables(con) if "start" in _columns(con, t)]
    if tables:
        table = rng.choice(tables)
        column = rng.choice([c for c in ("start", "end") if c in _columns(con, table)])
        value = rng.choice([-1, 0, 2**63 - 1, -(2**63), 2**62, -(2**62), 1e300, 1e19, float("inf")])
        con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE {_some_rows(rng, con, table)}', [value])


def s_plant_token(rng: random.Random, con: sqlite3.Connection) -> None:
    plant_nsys_token(con)


SQLITE_MUTATIONS: dict[str, Callable[[random.Random, sqlite3.Connection], None]] = {
    name.removeprefix("s_"): fn for name, fn in globals().items() if name.startswith("s_") and callable(fn)
}


def plant_nsys_token(con: sqlite3.Connection) -> None:
    """Put the fake token where nsys keeps the profiled process's environment."""
    if "META_DATA_CAPTURE" not in _tables(con):
        con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
    columns = _columns(con, "META_DATA_CAPTURE")
    con.execute(
        f'INSERT INTO META_DATA_CAPTURE ("{columns[0]}", "{columns[-1]}") VALUES (?, ?)',
        ["ENV_HF_TOKEN", f"HF_TOKEN={TOKEN}"],
    )
    if "TARGET_INFO_SYSTEM_ENV" in _tables(con):
        columns = _columns(con, "TARGET_INFO_SYSTEM_ENV")
        values = ", ".join("?" for _ in columns)
        con.execute(f"INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ({values})", [TOKEN] * len(columns))


# ---------------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One fuzz input: the bytes of a trace file, how to ingest it, and how it was made. `kind` says what the runner
    does with it: `ingest` the file; `parquet`: ingest the directory `file_name` of `files`; `database`: read the
    database `data` after running `sql` on it (and a byte mutation drawn from `byte_seed`); `cli`: run `argv`
    (tests/fuzzing_formats.py makes the last three)."""

    data: bytes
    file_name: str
    salvage: bool = False
    existing_db: bool = False
    mutations: tuple[str, ...] = ()
    seed_file: str = ""
    kind: str = "ingest"
    files: tuple[tuple[str, bytes], ...] = ()
    sql: tuple[str, ...] = ()
    byte_seed: int | None = None
    argv: tuple[str, ...] = ()


def kineto_case(rng: random.Random, seeds: list[Path] | None = None) -> Case:
    """A mutated Kineto trace: 0-3 structural mutations, then maybe one on the bytes; plain or gzipped."""
    seed = rng.choice(seeds or kineto_seed_files())
    doc = json.loads(kineto_seed(seed))
    applied = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        name = rng.choice(sorted(KINETO_MUTATIONS))
        KINETO_MUTATIONS[name](rng, doc)
        applied.append(name)
    data = serialize(rng, doc)
    gz = rng.random() < 0.3
    if rng.random() < 0.4:
        if gz and rng.random() < 0.5:
            data = gzip.compress(data, mtime=0)
            gz = False
            name = rng.choice(sorted(BYTE_MUTATIONS))
            data = BYTE_MUTATIONS[name](rng, data)
            applied.append(f"gz_{name}")
        else:
            name = rng.choice(sorted(BYTE_MUTATIONS))
            data = BYTE_MUTATIONS[name](rng, data)
            applied.append(name)
    if gz:
        data = gzip.compress(data, mtime=0)
    file_name = rng.choice(["trace.json", "trace.pt.trace.json", "rank-3.json", "trace"]) + (".gz" if gz else "")
    if data[:2] == b"\x1f\x8b" and not file_name.endswith(".gz"):
        file_name += ".gz"
    return Case(
        data=data,
        file_name=file_name,
        salvage=rng.random() < 0.3,
        existing_db=rng.random() < 0.25,
        mutations=tuple(applied),
        seed_file=str(seed),
    )


def nsys_case(rng: random.Random, seeds: list[Path] | None = None) -> Case:
    """A mutated nsys SQLite export: 0-3 mutations through sqlite, then maybe one on the file's bytes."""
    seed = rng.choice(seeds or nsys_seed_files())
    applied = []
    with tempfile.TemporaryDirectory(prefix="traceview-case-") as tmp:
        path = Path(tmp) / "trace.sqlite"
        path.write_bytes(nsys_seed(seed))
        con = sqlite3.connect(path)
        try:
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                name = rng.choice(sorted(SQLITE_MUTATIONS))
                try:
                    SQLITE_MUTATIONS[name](rng, con)
                except sqlite3.Error as error:  # e.g. the table was dropped by an earlier mutation
                    name += f" (skipped: {error})"
                applied.append(name)
            con.commit()
        finally:
            con.close()
        data = path.read_bytes()
    if rng.random() < 0.25:
        name = rng.choice(sorted(BYTE_MUTATIONS))
        data = BYTE_MUTATIONS[name](rng, data)
        applied.append(name)
    return Case(
        data=data,
        file_name=rng.choice(["trace.sqlite", "report.sqlite"]),
        existing_db=rng.random() < 0.25,
        mutations=tuple(applied),
        seed_file=str(seed),
    )
