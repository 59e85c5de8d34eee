"""matplotlib for the figures the commands write (inspect, sweep, arena, causal tracing): files only, no display."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use: the CLI starts without it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
