"""Property: traceview reads a name from a trace in time linear in its length (issue 25, item 3).

A name is a prefix, a unit repeated, and a suffix: the issue's (`'k' + 'a(' * 100000`, which took the kernel name
parser past 120 s, and long text before `model.layers.N`), the shapes that each pattern and loop of the name code
could rescan (unclosed brackets, runs of spaces, return types, casts, lambdas, mangled lengths, long numbers),
and generated ones. Every function that reads a name (tests/scaling.py) is timed on names of 10k, 100k and 1M
characters in a worker process: its time may grow at most LINEAR_MAX times per 10x (a quadratic one grows 100x),
and it must finish within a minute.

`TRACEVIEW_SCALING_EXAMPLES=N` sets the number of generated shapes (default 4, derandomized).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from multiprocessing.pool import Pool
from pathlib import Path

import pytest
import scaling
from hostile_traces import traceview
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace

EXAMPLES = int(os.environ.get("TRACEVIEW_SCALING_EXAMPLES", "4"))
TIMEOUT_S = 60  # per shape, for every function and size: ~1.5 CPU-s when linear
# Pieces of names, as the code that reads names sees them: brackets, separators, qualifiers, keywords.
ATOMS = ["(", ")", "<", ">", "[", "]", "{", "}", "::", ",", " ", "*", "&", "a", "_", "1", "."]
ATOMS += [" const", "const ", "int ", "unsigned long ", "(unsigned long)1", "(bool)1", "[lambda(", " (instance 1)]"]
ATOMS += ["{lambda(float)#1}", "operator()", "<unnamed>", "layers.", "model.layers.3", "nn.Module: ", "Layer_", "step_"]
PREFIXES = ["", "k", "void ", "_Z", "_ZN", "f<", "nn.Module: ", "ProfilerStep#", "execute_context_"]
SUFFIXES = ["", " model.layers.3", "_3", ">(int)", "(int)::{lambda()#1}", "1"]
SHAPES = st.tuples(
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(ATOMS), min_size=1, max_size=4).map("".join),
    st.sampled_from(SUFFIXES),
)


@pytest.fixture(scope="module")
def worker() -> Iterator[list[Pool]]:
    """A process that times names (tests/scaling.py), in a list so that a test can replace one it had to stop."""
    pools = [multiprocessing.get_context("spawn").Pool(1)]
    yield pools
    pools[0].terminate()


def assert_linear(worker: list[Pool], prefix: str, unit: str, suffix: str) -> None:
    shape = f"{prefix!r} + {unit!r} * k + {suffix!r}"
    try:
        times = worker[0].apply_async(scaling.growth, (prefix, unit, suffix)).get(TIMEOUT_S)
    except multiprocessing.TimeoutError:
        worker[0].terminate()
        worker[0] = multiprocessing.get_context("spawn").Pool(1)
        pytest.fail(f"{shape}: not timed within {TIMEOUT_S} s at sizes {scaling.SIZES}: superlinear")
    for function, seconds in times.items():
        steps = [f"{t * 1e3:.2f} ms" for t in seconds]
        assert len(seconds) == len(scaling.SIZES) and not scaling.superlinear(seconds), (function, shape, steps)


@pytest.mark.heavy  # a timing property: 18 shapes at 10k-1M characters, tens of seconds
# The shapes, then one per pattern or loop that could rescan a name.
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate))
@given(shape=SHAPES)
@example(shape=("k", "a(", ""))  # kernel_names._drop_enclosing_parameters: every unclosed `(`
@example(shape=("", "a", " model.layers.3"))  # annotation.parse_layer_name: `[\w.]*$` before the index
@example(shape=("", ".", " model.layers.3"))
@example(shape=("", "f(", ")"))  # every `(` closed at the very end
@example(shape=("k", " ", "x"))  # a run of spaces not before `*` or `&`
@example(shape=("f<int a<", ",int a<", ""))  # a return type before a template that never closes
@example(shape=("", "[lambda(", ""))
@example(shape=("", "f()", ""))  # a parameter list at top level, again and again
@example(shape=("_Z", "1a", ""))  # mangled identifier lengths
@example(shape=("model.layers.", "1", ""))  # an index longer than any number
@example(shape=("step_", "1", ""))
@example(shape=("execute_context_", "1", "(a)_generation_1(a)"))
@example(shape=("triton_", "fused", "\nx"))  # align.fused_operations: a newline that `.` does not cross
@example(shape=("", "".join(map(chr, range(0x4E00, 0x4F2C))), ""))  # align.similarity: 300 characters, none common
def test_name_handling_is_linear(worker: list[Pool], shape: tuple[str, str, str]) -> None:
    assert_linear(worker, *shape)


def test_many_distinct_kernel_names_are_classified_at_the_cost_of_one_pattern_each() -> None:
    """Each class pattern is compiled once per statement, not once per name: 100,000 distinct names took 21 s on
    their own (26 s within an ingest, against 3.6 s for 100,000 kernels of one name); now about 0.1 s."""
    from traceview.db import duckdb_connect
    from traceview.ingest.common import kernel_class_table

    with duckdb_connect() as con:
        con.execute(
            "CREATE TEMP TABLE names AS SELECT 'void gemm_' || range || '<float>(int)' AS name FROM range(100000)"
        )
        con.execute("INSERT INTO names VALUES ('ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)')")
        start = time.perf_counter()
        kernel_class_table(con, "SELECT name FROM names")
        elapsed = time.perf_counter() - start
        classes = con.execute("SELECT name, category FROM _name_class").fetchall()
    assert classes == [("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "comm")]
    assert elapsed < 5, f"{elapsed:.1f} s"


def test_a_trace_of_hostile_names_ingests_in_seconds(tmp_path: Path) -> None:
    """A kernel named `'a(' * 50000`, a return type before 10,000 unclosed templates, a layer and a step numbered
    with 5,000 digits: 89 s and a traceback (int() of 5,000 digits) before; about a second now."""
    trace = KinetoTrace()
    for step in range(2):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for name in ("model.layers." + "9" * 5000, "step_" + "7" * 5000):
                with trace.cpu_range(name):
                    trace.launch_kernel("a(" * 50_000)
                    trace.launch_kernel("void gemm<" + ",int a<" * 10_000)
    result = traceview("ingest", trace.write(tmp_path / "names.json"), "-o", tmp_path / "run.db", timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.heavy  # a timing property, tens of seconds under load
def test_a_diff_of_hostile_names_runs_in_seconds(tmp_path: Path) -> None:
    """diff lines kernels up by name (align.py): a leftover kernel named with 200,000 characters of 300 kinds on
    each side (difflib's ratio of the two: minutes), and a fused kernel named `fused` 40,000 times before a newline
    (a regex rescanning the name from each `fused`: minutes)."""
    wide = "".join(map(chr, range(0x4E00, 0x4F2C)))
    odd = {
        "a": [(wide * 700)[:200_000], "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>>"],
        "b": [(wide[::-1] * 700)[:200_000], "triton_poi_fused_add_" + "fused" * 40_000 + "\nx"],
    }
    dbs = {}
    for side, names in odd.items():
        trace = KinetoTrace()
        for step in range(3):
            with trace.cpu_range(f"ProfilerStep#{step}"):
                for layer in range(2):
                    with trace.cpu_range(f"model.layers.{layer}"):
                        for name in ("gemm", *names, "gemm_out"):
                            trace.launch_kernel(name)
        dbs[side] = tmp_path / f"{side}.db"
        ingest = traceview("ingest", trace.write(tmp_path / f"{side}.json"), "-o", dbs[side], timeout=60)
        assert ingest.returncode == 0, ingest.stderr
    result = traceview("diff", dbs["a"], dbs["b"], "-f", "json", timeout=60)
    assert result.returncode == 0, result.stderr
    statuses = {row["status"] for row in json.loads(result.stdout)["kernels"]}
    assert {"kept"} < statuses
