"""A sweep's results: one row per trial (parameters, state, the metric's last value) as CSV and Markdown, the best
configuration, and a plot of the metric over trials with the best-so-far line."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from plm_lightning.plotting import pyplot
from plm_lightning.sweeping.controller import Trial, _format


def best_trial(trials: list[Trial], metric: str, goal: str) -> Trial | None:
    scored = [t for t in trials if t.summary(metric) is not None and math.isfinite(t.summary(metric))]
    if not scored:
        return None
    pick = min if goal == "minimize" else max
    return pick(scored, key=lambda t: t.summary(metric))


def write_report(trials: list[Trial], spec: dict, directory: str | Path) -> dict[str, str]:
    """``results.csv``, ``results.md`` and ``metric.png`` in ``directory``; returns their paths."""
    out = Path(directory)
    metric, goal = spec["metric"]["name"], spec["metric"].get("goal", "minimize")
    keys = sorted({k for t in trials for k in t.params})
    rows = [{"trial": t.name, **{k: _format(t.params.get(k)) for k in keys}, "state": t.state,
             metric: "" if t.summary(metric) is None else f"{t.summary(metric):.6g}"} for t in trials]
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["trial", *keys, "state", metric])
        writer.writeheader()
        writer.writerows(rows)
    best = best_trial(trials, metric, goal)
    lines = [f"# Sweep: {spec['method']} over {', '.join(keys)} ({goal} {metric})", "",
             "| " + " | ".join(["trial", *keys, "state", metric]) + " |", "|" + "---|" * (len(keys) + 3)]
    lines += ["| " + " | ".join(str(r[c]) for c in ["trial", *keys, "state", metric]) + " |" for r in rows]
    if best is not None:
        lines += ["", f"**Best**: {best.name}, {metric} = {best.summary(metric):.6g}: "
                  + ", ".join(f"`{k}={_format(v)}`" for k, v in best.params.items())]
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _plot(trials, metric, goal, out / "metric.png")
    return {"csv": str(out / "results.csv"), "markdown": str(out / "results.md"), "plot": str(out / "metric.png")}


def _plot(trials: list[Trial], metric: str, goal: str, path: Path) -> None:
    plt = pyplot()

    values = [(i, t.summary(metric)) for i, t in enumerate(trials) if t.summary(metric) is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if values:
        xs, ys = zip(*values)
        ax.scatter(xs, ys, label="trial")
        best, running = [], None
        for y in ys:
            running = y if running is None else (min(running, y) if goal == "minimize" else max(running, y))
            best.append(running)
        ax.step(xs, best, where="post", color="C1", label="best so far")
        ax.legend()
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} over trials")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
