"""A progress bar for the long loops outside the Trainer (editor training, drawing every recipe)."""

from __future__ import annotations

from collections.abc import Callable


def progress_bar(total: int, label: str) -> Callable[[], None]:
    """A rich progress bar advanced by the returned callable (quiet when stdout is not a terminal)."""
    import sys

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
