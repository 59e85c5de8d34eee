"""The arena's results: a table (CSV and Markdown), two figures (validation loss vs training FLOPs; downstream
score vs training FLOPs) and a report of which claims of the literature reproduce at the arena's scale."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from plm_lightning.arena.runner import DOWNSTREAM, PROMPTS, ArenaConfig, RunResult, recipe_variant
from plm_lightning.plotting import pyplot

TOLERANCE = 0.01
"""How far below the baseline a score may be and still count as "does not hurt" (a fraction: one point)."""


@dataclass(frozen=True)
class Claim:
    """A claim of the literature, checked on the arena's results."""

    statement: str
    source: str
    verdict: str
    """``reproduces``, ``does not reproduce`` or ``not measured``."""
    evidence: str


def _mean_score(result: RunResult | None, tasks: tuple[str, ...]) -> float | None:
    scores = [result.downstream.get(t) for t in tasks] if result else []
    scores = [s for s in scores if s is not None]
    return sum(scores) / len(scores) if scores and len(scores) == len(tasks) else None


def _at(results: list[RunResult], recipe: str, budget: float) -> RunResult | None:
    return next((r for r in results if r.recipe == recipe and r.budget == budget), None)


def _compare(results: list[RunResult], budget: float, better: str, baseline: str, tasks: tuple[str, ...],
             statement: str, source: str, margin: float = 0.0) -> Claim:
    """``better`` scores above ``baseline`` (at least ``-margin`` above, for "does not hurt" claims)."""
    a, b = _mean_score(_at(results, better, budget), tasks), _mean_score(_at(results, baseline, budget), tasks)
    if a is None or b is None:
        missing = [n for n, s in ((better, a), (baseline, b)) if s is None]
        return Claim(statement, source, "not measured",
                     f"needs {' and '.join(missing)} in --recipes with {', '.join(tasks)} scored")
    verdict = "reproduces" if a - b > -margin else "does not reproduce"
    return Claim(statement, source, verdict, f"{better} {a:.4f} vs {baseline} {b:.4f} ({', '.join(tasks)}; "
                                             f"{budget:.3g} FLOPs each)")


def check_claims(results: list[RunResult], config: ArenaConfig) -> list[Claim]:
    """The claims the issue names, at the largest budget: RTD beats MLM at equal compute (ELECTRA sec. 3.2); removing
    NSP does not hurt (RoBERTa sec. 4.2); span masking helps span tasks (SpanBERT sec. 5); T5's span corruption
    shortens the targets (T5 sec. 3.3.4: its targets are much shorter than a denoising objective that rebuilds the
    whole input, as BART's)."""
    budget = max(config.budgets)
    tasks = tuple(config.downstream)
    span_tasks = tuple(t for t in tasks if t in ("cloze-spans", "markup-spans"))
    claims = [
        _compare(results, budget, "electra", "bert", tasks, "Replaced token detection beats MLM at equal compute",
                 "Clark et al. 2020, sec. 3.2 / Fig. 1"),
        _compare(results, budget, "deberta-v3", "deberta", tasks, "RTD beats MLM on a DeBERTa backbone",
                 "He et al. 2023, sec. 5.1"),
        _compare(results, budget, "roberta", "bert", tasks, "Removing NSP does not hurt downstream scores",
                 "Liu et al. 2019, sec. 4.2 (also byte-level BPE and full-sentence rows here)", margin=TOLERANCE),
        _compare(results, budget, "spanbert", "bert", span_tasks or ("cloze-spans",),
                 "Span masking helps span-selection tasks", "Joshi et al. 2020, sec. 5"),
    ]
    t5, bart = _at(results, "t5", budget), _at(results, "bart", budget)
    statement, source = "T5's span corruption shortens the targets", "Raffel et al. 2020, sec. 3.3.4"
    if t5 and bart and t5.statistics.get("target_length_mean") and bart.statistics.get("target_length_mean"):
        ratio = t5.statistics["target_length_mean"] / bart.statistics["target_length_mean"]
        claims.append(Claim(statement, source, "reproduces" if ratio < 0.5 else "does not reproduce",
                            f"mean target {t5.statistics['target_length_mean']:.1f} tokens (t5) vs "
                            f"{bart.statistics['target_length_mean']:.1f} (bart, the whole input): {ratio:.2f}x"))
    else:
        claims.append(Claim(statement, source, "not measured", "needs t5 and bart in --recipes"))
    claims.append(_bidirectionality(results, budget, tasks))
    return claims


def _bidirectionality(results: list[RunResult], budget: float, tasks: tuple[str, ...]) -> Claim:
    """Artetxe et al. 2022: of the continuum's variants, the most bidirectional fine-tunes best and the least
    bidirectional prompts best (``continuum[data.bidirectional_fraction=f;...]`` recipes; 0.5 when unset)."""
    statement = "Fine-tuning favours bidirectional context, prompting favours unidirectional"
    source = "Artetxe et al. 2022, On the Role of Bidirectionality in Language Modeling at Scale, sec. 5"
    points = [(float(recipe_variant(r.recipe)[1].get("data.bidirectional_fraction", 0.5)), r) for r in results
              if recipe_variant(r.recipe)[0] == "continuum" and r.budget == budget]
    finetuned, prompted = tuple(t for t in tasks if t in DOWNSTREAM), tuple(t for t in tasks if t in PROMPTS)
    if len({f for f, _ in points}) < 2 or not finetuned or not prompted:
        return Claim(statement, source, "not measured", "needs continuum variants of two bidirectional fractions "
                     "in --recipes and both fine-tuned and prompt-* tasks in --downstream")
    (low, uni), (high, bi) = min(points, key=lambda p: p[0]), max(points, key=lambda p: p[0])
    scores = {name: (_mean_score(bi, ts), _mean_score(uni, ts)) for name, ts in (("fine-tuned", finetuned),
                                                                               ("prompted", prompted))}
    if any(v is None for pair in scores.values() for v in pair):
        return Claim(statement, source, "not measured", "a variant's fine-tuned or prompted scores are missing")
    (ft_bi, ft_uni), (pr_bi, pr_uni) = scores["fine-tuned"], scores["prompted"]
    verdict = "reproduces" if ft_bi >= ft_uni and pr_uni >= pr_bi else "does not reproduce"
    return Claim(statement, source, verdict,
                 f"bidirectional fraction {high:g} vs {low:g}: fine-tuned {ft_bi:.4f} vs {ft_uni:.4f} "
                 f"({', '.join(finetuned)}), prompted {pr_bi:.4f} vs {pr_uni:.4f} ({', '.join(prompted)}); "
                 f"{budget:.3g} FLOPs each")


def write_report(results: list[RunResult], config: ArenaConfig, directory: str | Path) -> dict[str, Path]:
    """``results.csv``, ``results.md``, ``loss_vs_flops.png``, ``downstream_vs_flops.png`` and ``report.md``."""
    out = Path(directory)
    tasks = list(config.downstream)
    header = ["recipe", "objective", "budget_flops", "steps", "flops", "flops_per_step", "parameters", "val_loss",
              *tasks, "errors"]
    rows = [[r.recipe, r.objective, f"{r.budget:.3g}", r.steps, f"{r.flops:.4g}", f"{r.flops_per_step:.4g}",
             r.parameters, "" if r.val_loss is None else f"{r.val_loss:.4f}",
             *["" if r.downstream.get(t) is None else f"{r.downstream[t]:.4f}" for t in tasks],
             "; ".join(f"{k}: {v}" for k, v in r.errors.items())] for r in results]
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    (out / "results.md").write_text("\n".join(table) + "\n", encoding="utf-8")

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        if r.val_curve and r.budget == max(config.budgets):
            ax.plot([f for f, _ in r.val_curve], [v for _, v in r.val_curve], marker="o", label=r.recipe)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (each objective's own)")
    ax.set_title("validation loss vs training FLOPs (losses of different objectives are not comparable)", fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "loss_vs_flops.png", dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5 * max(1, len(tasks)), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for recipe in config.recipes:
            points = sorted((r.flops, r.downstream[task]) for r in results
                            if r.recipe == recipe and r.downstream.get(task) is not None)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=recipe)
        ax.set_xscale("log")
        ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel(task)
        ax.set_title(f"{task} after {config.finetune_steps} fine-tuning steps", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "downstream_vs_flops.png", dpi=110)
    plt.close(fig)

    claims = check_claims(results, config)
    lines = [f"# Objective arena: {len(config.recipes)} recipes at {', '.join(f'{b:.3g}' for b in config.budgets)} "
             "training FLOPs", "",
             f"Backbone: hidden {config.hidden_size}, {config.num_layers} layers ({config.num_layers} + "
             f"{config.num_layers} for encoder-decoders), {config.num_heads} heads, FFN {config.intermediate_size}; "
             f"rows of {config.seq_len} tokens, {config.batch_size} rows per step; the embedded corpus. Downstream: "
             f"{', '.join(tasks)}, {config.finetune_steps} fine-tuning steps each.", "",
             "## Claims of the literature", "", "| claim | source | verdict | evidence |", "|---|---|---|---|"]
    lines += [f"| {c.statement} | {c.source} | **{c.verdict}** | {c.evidence} |" for c in claims]
    lines += ["", "At this scale (tiny models, minutes of CPU) a verdict is a measurement of this run, not of the "
              "claim in general: rerun with larger budgets (`--budget-flops 1e14,1e15`) before reading much into a "
              "difference of a point.", "", "## Results", "", *table, "",
              "![validation loss vs FLOPs](loss_vs_flops.png)", "", "![downstream vs FLOPs](downstream_vs_flops.png)",
              ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return {"csv": out / "results.csv", "markdown": out / "results.md", "report": out / "report.md",
            "loss_plot": out / "loss_vs_flops.png", "downstream_plot": out / "downstream_vs_flops.png"}
