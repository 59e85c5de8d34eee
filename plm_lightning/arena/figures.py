"""The arena's two figures: ``loss_vs_flops.png`` (each recipe's final validation loss at every budget, mean ± sd
over seeds, and the within-run curve of its largest budget) and ``downstream_vs_flops.png`` (one panel per task:
each recipe's score against its pretraining FLOPs, mean ± sd over seeds, with each family's random-weights score
drawn as a band)."""

from __future__ import annotations

import statistics
from pathlib import Path

from plm_lightning.arena.config import DOWNSTREAM, PROMPTS, ArenaConfig, RunResult, recipe_variant
from plm_lightning.arena.signal import family, per_seed, random_estimate, runs_of
from plm_lightning.plotting import pyplot


def label(recipe: str) -> str:
    """A legend's name for a recipe: a variant's settings by their last key (``bert[sentence_prediction=none,
    packing=full_sentences]``)."""
    name, settings = recipe_variant(recipe)
    short = ",".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in settings.items())
    return f"{name}[{short}]" if settings else name


def _log_axis(ax, budgets: tuple[float, ...]) -> None:  # noqa: ANN001
    """A log FLOPs axis ticked at the budgets (a span of 8x has no power of ten inside)."""
    import matplotlib.ticker as ticker

    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xticks(sorted(budgets), [f"{b:.2g}" for b in sorted(budgets)])
    if len(budgets) > 1:
        low, high = min(budgets), max(budgets)
        ax.set_xlim(low / (high / low) ** 0.08, high * (high / low) ** 0.08)


def plots(results: list[RunResult], config: ArenaConfig, out: Path) -> None:
    plt = pyplot()
    # tab20's strong shades first, then their light pairs: neighbours in the legend stay apart
    colours = {recipe: plt.cm.tab20((2 * i) % 20 + (2 * i) // 20 % 2) for i, recipe in enumerate(config.recipes)}
    _loss_plot(plt, results, config, colours, out / "loss_vs_flops.png")
    _downstream_plot(plt, results, config, colours, out / "downstream_vs_flops.png")


def _loss_plot(plt, results: list[RunResult], config: ArenaConfig, colours: dict, path: Path) -> None:  # noqa: ANN001
    fig, ax = plt.subplots(figsize=(9, 5))
    largest = max(config.budgets)
    for recipe in config.recipes:
        points = []
        for budget in sorted(config.budgets):
            runs = runs_of(results, recipe, budget)
            loss = per_seed(runs, lambda r: r.val_loss)
            if loss is not None:
                points.append((statistics.fmean(r.flops for r in runs), loss))
        if points:
            ax.errorbar([p[0] for p in points], [p[1].mean for p in points], yerr=[p[1].std or 0.0 for p in points],
                        marker="o", capsize=3, color=colours[recipe], label=label(recipe))
        curves = [r.val_curve for r in runs_of(results, recipe, largest) if r.val_curve]
        if curves:
            n = min(len(c) for c in curves)
            ax.plot([curves[0][i][0] for i in range(n)], [statistics.fmean(c[i][1] for c in curves) for i in range(n)],
                    linestyle=":", linewidth=1, color=colours[recipe])
    _log_axis(ax, config.budgets)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (each objective's own)")
    ax.set_title("final validation loss per budget (mean ± sd over seeds); dotted: during the largest budget's run\n"
                 "(each objective's own loss: not comparable across objectives)", fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _downstream_plot(plt, results: list[RunResult], config: ArenaConfig, colours: dict,  # noqa: ANN001
                     path: Path) -> None:
    tasks = list(config.downstream)
    columns = min(3, max(1, len(tasks)))
    rows = (len(tasks) + columns - 1) // columns or 1
    legend_width = 4.2  # inches on the right for the legend (variants have long names)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns + legend_width, 4.2 * rows), squeeze=False)
    handles: dict[str, object] = {}
    for ax, task in zip(axes.flat, tasks):
        metric = DOWNSTREAM.get(task) or ("accuracy" if task in PROMPTS else "P@1")
        for recipe in config.recipes:
            points = []
            for budget in sorted(config.budgets):
                runs = runs_of(results, recipe, budget)
                score = per_seed(runs, lambda r, t=task: r.downstream.get(t))
                if score is not None:
                    points.append((statistics.fmean(r.flops for r in runs), score))
            if points:
                line = ax.errorbar([p[0] for p in points], [p[1].mean for p in points],
                                   yerr=[p[1].std or 0.0 for p in points], marker="o", capsize=3,
                                   color=colours[recipe], label=label(recipe))
                handles.setdefault(label(recipe), line)
        for recipe in config.random_init:
            scratch = random_estimate(results, recipe, task)
            if scratch is None:
                continue
            name = f"random weights ({family(results, recipe)}: {label(recipe)})"
            spread = scratch.std or 0.0
            ax.axhspan(scratch.mean - spread, scratch.mean + spread, color=colours[recipe], alpha=0.15)
            handles.setdefault(name, ax.axhline(scratch.mean, linestyle="--", linewidth=1.2, color=colours[recipe]))
        low, high = ax.get_ylim()
        if high - low < 0.02:  # every score alike (a floor): a readable band around it
            ax.set_ylim((low + high) / 2 - 0.05, (low + high) / 2 + 0.05)
        if not ax.lines and not ax.collections:
            ax.text(0.5, 0.5, "not scored", ha="center", va="center", transform=ax.transAxes, color="grey")
        _log_axis(ax, config.budgets)
        ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel(f"validation {metric.removeprefix('val/')}")
        how = f"fine-tuned {config.finetune_steps} steps" if task in DOWNSTREAM else \
            "prompted" if task in PROMPTS else "probed"
        ax.set_title(f"{task} ({how}; mean ± sd over seeds)", fontsize=9)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - legend_width / (5.2 * columns + legend_width), 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
