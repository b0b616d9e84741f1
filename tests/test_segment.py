"""Segmentation end to end on synthetic Kineto traces: steps, layers by annotation, CUDA graph and period."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segment_fixtures import GRAPH_NODE_BASE, Model, random_names, reference_layer_counts, write_trace

import traceview
from traceview.errors import UsageError
from traceview.segment import Method, SegmentOptions, pipeline
from traceview.segment.annotation import DEFAULT_CANDIDATE, parse_layer_name
from traceview.segment.steps import phase_of


def layer_counts(db: Path) -> dict[tuple[int, int], int]:
    with traceview.connect(db) as con:
        # steps in time order from 0 (the database keeps the trace's own step numbers, e.g. ProfilerStep#1..5)
        rows = con.execute("SELECT dense_rank() OVER (ORDER BY step) - 1, layer, kernels FROM layers").fetchall()
        return {(s, layer): k for s, layer, k in rows}


def truth_counts(trace, steps: range) -> dict[tuple[int, int], int]:
    return {(s, layer): n for s in steps for layer, n in trace.kernels_per_layer(s).items()}


def methods(db: Path) -> set[str]:
    with traceview.connect(db) as con:
        return {r[0] for r in con.execute("SELECT DISTINCT method FROM layers").fetchall()}


def test_annotated_layers_match_an_independent_count_over_the_json(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=6, dense=1, expert_loop=True), steps=3, annotate=True)
    traceview.ingest([trace.path], db_path)
    reference = reference_layer_counts(trace.path)
    assert layer_counts(db_path) == reference == truth_counts(trace, range(3))
    assert methods(db_path) == {"annotation"}
    with traceview.connect(db_path) as con:
        # every kernel of a layer row carries its step and layer; the rest have layer NULL
        assert con.execute(
            "SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' AND layer IS NOT NULL"
        ).fetchall() == [(sum(reference.values()),)]
        assert con.execute("SELECT min(confidence), count(DISTINCT name) FROM layers").fetchall() == [(1.0, 6)]


def test_steps_from_profiler_step_ranges(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=3), steps=4)
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute("SELECT step, name, method, phase, warmup FROM steps ORDER BY step").fetchall()
        kernels = con.execute("SELECT step, count(*) FROM gpu_activity GROUP BY step ORDER BY step").fetchall()
    assert rows == [(i, f"ProfilerStep#{i}", "annotation", "unknown", False) for i in range(4)]
    assert kernels == [(i, len(trace.steps[i][0])) for i in range(4)]


def test_vllm_step_names_give_phase_and_warmup_names_are_marked(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(
        tmp_path / "t.json.gz",
        Model(layers=2),
        steps=2,
        step_name="execute_context_{step}(16)_generation_1(1)",
        profiler_steps=True,
    )
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT step, phase, method FROM steps ORDER BY step").fetchall() == [
            (0, "decode", "engine"),
            (1, "unknown", "engine"),
        ]
    assert phase_of("execute_context_1(512)_generation_0(0)") == "prefill"
    assert phase_of("decode_step_3") == "decode"
    assert phase_of("warmup prefill 2") == "prefill"


def test_nvtx_like_step_names_match_the_default_step_pattern(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=2), steps=3, step_name="warmup_decode_step_{step}")
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute("SELECT step, method, phase, warmup FROM steps ORDER BY step").fetchall()
    assert rows == [(i, "annotation", "decode", True) for i in range(3)]


def test_step_pattern_option_wins(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=2), steps=2, step_name="tok{step}")
    traceview.ingest([trace.path], db_path, segment_options=SegmentOptions(step_pattern=r"^tok\d+$"))
    with traceview.connect(db_path) as con:
        rows = con.execute("SELECT count(*), any_value(method), min(name) FROM steps").fetchall()
    assert rows == [(2, "annotation", "tok0")]


def test_steps_from_the_repetition_of_the_whole_sequence(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=4, dense=1), steps=4, profiler_steps=False)
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        steps = con.execute("SELECT step, method FROM steps ORDER BY step").fetchall()
        sizes = con.execute("SELECT count(*) FROM gpu_activity GROUP BY step ORDER BY step").fetchall()
    assert steps == [(i, "passes") for i in range(4)]
    assert [s[0] for s in sizes] == [len(trace.steps[i][0]) for i in range(4)]
    assert layer_counts(db_path) == truth_counts(trace, range(4))


def test_no_structure_writes_no_layers_and_says_so(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", sequences=[random_names(300, seed=s) for s in range(2)], steps=2)
    summary = traceview.ingest([trace.path], db_path)
    assert summary.steps == 2 and summary.layers == 0
    report = traceview.layers(db_path)
    assert report.instances == []
    assert any("no repeating kernel structure in 2 step(s)" in note for note in report.notes)


def test_one_unannotated_trace_without_steps_is_one_whole_step(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", sequences=[random_names(200)], steps=1, profiler_steps=False)
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT step, method FROM steps").fetchall() == [(0, "whole")]
        assert con.execute("SELECT count(*) FROM gpu_activity WHERE step IS NULL").fetchall() == [(0,)]


def test_cuda_graph_replay_without_annotations_is_segmented_by_period(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=8, dense=1), steps=3, graph=True)
    traceview.ingest([trace.path], db_path)
    assert layer_counts(db_path) == truth_counts(trace, range(3))
    assert methods(db_path) == {"period"}
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT count(*) FROM layers WHERE name IS NOT NULL").fetchall() == [(0,)]


def test_cuda_graph_captured_inside_layer_ranges_maps_replays_to_layers(tmp_path: Path, db_path: Path) -> None:
    model = Model(layers=4, expert_loop=True)  # layers differ in length: period would not give names
    trace = write_trace(tmp_path / "t.json.gz", model, steps=3, graph=True, capture=True)
    traceview.ingest([trace.path], db_path)
    assert methods(db_path) == {"graph"}
    assert layer_counts(db_path) == truth_counts(trace, range(3))
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT DISTINCT name FROM layers ORDER BY name").fetchall() == [
            (f"model.layers.{i}",) for i in range(4)
        ]


def test_gpu_user_annotations_place_kernels_by_time_on_their_stream(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=3, dense=1), steps=2, gpu_annotations=True)
    traceview.ingest([trace.path], db_path)
    assert methods(db_path) == {"annotation"}
    assert layer_counts(db_path) == truth_counts(trace, range(2))


@pytest.mark.parametrize(
    "layer_name",
    [
        "{{'Module': 'model.layers.{layer}', 'Shape': [1, 1024]}}",
        "nn.Module: Qwen3DecoderLayer_{layer}",
        "transformer.h.{layer}",
        "TransformerBlock_{layer}",
    ],
)
def test_layer_name_styles(tmp_path: Path, db_path: Path, layer_name: str) -> None:
    cat = "python_function" if layer_name.startswith("nn.Module") else "user_annotation"
    trace = write_trace(
        tmp_path / "t.json.gz", Model(layers=3), steps=1, annotate=True, layer_name=layer_name, layer_cat=cat
    )
    traceview.ingest([trace.path], db_path)
    assert layer_counts(db_path) == truth_counts(trace, range(1))
    assert methods(db_path) == {"annotation"}


def test_layer_names_parse() -> None:
    cases = {
        "model.layers.7": 7,
        "layers.7": 7,
        "transformer.h.7.attn": 7,
        "TransformerBlock_7": 7,
        "nn.Module: Qwen3DecoderLayer_7": 7,
        "nn.Module: GPT2Block_3": 3,
        "{'Module': 'model.layers.7.self_attn', 'Shape': 1}": 7,
        "encoder.layer.11": 11,
        "model.layers.12.mlp.experts.3": 12,
    }
    for name, index in cases.items():
        parsed = parse_layer_name(name)
        assert parsed is not None and parsed.layer == index, name
    for name in (
        "nn.Module: Qwen2MoeSparseMoeBlock_3",
        "nn.Module: LlamaRMSNorm_3",
        "nn.Module: Linear_7",
        "ProfilerStep#3",
        "aten::mm",
        "model.norm",
        "layer_norm",
        "decode_step_3",
        "graph.7",
    ):
        assert parse_layer_name(name) is None, name


LAYER_NAMES = st.tuples(
    st.sampled_from(["", "model.", "{'Module': '", "nn.Module: Qwen3", "x", "(", "/", "[", ":"]),
    st.sampled_from(["layers", "layer", "h", "blocks", "block", "transformer_blocks", "DecoderLayer", "Block"]),
    st.sampled_from([".", "_", " ", "", "-"]),
    st.sampled_from(["7", "٣", "12", "x"]),
    st.sampled_from(["", ".mlp", "'", " ", ",", ")", "]", "x"]),
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(LAYER_NAMES | st.text(max_size=30))
def test_every_name_the_parser_accepts_passes_the_sql_prefilter(name: str) -> None:
    """Names failing DEFAULT_CANDIDATE (RE2, in DuckDB) are never parsed: none of them may name a layer."""
    if parse_layer_name(name) is not None:
        matched = duckdb.execute("SELECT regexp_matches(?, ?)", [name, DEFAULT_CANDIDATE]).fetchall()
        assert matched == [(True,)], name


def test_custom_layer_pattern(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=3), steps=1, annotate=True, layer_name="blk-{layer}")
    traceview.ingest([trace.path], db_path, segment_options=SegmentOptions(method=Method.annotation))
    assert layer_counts(db_path) == {}
    traceview.api.segment(db_path, SegmentOptions(layer_pattern=r"^blk-(\d+)$"))
    assert layer_counts(db_path) == truth_counts(trace, range(1))


def test_forced_methods_and_rerun_replace_the_previous_result(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=5, dense=2), steps=2, annotate=True)
    traceview.ingest([trace.path], db_path)
    annotated = layer_counts(db_path)
    [result] = traceview.api.segment(db_path, SegmentOptions(method=Method.period))
    assert result.methods == ("period",) and layer_counts(db_path) == annotated
    assert "inferred" in result.notes[1]
    with pytest.raises(UsageError, match=r"--method graph found no layers in run t \(no layers found: no CUDA graph"):
        traceview.api.segment(db_path, SegmentOptions(method=Method.graph))
    assert layer_counts(db_path) == annotated  # refused: the layers found before are kept
    traceview.api.segment(db_path)
    assert layer_counts(db_path) == annotated
    with traceview.connect(db_path) as con:
        stats = con.execute("SELECT count(*) FROM ingest_stats WHERE name = 'segment.steps'").fetchall()
    assert stats == [(1,)]


def test_layers_report_has_instances_medians_and_step_totals(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=3, dense=1), steps=2, annotate=True)
    traceview.ingest([trace.path], db_path)
    report = traceview.layers(db_path)
    keys = {"rank", "step", "layer", "kernels", "span_us", "busy_us", "comm_us", "overlap_us", "exposed_comm_us"}
    assert len(report.instances) == 6 and keys <= set(report.instances[0])
    assert [r["kernels"] for r in report.per_layer] == [28, 38, 38]
    assert [r["layers"] for r in report.per_step] == [3, 3]
    assert report.methods == ("annotation",)


def test_inductor_kernel_numbers_do_not_hide_the_repetition(tmp_path: Path, db_path: Path) -> None:
    # torch.compile of a whole model may number the same fused kernel per call site: _0, _3, _6, ...
    def layer(i: int) -> list[str]:
        return [
            f"triton_per_fused__to_copy_mean_rsqrt_{3 * i}",
            "nvjet_qkv",
            f"triton_poi_fused_cat_index_copy_{3 * i + 1}",
            "flash_fwd_splitkv_kernel",
            "nvjet_o",
            f"triton_poi_fused_mul_silu_{3 * i + 2}",
            "nvjet_up",
            "nvjet_down",
        ]

    names = ["embedding"] + [k for i in range(6) for k in layer(i)] + ["norm_final", "nvjet_lm_head", "argmax"]
    write_trace(tmp_path / "t.json.gz", sequences=[names, names], steps=2, graph=True)
    traceview.ingest([tmp_path / "t.json.gz"], db_path)
    assert layer_counts(db_path) == {(s, layer): 8 for s in range(2) for layer in range(6)}


def test_every_rank_is_segmented_and_the_report_takes_medians_across_ranks(tmp_path: Path, db_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_trace(run / "rank0.json.gz", Model(layers=3), steps=2, annotate=True, rank=0)
    write_trace(run / "rank1.json.gz", Model(layers=3), steps=2, graph=True, rank=1)
    traceview.ingest([run], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute(
            "SELECT rank, count(DISTINCT step), count(*), list(DISTINCT method) FROM layers GROUP BY rank ORDER BY rank"
        ).fetchall()
    assert rows == [(0, 2, 6, ["annotation"]), (1, 2, 6, ["period"])]
    report = traceview.layers(db_path)
    assert [r["instances"] for r in report.per_layer] == [4, 4, 4]
    assert [r["method"] for r in report.per_layer] == ["annotation, period"] * 3


def test_two_layer_stacks_do_not_share_indices() -> None:
    from traceview.segment.annotation import _offset_stacks

    names = ["vision.blocks.0", "vision.blocks.1", "model.layers.0", "model.layers.1", "model.layers.1.mlp"]
    names += ["{'Module': 'model.layers.0.self_attn'}"]
    rows = [(n, i, parse_layer_name(n)) for i, n in enumerate(names)]
    assert _offset_stacks(rows) == [0, 1, 2, 3, 3, 2]  # the vision tower first, then the language model


def test_graph_node_creations_map_replays_to_capture_time_ranges(tmp_path: Path, db_path: Path) -> None:
    # What nsys --cuda-graph-trace=node gives: each replayed kernel's node id, and when and on which thread
    # the node was created (during capture, inside the layer ranges). Built here from the capture launches.
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=4, expert_loop=True), steps=2, graph=True, capture=True)
    traceview.ingest([trace.path], db_path)
    with duckdb.connect(str(db_path)) as con:
        orphans = "SELECT launch_id FROM launches WHERE name = 'cudaLaunchKernel' AND launch_id NOT IN "
        orphans += "(SELECT launch_id FROM gpu_activity WHERE launch_id IS NOT NULL)"
        con.execute(
            f"""INSERT INTO graph_nodes
                SELECT run_id, rank, {GRAPH_NODE_BASE} + row_number() OVER (ORDER BY start_ns) - 1 AS graph_node_id,
                       NULL::BIGINT AS original_graph_node_id, pid, tid, start_ns AS created_ns, name
                FROM launches WHERE launch_id IN ({orphans})"""
        )
        con.execute(f"DELETE FROM launches WHERE launch_id IN ({orphans})")
    [result] = traceview.api.segment(db_path, SegmentOptions(method=Method.graph))
    assert result.methods == ("graph",)
    assert layer_counts(db_path) == truth_counts(trace, range(2))


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("execute_context_1(888_788544)_generation_0(0)", "prefill"),  # vLLM v1, the tracelens prefill
        ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)", "decode"),  # vLLM
        ("step[DECODE bs=32]", "decode"),  # SGLang
        ("step[EXTEND bs=15 toks=15360]", "prefill"),
        ("[Executor] _forward_step 12: 0 ctx reqs, 8 gen reqs", "unknown"),  # TensorRT-LLM's executor
    ],
)
def test_serving_engine_step_ranges_are_steps(tmp_path: Path, db_path: Path, name: str, phase: str) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=2), steps=2, step_name=name)
    traceview.ingest([trace.path], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute("SELECT step, phase, method FROM steps ORDER BY step").fetchall()
    assert rows == [(0, phase, "engine"), (1, phase, "engine")]


def test_steps_keep_the_trace_s_own_numbers(tmp_path: Path, db_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=2), steps=3, step_name="ProfilerStep#{step}")
    path = tmp_path / "renumbered.json"
    path.write_text(gzip.decompress(trace.path.read_bytes()).decode().replace("ProfilerStep#", "ProfilerStep#1"))
    traceview.ingest([path], db_path)  # ProfilerStep#10, #11, #12
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT step FROM steps ORDER BY step").fetchall() == [(10,), (11,), (12,)]
        assert con.execute("SELECT DISTINCT step FROM layers ORDER BY step").fetchall() == [(10,), (11,), (12,)]


def test_a_layer_range_left_open_around_the_capture_is_no_layer(tmp_path: Path, db_path: Path) -> None:
    # an NVTX model.layers.0 range left open across a CUDA graph capture whose layers have ranges of their own
    trace = write_trace(tmp_path / "t.json.gz", Model(layers=4), steps=3, graph=True, capture=True)
    data = json.loads(gzip.decompress(trace.path.read_bytes()))
    ranges = [e for e in data["traceEvents"] if e.get("name") == "model.layers.1"]
    first = min(e["ts"] for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "kernel")
    last = max(e["ts"] + e.get("dur", 0) for e in data["traceEvents"] if e.get("ph") == "X")
    data["traceEvents"].append({**ranges[0], "name": "model.layers.0", "ts": first - 1, "dur": last - first + 2})
    path = tmp_path / "open.json"
    path.write_text(json.dumps(data))
    summary = traceview.ingest([path], db_path)
    assert methods(db_path) == {"graph"}
    assert layer_counts(db_path) == truth_counts(trace, range(3))
    assert any("1 layer range(s) ignored: they enclose other layers" in w for w in summary.warnings)


def _step_of_layers(glue_between: bool) -> duckdb.DuckDBPyConnection:
    """One step of four layers of two kernels each (two passes of two layers), with or without a kernel outside
    every layer between the passes."""
    con = duckdb.connect()
    con.execute("CREATE TABLE layers (run_id INT, rank INT, step INT, layer INT, start_ns BIGINT)")
    con.execute("CREATE TABLE gpu_activity (run_id INT, kind VARCHAR, rank INT, step INT, layer INT, start_ns BIGINT)")
    kernels = [(None, 0), (0, 10), (0, 20), (1, 30), (1, 40), (None, 45), (2, 50), (2, 60), (3, 70), (3, 80)]
    kernels = [k for k in kernels if glue_between or k != (None, 45)]
    con.executemany("INSERT INTO gpu_activity VALUES (1, 'kernel', 0, 0, ?, ?)", kernels)
    con.executemany("INSERT INTO layers VALUES (1, 0, 0, ?, ?)", [(i, 10 + 20 * i) for i in range(4)])
    return con


def test_a_step_of_several_passes_back_to_back_disagrees_with_the_hint() -> None:
    """Given 2 layers per forward pass, a step of 4 layers is two passes: the glue between them (LM head, sampling,
    embedding) lies outside the layers, unless a layer swallowed it (two decode steps found as one)."""
    hint = SegmentOptions(layers=2)
    assert pipeline._against_hint(_step_of_layers(glue_between=True), 1, hint) == []
    (warning,) = pipeline._against_hint(_step_of_layers(glue_between=False), 1, hint)
    assert "1 step(s) hold several passes' layers back to back" in warning
