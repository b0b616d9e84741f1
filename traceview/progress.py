"""The progress of an ingest on stderr: one rich line per stage, the running one last (a terminal only).

Imported by `traceview ingest` alone: rich's progress display is not needed by the other commands.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, Task, TaskID, TextColumn, TimeRemainingColumn
from rich.text import Text

from .ingest import STAGE_COMMIT, STAGE_NESTING, STAGE_SEGMENTATION, STAGE_TABLES
from .ingest import Progress as ProgressCallback
from .output import printable

STAGE_WORDS = {
    STAGE_TABLES: "tables: building the schema's tables",
    STAGE_NESTING: "nesting: CPU ranges, launch links, counters",
    STAGE_SEGMENTATION: "segmentation: steps, layers, busy time",
    STAGE_COMMIT: "commit: writing the database",
}


class _BytesColumn(DownloadColumn):
    """Bytes read so far, on the lines that count bytes (a file being read); nothing on the others."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("bytes") else Text("")


class StageProgress:
    """Progress of an ingest on a rich Progress: one line per stage, the running one last.

    A line never moves backwards (two readers of one file report their positions in turn: the line shows the
    furthest), and a stage that starts completes the lines before it, so the screen names what is running.
    """

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self.tasks:
            self._finish_all()
            counts_bytes = total >= 1024  # a file's size; stage counts and announcements are small
            self.tasks[what] = self.bar.add_task(
                printable(STAGE_WORDS.get(what, what)), total=total or None, bytes=counts_bytes
            )
        task = self.tasks[what]
        shown = self.bar.tasks[self._index(task)]
        self.bar.update(task, completed=max(shown.completed, done), total=total or shown.total)

    def _finish_all(self) -> None:
        for task in self.tasks.values():
            shown = self.bar.tasks[self._index(task)]
            self.bar.update(task, total=shown.total or 1, completed=shown.total or 1)

    def _index(self, task: TaskID) -> int:
        return next(i for i, t in enumerate(self.bar.tasks) if t.id == task)


class StderrProgress:
    """A progress display on stderr for ingest (StageProgress); silent when stderr is not a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> ProgressCallback | None:
        if not sys.stderr.isatty():
            self._bar = None
            return None
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            _BytesColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._bar.start()
        return StageProgress(self._bar)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
