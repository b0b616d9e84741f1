"""Large and hostile Kineto traces written by streaming (never held in memory), and running the CLI on them.

`write_kineto` writes the layout PyTorch's profiler writes (one key per line group, `  },\\n  {` between
events): `launches` launch/kernel pairs, `skipped` python_function events traceview does not keep, and
optionally one event with an enormous name or args string. `peak_rss_mb` runs a command in a child process
and reads its peak resident memory.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = (
    '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],\n'
    '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n  "traceEvents": [\n'
)
TRAILER = '\n  ],\n  "traceName": "hostile.pt.trace.json",\n  "displayTimeUnit": "ms"\n}\n'
SEPARATOR = ",\n"


def _launch_pair(i: int, ts: float) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 474, "tid": 474,\n'
        f'    "ts": {ts:.3f}, "dur": 2.000,\n    "args": {{\n      "correlation": {i}\n    }}\n  }},\n'
        f'  {{\n    "ph": "X", "cat": "kernel", "name": "void gemm_kernel<{i % 7}>(float const*)", "pid": 0,'
        f' "tid": 7,\n    "ts": {ts + 3:.3f}, "dur": 4.000,\n    "args": {{\n      "correlation": {i},'
        f' "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1]\n    }}\n  }}'
    )


def _skipped(i: int, ts: float) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1739): _call_impl",'
        f' "pid": 474, "tid": 474,\n    "ts": {ts:.3f}, "dur": 1.000,\n    "args": {{\n'
        f'      "Python parent id": {i}, "Python id": {i + 1}, "Ev Idx": {i}\n    }}\n  }}'
    )


def _events(launches: int, skipped: int) -> Iterator[str]:
    """Launch/kernel pairs with the skipped events spread evenly among them."""
    per_launch = skipped // max(launches, 1)
    extra = skipped - per_launch * launches
    ts, n = 1_000_000.0, 0
    for i in range(launches):
        for _ in range(per_launch + (1 if i < extra else 0)):
            yield _skipped(n, ts)
            n += 1
            ts += 0.5
        yield _launch_pair(i, ts)
        ts += 10
    for _ in range(skipped - n):
        yield _skipped(n, ts)
        n += 1


def write_kineto(
    path: Path, launches: int, skipped: int = 0, huge_bytes: int = 0, huge_in: str = "name", extra_metadata: str = ""
) -> Path:
    """Stream a Kineto trace to `path` (see the module docstring); returns the path.

    `huge_bytes` > 0 adds one python_function event whose `name` (huge_in="name") or args string
    (huge_in="args") is that many bytes long. `extra_metadata` is raw JSON members put before traceEvents.
    """
    with open(path, "w", buffering=1 << 22) as out:
        out.write(HEADER.replace('  "traceEvents"', extra_metadata + '  "traceEvents"'))
        first = True
        batch: list[str] = []
        for event in _events(launches, skipped):
            batch.append(event)
            if len(batch) >= 10_000:
                out.write(("" if first else SEPARATOR) + SEPARATOR.join(batch))
                first, batch = False, []
        if batch:
            out.write(("" if first else SEPARATOR) + SEPARATOR.join(batch))
            first = False
        if huge_bytes:
            out.write("" if first else SEPARATOR)
            _write_huge_event(out, huge_bytes, huge_in)
        out.write(TRAILER)
    return path


def _write_huge_event(out: object, size: int, where: str) -> None:
    write = out.write  # type: ignore[attr-defined]
    name = '"huge"' if where == "args" else None
    write('  {\n    "ph": "X", "cat": "python_function", "pid": 474, "tid": 474, "ts": 999999.000, "dur": 1.000,\n')
    write('    "name": ' + (name or '"'))
    if name is None:
        _write_repeated(write, size)
        write('"')
    write(',\n    "args": {"note": "')
    if where == "args":
        _write_repeated(write, size)
    write('"}\n  }')


def _write_repeated(write: object, size: int) -> None:
    block = "abcdefghij" * (1 << 16)  # 640 KiB
    while size > 0:
        write(block[: min(size, len(block))])  # type: ignore[operator]
        size -= len(block)


def traceview_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "traceview.cli", *map(str, args)]


def traceview(*args: str | Path, timeout: float = 300, **run: Any) -> subprocess.CompletedProcess[str]:
    """`traceview ARGS` in a child process, as a user runs it; `run` goes to subprocess.run (stdin, preexec_fn)."""
    return subprocess.run(traceview_cmd(*args), capture_output=True, text=True, timeout=timeout, check=False, **run)


def assert_one_line_error(result: subprocess.CompletedProcess[str], path: str | Path | None, *words: str) -> str:
    """Exit 2 and one stderr line `error: PATH: problem — remedy` (no `PATH: ` when None) holding every word."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: " if path else "error: ") and " — " in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def peak_rss_mb(
    command: list[str], timeout_s: float = 600, **run: Any
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run `command`, return its peak resident set size in MiB (Linux ru_maxrss is in KiB) and its result; `run`
    goes to subprocess.run (env).

    The command runs in a fresh `python -c` wrapper that waits for it, so the figure covers that one child only.
    """
    wrapper = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(done.returncode)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, *command], capture_output=True, text=True, timeout=timeout_s, check=False, **run
    )
    lines = done.stderr.strip().splitlines()
    kib = int(lines[-1]) if lines and lines[-1].isdigit() else -1
    stderr = "\n".join(lines[:-1])
    return kib / 1024, subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr)
