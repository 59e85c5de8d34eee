"""Progress bars for the long loops outside the Trainer: a count (editor training, drawing every recipe) or
bytes (corpus packing and cleaning, with MB/s and ETA)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def progress_bar(total: int, label: str) -> Callable[[], None]:
    """A rich progress bar advanced by the returned callable (quiet when stdout is not a terminal)."""
    if not sys.stderr.isatty():
        return lambda: None
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task(label, total=total)
    bar.start()

    def advance() -> None:
        bar.advance(task)
        if bar.finished:
            bar.stop()
    return advance


class ByteProgress:
    """A rich bar with MB/s and ETA on a terminal; otherwise, for a large job, a line every 10% on stderr."""

    quiet_below = 64 << 20

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.done, self.label, self.begin = max(1, total), 0, label, time.monotonic()
        self.enabled, self.bar, self.next_line = enabled, None, 0.1

    def start(self) -> None:
        if self.enabled and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task(self.label, total=self.total)
            self.bar.start()

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        elif self.enabled and self.total >= self.quiet_below and self.done / self.total >= self.next_line:
            elapsed = time.monotonic() - self.begin
            print(f"{self.label}: {self.done / self.total:.0%}, {self.done / 1e6 / max(elapsed, 1e-9):.1f} MB/s",
                  file=sys.stderr, flush=True)
            self.next_line = (int(self.done / self.total * 10) + 1) / 10

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
