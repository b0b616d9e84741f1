"""Fuzzing Kineto ingest (a bounded sample for CI; bench/fuzz.py runs 10,000+).

Two kinds of property:
- mutated real traces (tests/fuzzing.py: truncation, wrong types, extreme numbers, hostile names, deleted,
  duplicated and reordered events, ...) either ingest or fail with a one-line error, leaving no database
  behind; each runs in a worker process with a timeout, so a hang fails the test instead of hanging CI;
- on a small synthetic trace, each oddity is counted: every kernel of the input is either in gpu_activity
  or in an ingest_stats counter, and the counters say how many were odd.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import fuzz_runner
import fuzzing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace

from traceview import api

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
PROPERTY = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
KERNELS = 6


@pytest.mark.heavy  # fuzzing real traces, tens of seconds
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_mutated_real_traces_ingest_or_fail_cleanly(runner: fuzz_runner.CaseRunner, rng: random.Random) -> None:
    case = fuzzing.kineto_case(rng, SEEDS)
    outcome = runner.run(case)
    assert outcome.kind in ("ok", "clean_error"), f"{case.mutations} salvage={case.salvage}: {outcome.detail}"


# A few small seeds keep CI fast; bench/fuzz.py draws from every bundled trace.
SEEDS = [p for p in fuzzing.kineto_seed_files() if p.stat().st_size < 60_000][:8]


# ---------------------------------------------------------------------------------------------------------
# Oddities on a synthetic trace, and the counters that must account for them


def synthetic() -> KinetoTrace:
    trace = KinetoTrace()
    with trace.cpu_range("ProfilerStep#0"):
        for i in range(KERNELS):
            with trace.cpu_range(f"model.layers.{i % 2}"):
                trace.launch_kernel(f"void kernel_{i}<float>(float*)", dur_us=2 + i)
    return trace


def kernels_of(trace: KinetoTrace) -> list[dict[str, Any]]:
    return [e for e in trace.events if e["cat"] == "kernel"]


def ingest(trace: KinetoTrace, tmp: Path) -> tuple[dict[str, float], list[tuple[Any, ...]]]:
    """Ingest; return ingest_stats (name -> value summed over ranks) and the kernels (name, start_ns, end_ns)."""
    db = tmp / "t.db"
    for leftover in tmp.glob("t.db*"):
        leftover.unlink()
    api.ingest([trace.write(tmp / "t.json")], db)
    with duckdb.connect(str(db), read_only=True) as con:
        stats = dict(con.execute("SELECT name, sum(value) FROM ingest_stats GROUP BY name").fetchall())
        kernels = con.execute(
            "SELECT name, start_ns, end_ns, launch_id FROM gpu_activity WHERE kind = 'kernel' ORDER BY start_ns, name"
        ).fetchall()
    return stats, kernels


picks = st.lists(st.integers(0, KERNELS - 1), min_size=1, max_size=KERNELS, unique=True)


@PROPERTY
@given(which=picks, factor=st.sampled_from([1, 1000]))
def test_kernels_that_end_before_they_start_are_kept_with_zero_duration_and_counted(
    tmp_path_factory: pytest.TempPathFactory, which: list[int], factor: int
) -> None:
    trace = synthetic()
    for i in which:
        kernels_of(trace)[i]["dur"] = -3.0 * factor
    stats, kernels = ingest(trace, tmp_path_factory.mktemp("neg"))
    assert len(kernels) == KERNELS
    assert stats.get("negative_duration.kernel") == len(which)
    assert sum(1 for _, start, end, _ in kernels if start == end) == len(which)


@PROPERTY
@given(which=picks, target=st.sampled_from([999_999, -5, 0, 2**62]))
def test_kernels_whose_correlation_points_nowhere_are_counted(
    tmp_path_factory: pytest.TempPathFactory, which: list[int], target: int
) -> None:
    trace = synthetic()
    for i in which:
        kernels_of(trace)[i]["args"]["correlation"] = target
    stats, kernels = ingest(trace, tmp_path_factory.mktemp("corr"))
    assert len(kernels) == KERNELS
    assert stats["kernels_without_launch"] == len(which) == sum(1 for k in kernels if k[3] is None)


@PROPERTY
@given(copies=st.integers(1, 3), which=st.integers(0, KERNELS - 1))
def test_a_correlation_shared_by_several_launches_is_counted(
    tmp_path_factory: pytest.TempPathFactory, copies: int, which: int
) -> None:
    trace = synthetic()
    launches = [e for e in trace.events if e["cat"] == "cuda_runtime"]
    for n in range(copies):
        twin = json.loads(json.dumps(launches[which]))
        twin["ts"] += 0.25 * (n + 1)
        trace.events.append(twin)
    stats, kernels = ingest(trace, tmp_path_factory.mktemp("shared"))
    assert stats["correlation_ids_with_several_launches"] == 1
    assert all(k[3] is not None for k in kernels)


@PROPERTY
@given(
    which=picks,
    value=st.sampled_from(["12.5", "abc", "", None, [], {}, True, 1e300, -1e300, 2**70, -(2**70), 2**63]),
    field=st.sampled_from(["ts", "dur"]),
)
def test_every_kernel_with_an_unusable_time_is_kept_or_counted(
    tmp_path_factory: pytest.TempPathFactory, which: list[int], value: Any, field: str
) -> None:
    trace = synthetic()
    for i in which:
        kernels_of(trace)[i][field] = value
    stats, kernels = ingest(trace, tmp_path_factory.mktemp("time"))
    dropped = sum(v for name, v in stats.items() if name.startswith(("missing_timestamp.kernel", "time_out_of_range")))
    assert len(kernels) + dropped == KERNELS, stats
    assert all(end >= start for _, start, end, _ in kernels)


@pytest.mark.heavy  # two ingests per example, tens of seconds
@PROPERTY
@given(seed=st.integers(0, 2**32 - 1))
def test_the_order_of_events_in_the_file_does_not_matter(tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    trace = synthetic()
    _, expected = ingest(trace, tmp_path_factory.mktemp("ordered"))
    random.Random(seed).shuffle(trace.events)
    _, got = ingest(trace, tmp_path_factory.mktemp("shuffled"))
    assert got == expected


@PROPERTY
@given(name=st.text(min_size=1, max_size=40) | st.sampled_from(fuzzing.HOSTILE_STRINGS[1:]))
def test_kernel_names_with_any_characters_arrive_unchanged(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        name = name.encode("utf-8", "replace").decode()  # a lone surrogate is not text; tests/fuzzing.py sends those
    trace = synthetic()
    kernels_of(trace)[0]["name"] = name
    _, kernels = ingest(trace, tmp_path_factory.mktemp("name"))
    assert name in [k[0] for k in kernels]


@PROPERTY
@given(which=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True), phase=st.sampled_from(["B", "E", "i"]))
def test_ranges_that_never_close_are_counted(
    tmp_path_factory: pytest.TempPathFactory, which: list[int], phase: str
) -> None:
    """Kineto writes complete events (ph X); a B without its E (or a stray E, an instant) is counted, not lost."""
    trace = synthetic()
    ranges = [e for e in trace.events if e["cat"] == "user_annotation"]
    for i in which:
        ranges[i]["ph"] = phase
        ranges[i].pop("dur")
    stats, kernels = ingest(trace, tmp_path_factory.mktemp("open"))
    assert len(kernels) == KERNELS
    assert stats["skipped_phase.user_annotation"] == len(which)


@pytest.mark.parametrize("number", ["99999999999999999999", "2147483648", "-5", "007"])
def test_layer_and_step_names_with_absurd_numbers_ingest(tmp_path: Path, number: str) -> None:
    trace = KinetoTrace()
    with trace.cpu_range(f"ProfilerStep#{number}"):
        for layer in (number, "1"):
            with trace.cpu_range(f"model.layers.{layer}"):
                trace.launch_kernel("void gemm<float>(float*)")
    _, kernels = ingest(trace, tmp_path)
    assert len(kernels) == 2
