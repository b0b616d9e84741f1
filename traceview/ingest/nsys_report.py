"""Nsight Systems reports (.nsys-rep, .qdrep) -> SQLite exports, with the user's own nsys.

The report format is private: only nsys reads it. `export_report` finds the user's nsys (--nsys, else $NSYS, else
PATH), checks that it is at least as new as the nsys that wrote the report (the report names that version in its
section directory), and runs `nsys export --type sqlite` into a directory the caller owns (and deletes). When nsys is
missing, too old or fails, ToolMissingError says so in one line, with the exact command to run where a recent nsys is
installed. Reads: the report. Writes: one .sqlite file in the given directory.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from ..errors import ToolMissingError
from . import IngestOptions

VERSION = re.compile(r"(20\d\d)\.(\d+)\.(\d+)(?:\.(\d+))?")
REPORT_VERSION = re.compile(rb"(?<![\d.])(20\d\d\.\d+\.\d+\.\d+)(?![\d.])")
REPORT_SCAN_BYTES = 1 << 20


def export_report(report: Path, tmp: Path, options: IngestOptions) -> Path:
    """Export `report` to tmp/<name>.sqlite with the user's nsys; ToolMissingError when it is missing or too old."""
    writer = report_writer_version(report)
    needs = f"Nsight Systems {writer} or newer" if writer else "Nsight Systems"
    nsys = find_nsys(options)
    if nsys is None:
        raise ToolMissingError(
            report,
            "reading an .nsys-rep report needs nsys, which is not installed (not on PATH, no --nsys, no $NSYS)",
            f"install {needs} and pass --nsys PATH, or run `{export_command(report)}` where it is and ingest the "
            ".sqlite",
        )
    installed = nsys_version(nsys)
    if installed is None:
        raise ToolMissingError(
            report,
            f"{nsys} does not run as nsys (`nsys --version` failed)",
            f"pass --nsys PATH of {needs}, or run `{export_command(report)}` where it is and ingest the .sqlite",
        )
    if writer and _version_tuple(installed) < _version_tuple(writer):
        raise ToolMissingError(
            report,
            f"the report was written by nsys {writer} but {nsys} is version {installed}, which cannot read it",
            f"pass --nsys PATH of {needs}, or run `{export_command(report)}` where it is and ingest the .sqlite",
        )
    out = tmp / (report.name.rsplit(".", 1)[0] + ".sqlite")
    if options.progress:
        options.progress(f"exporting {report.name} with nsys {installed}", 0, 0)
    command = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    if done.returncode != 0 or not out.is_file():
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ToolMissingError(
            report,
            f"nsys {installed} could not export the report (exit {done.returncode}: {(said or ['no message'])[-1]})",
            f"run `{export_command(report)}` with {needs} and ingest the .sqlite",
        )
    return out


def find_nsys(options: IngestOptions) -> str | None:
    """The nsys to use: --nsys, else $NSYS, else nsys on PATH; None when there is none."""
    for given in (options.nsys, os.environ.get("NSYS")):
        if given:
            return shutil.which(given) or (given if Path(given).is_file() else None)
    return shutil.which("nsys")


def nsys_version(nsys: str) -> str | None:
    """`nsys --version` as 2026.2.1.210, or None when it does not run."""
    try:
        done = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=120, errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    match = VERSION.search(done.stdout + done.stderr)
    return match.group(0) if match and done.returncode == 0 else None


def report_writer_version(report: Path) -> str | None:
    """Version of the nsys that wrote the report (as 2022.4.2.1), from the version strings near its start or end."""
    size = report.stat().st_size
    with open(report, "rb") as handle:
        chunk = handle.read(REPORT_SCAN_BYTES)
        if size > REPORT_SCAN_BYTES:
            handle.seek(max(size - REPORT_SCAN_BYTES, REPORT_SCAN_BYTES))
            chunk += handle.read()
    found = [m.group(1).decode() for m in REPORT_VERSION.finditer(chunk)]
    return max(found, key=found.count) if found else None


def _version_tuple(version: str) -> tuple[int, ...]:
    match = VERSION.search(version)
    return tuple(int(p) for p in match.groups()[:3]) if match else ()


def export_command(report: Path) -> str:
    target = report.with_name(report.name.rsplit(".", 1)[0] + ".sqlite")
    return f"nsys export --type sqlite --output {shlex.quote(str(target))} {shlex.quote(str(report))}"
