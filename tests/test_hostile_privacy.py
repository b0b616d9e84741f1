"""Nothing from the profiled process's environment lands in the database.

A fake token is planted where profilers keep the environment: Kineto's top-level metadata (env-like dicts
such as `mast_job_environment`), and an nsys export's META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV and the
environment string in StringIds. After ingest its bytes must appear in no table and nowhere in the .db file.
The real sample export's own environment (in StringIds) is checked the same way.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES
from fuzzing import TOKEN, cut_down_sqlite, plant_nsys_token
from kineto_builder import KinetoTrace

from traceview import api
from traceview.ingest import IngestOptions

KINETO = SAMPLES / "compiled.pt.trace.json.gz"
NSYS = SAMPLES / "compiled.sqlite"


def token_in_tables(db: Path, token: str) -> list[str]:
    """Every table.column whose text (cast from any type) contains `token`."""
    found = []
    with duckdb.connect(str(db), read_only=True) as con:
        columns = con.execute(
            """SELECT table_name, column_name FROM duckdb_columns()
               WHERE NOT internal AND database_name = current_database()"""
        ).fetchall()
        for table, column in columns:
            sql = f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?'
            if con.execute(sql, [f"%{token}%"]).fetchall()[0][0]:
                found.append(f"{table}.{column}")
    return found


def assert_absent(db: Path, token: str) -> None:
    assert token_in_tables(db, token) == []
    for path in db.parent.glob(db.name + "*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def kineto_with_token(target: Path) -> Path:
    doc = json.loads(gzip.decompress(KINETO.read_bytes()))
    environment = {"HF_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": TOKEN + "-aws", "PATH": "/usr/bin"}
    planted = {
        "mast_job_environment": environment,
        "env": environment,
        "metadata": {"environment": environment, "argv": ["train.py", f"--token={TOKEN}"]},
        "distributedInfo": {**doc.get("distributedInfo", {}), "rank": 0, "env": environment},
    }
    target.write_text(json.dumps({**planted, **{k: v for k, v in doc.items() if k not in planted}}))
    return target


@pytest.mark.parametrize("existing", [False, True], ids=["new-db", "existing-db"])
def test_a_token_in_kineto_metadata_stays_out_of_the_database(tmp_path: Path, existing: bool) -> None:
    db = tmp_path / "out.db"
    if existing:
        api.ingest([SAMPLES / "eager.pt.trace.json.gz"], db)
    api.ingest([kineto_with_token(tmp_path / "with_token.json")], db)
    assert_absent(db, TOKEN)


def test_a_token_in_the_nsys_capture_metadata_and_environment_stays_out_of_the_database(tmp_path: Path) -> None:
    export = cut_down_sqlite(NSYS, tmp_path / "with_token.sqlite", max_rows=2000)
    with sqlite3.connect(export) as con:
        plant_nsys_token(con)
        con.execute("UPDATE StringIds SET value = value || ? WHERE value LIKE '%PATH=%'", [f"\x00HF_TOKEN={TOKEN}"])
        con.execute("INSERT INTO StringIds (id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), ?)", [TOKEN])
    db = tmp_path / "out.db"
    api.ingest([export], db)
    assert_absent(db, TOKEN)


def test_the_real_environment_of_the_sample_export_stays_out_of_the_database(tmp_path: Path) -> None:
    with sqlite3.connect(NSYS) as con:
        environment = con.execute("SELECT value FROM StringIds WHERE value LIKE '%PATH=%' LIMIT 1").fetchall()
    if not environment:
        pytest.skip("the sample export keeps no environment string")
    values = [v.split("=", 1)[1] for v in environment[0][0].split("\x00") if "=" in v]
    distinctive = [v for v in values if len(v) >= 12 and not v.startswith(("/usr", "/opt", "/etc", "/tmp"))]
    db = tmp_path / "out.db"
    api.ingest([Path(shutil.copyfile(NSYS, tmp_path / "compiled.sqlite"))], db)
    for value in distinctive[:20]:
        assert token_in_tables(db, value) == [], value


def test_the_checks_find_a_token_that_does_land(tmp_path: Path) -> None:
    """The detector itself: a token in a kernel name is data, kept, and found in a table and in the file."""
    doc = json.loads(gzip.decompress(KINETO.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] = f"kernel_{TOKEN}"
    trace = tmp_path / "named.json"
    trace.write_text(json.dumps(doc))
    db = tmp_path / "out.db"
    api.ingest([trace], db)
    assert "gpu_activity.name" in token_in_tables(db, TOKEN)
    assert TOKEN.encode() in db.read_bytes()


HOST = "gpu-node-7f3a.secret.example"


def kineto_on_host(target: Path) -> Path:
    doc = json.loads(gzip.decompress(KINETO.read_bytes()))
    target.write_text(json.dumps({**doc, "host_name": HOST, "hostname": HOST}))
    return target


def kineto_ranks_on_host(target: Path) -> Path:
    """Two small per-rank files, which are read together in one batch."""
    target.mkdir()
    for rank in (0, 1):
        trace = KinetoTrace(metadata={"host_name": HOST, "distributedInfo": {"rank": rank, "world_size": 2}})
        trace.launch_kernel("gemm")
        trace.write(target / f"rank-{rank}.json")
    return target


def nsys_on_host(target: Path) -> Path:
    export = cut_down_sqlite(NSYS, target, max_rows=2000)
    with sqlite3.connect(export) as con:
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", [HOST])
    return export


def hostnames(db: Path) -> list[str | None]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT DISTINCT hostname FROM ranks").fetchall()]


@pytest.mark.parametrize(
    ("make", "name"),
    [(kineto_on_host, "on_host.json"), (kineto_ranks_on_host, "ranks"), (nsys_on_host, "on_host.sqlite")],
    ids=["kineto", "kineto-per-rank-files", "nsys"],
)
def test_host_names_stay_out_unless_asked_for(tmp_path: Path, make: Callable[[Path], Path], name: str) -> None:
    trace = make(tmp_path / name)
    db, parquet = tmp_path / "out.db", tmp_path / "parquet"
    api.ingest([trace], db)
    api.export_parquet(db, parquet)
    assert hostnames(db) == [None]
    assert_absent(db, HOST)
    for part in parquet.rglob("*.parquet"):
        assert HOST.encode() not in part.read_bytes(), part
    kept = tmp_path / "kept.db"
    api.ingest([trace], kept, IngestOptions(keep_host=True))
    assert set(hostnames(kept)) == {HOST}
