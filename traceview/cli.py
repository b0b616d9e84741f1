"""The `traceview` command: a thin typer layer over the Python API.

Each command parses its arguments, calls one library function and renders the rows with output.render.
Errors from the library (TraceviewError) become one stderr line `error: FILE: problem — what to do` and
exit code 2; --debug shows the traceback instead.

The library (api, sqllib: DuckDB and the stages) is imported inside each command, so `--help` and a short
command load only what they run; the options' types come from light modules (tests/test_startup.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from . import diff as diff_stage
from . import guard, interrupts, streams
from .choices import Kind
from .diff_render import diff_document
from .errors import MORE_MEMORY, TraceviewError, UsageError, memory_problem, os_problem
from .ingest import IngestOptions, parse_memory_limit, parse_pattern, parse_steps, parse_time_window
from .ingest.bounds import parse_max_expansion
from .output import Format, printable, printable_lines, render
from .segment import Method, SegmentOptions
from .segment.report import INSTANCE_COLUMNS
from .version import __version__

if TYPE_CHECKING:
    from . import api

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: typer's rich help loads rich.markdown and markdown_it (~0.1 s)
    help="Per-transformer-layer analysis of GPU profiler traces (PyTorch profiler and Nsight Systems).",
)
# One message, one line (no wrapping); text from traces and file names is never markup or emoji codes.
stderr = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
_state = {"debug": False}
INTERRUPTED = 130  # exit code after Ctrl-C (128 + SIGINT), as shells report it
TERMINAL = (160, 24)  # columns and lines assumed when the output is not a terminal (names are cut to the width)

DbArg = Annotated[Path, typer.Argument(help="A database written by `traceview ingest`.", show_default=False)]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
MethodOpt = Annotated[Method, typer.Option(help="How to find layers; auto picks the best available per step.")]
LayerPatternOpt = Annotated[
    str | None, typer.Option(help="Regex naming layer ranges; its first number group is the layer index.")
]
StepPatternOpt = Annotated[str | None, typer.Option(help="Regex naming step ranges (NVTX or record_function).")]
LayersOpt = Annotated[
    int | None, typer.Option("--layers", help="Layers per forward pass, if known: found layers must agree.", min=1)
]
ModelConfigOpt = Annotated[
    Path | None, typer.Option("--model-config", help="The model's config.json: its num_hidden_layers as --layers.")
]


def _show_version(asked: bool) -> None:
    if asked:
        typer.echo(f"traceview {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", help="Show traceview's version and exit.", callback=_show_version, is_eager=True),
    ] = False,
) -> None:
    _state["debug"] = debug


def emit(text: str) -> None:
    """Write command output (data) to stdout, each line printable (output.printable)."""
    typer.echo(printable_lines(text))


def say(message: str) -> None:
    """Write one line (a warning, a note, an error) to stderr, printable whatever the data holds."""
    stderr.print(printable(message))


@app.command()
def ingest(
    traces: Annotated[
        list[Path],
        typer.Argument(help="Trace files of one run: .json(.gz), .nsys-rep, .sqlite, a directory, or - (stdin)."),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Database to create or add the run to.")],
    label: Annotated[str | None, typer.Option(help="Name of the run (default: the file name).")] = None,
    replace: Annotated[bool, typer.Option(help="Replace a run with the same label.")] = False,
    comm_pattern: Annotated[
        list[str] | None, typer.Option(help="Extra regex naming communication kernels (repeatable).")
    ] = None,
    salvage: Annotated[bool, typer.Option(help="Keep the complete events of a cut-off trace.")] = False,
    nsys: Annotated[str | None, typer.Option(help="nsys executable for .nsys-rep (default: $NSYS, then PATH).")] = None,
    time_window: Annotated[
        str | None,
        typer.Option(help="Keep only START:END (e.g. 100ms:250ms from the first event; @T0ns:@T1ns absolute)."),
    ] = None,
    steps: Annotated[str | None, typer.Option(help="Keep only these steps (ProfilerStep#N: N), e.g. 3-5,8.")] = None,
    jobs: Annotated[int, typer.Option(help="Processes loading the per-rank files of a run at once.", min=1)] = 1,
    threads: Annotated[
        int | None,
        typer.Option(help="DuckDB's threads, shared out among --jobs workers (default: one per core).", min=1),
    ] = None,
    memory_limit: Annotated[
        str,
        typer.Option(help="DuckDB's memory cap: auto (about the trace's size), none, or a size like 8GB."),
    ] = "auto",
    keep_host: Annotated[
        bool, typer.Option(help="Store each rank's host name (it identifies the machine; left out by default).")
    ] = False,
    max_expansion: Annotated[
        str,
        typer.Option(help="Most data per byte of input (decompressed JSON, Parquet rows): a ratio, or none."),
    ] = "64",
    parquet: Annotated[
        Path | None,
        typer.Option(help="Also write the run as a Parquet dataset (DIR/<table>/run_id=N/rank=R/) to query in place."),
    ] = None,
    method: MethodOpt = Method.auto,
    layer_pattern: LayerPatternOpt = None,
    step_pattern: StepPatternOpt = None,
    layers: LayersOpt = None,
    model_config: ModelConfigOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Read traces into a DuckDB database, then find steps and layers (atomic: on error nothing is written)."""
    from . import api
    from .progress import StderrProgress

    with StderrProgress(stderr) as progress:
        options = IngestOptions(
            label=label,
            replace=replace,
            comm_patterns=tuple(parse_pattern("--comm-pattern", p) for p in comm_pattern or ()),
            salvage=salvage,
            nsys=nsys,
            progress=progress,
            time_window=parse_time_window(time_window) if time_window else None,
            steps=parse_steps(steps) if steps else (),
            jobs=jobs,
            threads=threads,
            memory_limit=parse_memory_limit(memory_limit),
            keep_host=keep_host,
            max_expansion=parse_max_expansion(max_expansion),
        )
        segment_options = _segment_options(method, layer_pattern, step_pattern, layers, model_config)
        summary = api.ingest(traces, output, options, segment_options, parquet)
    for warning in summary.warnings:
        say(f"warning: {warning}")
    if summary.data_loss and not summary.already_ingested:
        say(f"note: data lost or changed while reading: {', '.join(summary.data_loss)} (see `traceview info {output}`)")
    if summary.already_ingested:
        say(f"{output}: already holds this trace as run {summary.label!r}; nothing to do")
    emit(render([_summary_row(summary)], fmt, title=f"{output}: run {summary.label}"))


@app.command()
def info(database: DbArg, fmt: FormatOpt = Format.table) -> None:
    """Summarize every run in a database: counts, span, devices, data-loss counters."""
    from . import api

    with api.connect(database) as con:
        summaries = [api.summarize(con, run_id) for run_id in api.run_ids(con)]
        losses = api.data_loss(con)
    emit(render([_summary_row(s) for s in summaries], fmt, title=str(database)))
    warned = [{"run": s.label, "warning": w} for s in summaries for w in s.warnings]
    if warned and fmt is Format.table:
        emit(render(warned, fmt, title="warnings"))
    if losses and fmt is Format.table:
        emit(render(losses, fmt, title="data loss"))


@app.command()
def sql(
    database: DbArg,
    query: Annotated[str, typer.Argument(help="SQL to run (read-only).")],
    fmt: FormatOpt = Format.table,
) -> None:
    """Run one SQL statement against a database, read-only."""
    from . import api

    columns, rows = api.sql(database, query)
    emit(render([dict(zip(columns, r, strict=True)) for r in rows], fmt, columns=columns))


@app.command()
def diff(
    a: Annotated[Path, typer.Argument(help="Baseline database (run A).", show_default=False)],
    b: Annotated[Path | None, typer.Argument(help="Candidate database (run B); omit to compare two runs of A.")] = None,
    label_a: Annotated[str | None, typer.Option("--a", help="Label of run A (default: the first run).")] = None,
    label_b: Annotated[str | None, typer.Option("--b", help="Label of run B (default: the first run).")] = None,
    fail_if_slower: Annotated[
        float | None,
        typer.Option(help="Exit 1 when B is slower than A by more than PCT per layer (see --metric).", metavar="PCT"),
    ] = None,
    metric: Annotated[
        diff_stage.Metric,
        typer.Option(help="What --fail-if-slower compares: span (launch gaps included) or busy (the GPU work)."),
    ] = diff_stage.Metric.span,
    by_rank: Annotated[
        bool, typer.Option("--by-rank", help="Also one row per layer and rank (csv: only those rows).")
    ] = False,
    kernels: Annotated[
        diff_stage.KernelRows,
        typer.Option(help="Kernel alignment rows: the changes, grouped, or every kernel of the layer."),
    ] = diff_stage.KernelRows.changed,
    fmt: FormatOpt = Format.table,
) -> None:
    """Compare two runs layer by layer: why each layer got faster or slower, and the kernels that changed."""
    from . import api

    if fail_if_slower is not None:
        diff_stage.checked_percent(fail_if_slower)
    result = api.diff(a, b, label_a, label_b)
    emit(diff_document(result, fmt, by_rank, kernels, shutil.get_terminal_size(TERMINAL).columns))
    if fail_if_slower is not None and diff_stage.is_slower(result, fail_if_slower, metric):
        say(f"error: {diff_stage.gate_message(result, fail_if_slower, metric)}")
        raise typer.Exit(1)


# --- pictures, report, export (issue 7) ---

RunOpt = Annotated[str | None, typer.Option("--run", help="Label of the run (default: the first run).")]
RunBOpt = Annotated[
    str | None, typer.Option("--run-b", help="Label of run B (default: the first run of OTHER, or of DATABASE).")
]


@app.command()
def plot(
    database: DbArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Picture to write: .png, .svg or .pdf.")],
    other: Annotated[Path | None, typer.Argument(help="Second database, run B (for --kind diff).")] = None,
    kind: Annotated[Kind, typer.Option(help="Which picture.")] = Kind.timeline,
    run: RunOpt = None,
    run_b: RunBOpt = None,
    step: Annotated[
        int | None,
        typer.Option(
            help="Step number, as `traceview layers` shows it (default: the steady-state step of median span)."
        ),
    ] = None,
    layers: Annotated[str | None, typer.Option(help="Layer indices, e.g. 3-5.", metavar="FIRST-LAST")] = None,
    rank: Annotated[int | None, typer.Option(help="Rank (default: the lowest; layers: all ranks).")] = None,
) -> None:
    """Draw a picture: one step's timeline, a stacked bar per layer, or two runs side by side per layer."""
    from . import api

    path = api.plot(database, output, kind, other, run, run_b, step, layers, rank)
    say(f"wrote {path}")


@app.command()
def report(
    database: DbArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")],
    other: Annotated[Path | None, typer.Argument(help="Second database, compared against the first.")] = None,
    run: RunOpt = None,
    run_b: RunBOpt = None,
    full_paths: Annotated[
        bool, typer.Option("--full-paths", help="Show where each trace was, not only its file name.")
    ] = False,
) -> None:
    """Write one self-contained HTML report (tables and pictures; the comparison when given two runs)."""
    from . import api

    path = api.report(database, output, other, run, run_b, full_paths)
    say(f"wrote {path}")


@app.command()
def export(
    database: DbArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Chrome-trace JSON to write (.json or .json.gz).")],
    run: RunOpt = None,
    rank: Annotated[int | None, typer.Option(help="Only this rank (default: all).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Write a run as Chrome-trace JSON for the Perfetto UI: steps and layers as tracks above the GPU streams."""
    from . import api

    stats = api.export(database, output, run, rank)
    if not streams.is_stdout(output):  # else the trace is the data on stdout, and its summary would break the JSON
        emit(render([vars(stats)], fmt, title=f"{output}: open it in the Perfetto UI"))


# --- end of pictures, report, export ---


# --- SQL library: queries, query, overlap (issue 5) ---


@app.command("queries")
def list_queries(fmt: FormatOpt = Format.table) -> None:
    """List the queries of the SQL library (queries/*.sql): name, parameters, what each answers."""
    from . import sqllib

    rows = [
        {
            "name": q.name,
            "kind": q.kind,
            "params": ", ".join(f"{p.name}={p.default}" for p in q.params),
            "description": q.description,
        }
        for q in sqllib.list_queries()
    ]
    emit(render(rows, fmt))


@app.command()
def query(
    database: DbArg,
    name: Annotated[str, typer.Argument(help="Query name, e.g. layer_summary (see `traceview queries`).")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="Parameter NAME=VALUE (repeatable).", metavar="K=V")
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Run one query of the SQL library, with its parameters bound as values."""
    from . import api, sqllib

    params = dict(_key_value(p) for p in param or ())
    with api.connect(database) as con:
        columns, rows = sqllib.run_query(con, name, params)
    emit(render([dict(zip(columns, r, strict=True)) for r in rows], fmt, columns=columns))


@app.command()
def overlap(
    database: DbArg,
    run: Annotated[str | None, typer.Option("--run", help="Label (or id) of the run (default: every run).")] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            help="Only these steps (numbers as `traceview layers` shows them), e.g. 3-7 (default: the whole trace).",
            metavar="FIRST-LAST",
        ),
    ] = None,
    like_hta: Annotated[
        bool,
        typer.Option(
            "--like-hta",
            help="HTA 0.5's figure: its kernel set (last ProfilerStep dropped), ^nccl.*Kernel as comm, whole µs.",
        ),
    ] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Compute/communication overlap per rank as HTA defines it: (comm ∩ compute) / comm, and the window it covers."""
    from . import api, sqllib

    if like_hta and steps:
        raise UsageError(None, "--like-hta takes no --steps", "HTA measures its own kernel set; drop one of them")
    with api.connect(database) as con:
        if like_hta:
            rows = sqllib.overlap_like_hta(con, run)
        else:
            rows = sqllib.overlap(con, run, sqllib.parse_steps(steps) if steps else None)
    if fmt is not Format.json:  # keys for programs, not for people
        rows = [{k: v for k, v in r.items() if k not in ("run_id", "window_start_ns", "window_end_ns")} for r in rows]
    windows = sorted({str(r["time_window"]) for r in rows}) or ["no kernels"]
    how = "as HTA 0.5 computes it (--like-hta)" if like_hta else "per rank"
    emit(render(rows, fmt, title=f"compute/communication overlap {how}, over: {', '.join(windows)}"))


# --- steps and layers: layers, segment (issue 4) ---

LAYER_COLUMNS = (
    "layer",
    "name",
    "instances",
    "kernels",
    "span_us",
    "busy_us",
    "comm_us",
    "exposed_comm_us",
    "method",
    "confidence",
)
STEP_COLUMNS = (
    "rank",
    "step",
    "phase",
    "warmup",
    "layers",
    "kernels",
    "layer_kernels",
    "before_layers",
    "after_layers",
    "span_us",
    "layers_span_us",
)
# A speculative drafter's share of each step (steps.draft_passes, step_metrics): shown when the run has one.
DRAFT_COLUMNS = ("draft_passes", "draft_kernels", "draft_busy_us")


@app.command()
def layers(
    database: DbArg,
    run: RunOpt = None,
    by_rank: Annotated[
        bool, typer.Option("--by-rank", help="One row per layer, phase and rank (medians across that rank's steps).")
    ] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per transformer layer: kernels and µs (medians across steps and ranks), totals per step, and the method.

    json and csv: one row per (rank, step, layer) instance; with --by-rank, one row per (rank, layer).
    """
    from . import api

    result = api.layers(database, run)
    per_rank, widest = api.layer_ranks(database, run)
    if fmt in (Format.json, Format.csv):
        for note in result.notes:
            say(f"note: {note}")
        emit(render(per_rank, fmt) if by_rank else render(result.instances, fmt, columns=INSTANCE_COLUMNS))
        return
    head = [f"{result.label}: " + (f"layers found by {', '.join(result.methods)}" if result.methods else "no layers")]
    parts = ["\n".join(printable(line) for line in head + [f"note: {note}" for note in result.notes])]
    if by_rank:
        parts.append(render(per_rank, fmt, title="per layer and rank (medians across the rank's steady steps)"))
    elif result.per_layer:
        columns, title = LAYER_COLUMNS, "per layer (medians across steady steps and ranks)"
        rows = result.per_layer
        if widest:
            columns += ("rank_spread",)
            title = "per layer (medians across steady steps and ranks; rank_spread: where ranks differ most)"
            rows = [{**row, "rank_spread": widest.get(row["layer"], "")} for row in rows]
        parts.append(render(rows, fmt, title=title, columns=columns))
    drafted = any(row.get("draft_passes") is not None for row in result.per_step)
    step_columns = STEP_COLUMNS + DRAFT_COLUMNS if drafted else STEP_COLUMNS
    parts.append(render(result.per_step, fmt, title="per step", columns=step_columns))
    emit("\n\n".join(parts))


@app.command()
def segment(
    database: DbArg,
    run: Annotated[str | None, typer.Option("--run", help="Label of the run (default: every run).")] = None,
    method: MethodOpt = Method.auto,
    layer_pattern: LayerPatternOpt = None,
    step_pattern: StepPatternOpt = None,
    layers: LayersOpt = None,
    model_config: ModelConfigOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Find steps and layers again in an ingested database (replaces the previous segmentation)."""
    from . import api

    options = _segment_options(method, layer_pattern, step_pattern, layers, model_config)
    results = api.segment(database, options, run)
    labels = api.run_labels(database)
    rows = [
        {
            "run": labels[r.run_id],
            "run_id": r.run_id,
            "steps": r.steps,
            "step_method": ", ".join(r.step_methods),
            "layers": r.layers,
            "layers_per_step": r.layers_per_step,
            "layer_method": ", ".join(r.methods),
            "confidence": r.confidence,
        }
        for r in results
    ]
    for result in results:
        for note in result.notes:
            say(f"note: {labels[result.run_id]}: {note}")
        for warning in result.warnings:
            say(f"warning: {labels[result.run_id]}: {warning}")
    emit(render(rows, fmt, title=str(database)))


# --- end of steps and layers ---


def _segment_options(
    method: Method,
    layer_pattern: str | None,
    step_pattern: str | None,
    layers: int | None = None,
    model_config: Path | None = None,
) -> SegmentOptions:
    """--method, --layer-pattern and --step-pattern, the patterns checked (one line when they do not compile), and
    the layer count of --layers or --model-config (one line when the two disagree)."""
    from .segment.hint import layers_from_config

    source = "--layers"
    if model_config is not None:
        configured = layers_from_config(model_config)
        if layers is not None and layers != configured:
            raise UsageError(
                model_config, f"num_hidden_layers is {configured}, --layers says {layers}", "give one of the two"
            )
        layers, source = configured, f"{model_config.name}: num_hidden_layers"
    return SegmentOptions(
        method=method,
        layer_pattern=layer_pattern and parse_pattern("--layer-pattern", layer_pattern),
        step_pattern=step_pattern and parse_pattern("--step-pattern", step_pattern),
        layers=layers,
        layers_from=source,
    )


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(None, f"bad --param {text!r}", "write --param NAME=VALUE, e.g. --param run=baseline")
    return key.strip(), value


# --- end of SQL library ---


def _summary_row(summary: api.RunSummary) -> dict[str, object]:
    return {
        "run": summary.label,
        "backend": summary.backend,
        "ranks": summary.ranks,
        "events": summary.events,
        "kernels": summary.kernels,
        "memcpy": summary.memcpy,
        "memset": summary.memset,
        "launches": summary.launches,
        "steps": summary.steps,
        "layers": summary.layers,
        "span_ms": summary.span_ms,
        "devices": ", ".join(summary.device_names),
        "warnings": len(summary.warnings),
    }


def main() -> None:
    """Entry point: run the app, turning library errors into one line and an exit code."""
    streams.standard_streams()
    if guard.needed():  # under `ulimit -v`: the command runs in a child whose every end is worded (see guard)
        sys.exit(guard.run())
    interrupts.install()
    # numpy's OpenBLAS starts a thread and reserves a buffer per core when it loads, which traceview never uses: under
    # an address-space limit (ulimit -v) those alone made it fail outside any error it could word.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    warnings.showwarning = _show_warning
    # A name drawn in a picture with a character its font lacks (CJK, emoji, a control character) is drawn as a box.
    warnings.filterwarnings("ignore", message="Glyph .* missing from font")
    try:
        code = app(standalone_mode=False)  # a command's typer.Exit(n) comes back as n
    except KeyboardInterrupt:
        _exit_interrupted()
    except Exception as error:
        if interrupts.received() is not None or _is_interruption(error):
            _exit_interrupted()  # whatever stopped work raised next (an aborted transaction refusing a cleanup)
        _exit_on_error(error)
        raise
    interrupts.finished()
    if code == INTERRUPTED:  # typer turns a Ctrl-C outside DuckDB into Exit(130), which comes back as 130
        _exit_interrupted()
    if isinstance(code, int) and code:
        sys.exit(code)


def _is_interruption(error: Exception) -> bool:
    """typer's Abort, or the RuntimeError DuckDB raises for a Ctrl-C during a query."""
    return isinstance(error, typer.Abort) or (isinstance(error, RuntimeError) and str(error) == "Query interrupted")


def _exit_on_error(error: Exception) -> None:
    """One stderr line and an exit code for a closed stdout, a library error, an OS error, a damaged database or a
    usage error; returns for any other error, which the caller re-raises (under --debug, a library or OS error too)."""
    if isinstance(error, BrokenPipeError):  # the reader of stdout went away (| head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(1)
    if not _state["debug"]:
        _exit_on_worded_error(error)
    elif isinstance(error, TraceviewError | OSError):
        return  # --debug shows their traceback
    _exit_on_usage_error(error)  # click's usage errors (typer's own copy of click)


def _exit_on_worded_error(error: Exception) -> None:
    if isinstance(error, TraceviewError):
        say(f"error: {error}")
        sys.exit(error.exit_code)
    if isinstance(error, OSError):  # one the library did not word itself
        problem, remedy = os_problem(error) or ("failed", "check the path")
        say(f"error: {error.filename or 'traceview'}: {problem} — {remedy}")
        sys.exit(2)
    lack = memory_problem(error)
    if lack is not None:
        say(f"error: traceview: out of memory ({lack}) — {MORE_MEMORY}")
        sys.exit(2)
    from . import db

    damaged = db.damage_error(error)  # a damaged block met while reading a database
    if damaged is not None:
        say(f"error: {damaged}")
        sys.exit(damaged.exit_code)


def _show_warning(message: Warning | str, category: type[Warning], *_where: object, **_more: object) -> None:
    """A library's warning as one printable stderr line (Python's own shows the file, line and source)."""
    say(f"warning: {category.__name__}: {message}")


def _exit_interrupted() -> None:
    """One line for a stopped command, then the exit code a shell expects (128 + the signal), at once."""
    signum = interrupts.received() or signal.SIGINT
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    outcome = "its output was already written" if interrupts.written() else "nothing was written; run the command again"
    say(f"error: {what} — {outcome}")
    interrupts.exit_now(128 + signum)


def _exit_on_usage_error(error: Exception) -> None:
    """A click usage error (unknown command, bad option) as one line, `error: what is wrong — see --help`, with its
    exit code (click's own shows three lines and a blank one)."""
    code = getattr(error, "exit_code", None)
    if not isinstance(code, int):
        return
    message = getattr(error, "format_message", None)
    if callable(message):
        context = getattr(error, "ctx", None)
        where = context.command_path if context is not None else "traceview"
        say(f"error: {' '.join(str(message()).split())} — see `{where} --help`")
    sys.exit(code)


if __name__ == "__main__":
    main()
