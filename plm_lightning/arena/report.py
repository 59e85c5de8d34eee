"""The arena's results: a table (CSV and Markdown), two figures (validation loss vs training FLOPs; downstream
score vs training FLOPs, with error bars over seeds) and a report of which claims of the literature reproduce at the
arena's scale.

A claim compares two means over seeds. It *reproduces* only when the difference exceeds two standard errors of the
difference, ``2 sqrt(s_a^2 / n_a + s_b^2 / n_b)`` (Welch's standard error; about a 95% interval); it *does not
reproduce* when the opposite difference does; otherwise it is *inconclusive at this scale*, with the numbers. One seed
has no error bar, so a claim on one seed is always inconclusive (``--seeds 3``)."""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from plm_lightning.arena.config import DOWNSTREAM, PROMPTS, ArenaConfig, RunResult, recipe_variant
from plm_lightning.plotting import pyplot

TOLERANCE = 0.01
"""How far below the baseline a score may be and still count as "does not hurt" (a fraction: one point)."""
INCONCLUSIVE = "inconclusive at this scale"


@dataclass(frozen=True)
class Claim:
    """A claim of the literature, checked on the arena's results."""

    statement: str
    source: str
    verdict: str
    """``reproduces``, ``does not reproduce``, ``inconclusive at this scale`` or ``not measured``."""
    evidence: str


@dataclass(frozen=True)
class Estimate:
    """A score over seeds: mean, sample standard deviation (None for one seed) and the number of seeds."""

    mean: float
    std: float | None
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Estimate | None:
        if not values:
            return None
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))

    @property
    def sem(self) -> float | None:
        return None if self.std is None else self.std / math.sqrt(self.n)

    def __str__(self) -> str:
        return f"{self.mean:.4f}" + (f" ± {self.std:.4f}" if self.std is not None else "") + f" (n={self.n})"


def judge(a: Estimate, b: Estimate, margin: float = 0.0) -> tuple[str, str]:
    """The verdict on "``a`` is above ``b`` (above ``b - margin`` for a "does not hurt" claim)", and its numbers."""
    difference = a.mean - b.mean
    if a.sem is None or b.sem is None:
        return INCONCLUSIVE, f"difference {difference:+.4f}; one seed has no error bar (run with --seeds 3)"
    bound = 2 * math.sqrt(a.sem ** 2 + b.sem ** 2)
    if bound == 0:  # every seed of both scored alike: a floor or ceiling (a majority-class score), not a measurement
        return INCONCLUSIVE, (f"difference {difference:+.4f}; every seed of each scored the same, a floor or "
                              "ceiling of the task with no error bar to judge by")
    numbers = f"difference {difference:+.4f}, two standard errors {bound:.4f}"
    if difference + margin > bound:
        return "reproduces", numbers
    if difference + margin < -bound:
        return "does not reproduce", numbers
    return INCONCLUSIVE, numbers


def _runs(results: list[RunResult], recipe: str, budget: float) -> list[RunResult]:
    return [r for r in results if r.recipe == recipe and r.budget == budget]


def _per_seed(runs: list[RunResult], score: Callable[[RunResult], float | None]) -> Estimate | None:
    return Estimate.of([v for v in (score(r) for r in runs) if v is not None])


def task_mean(tasks: tuple[str, ...], scores: str = "downstream") -> Callable[[RunResult], float | None]:
    """A run's mean over ``tasks`` of its ``downstream`` (or ``random_init``) scores; None unless all are there."""
    def score(run: RunResult) -> float | None:
        values = [getattr(run, scores).get(t) for t in tasks]
        return None if not tasks or any(v is None for v in values) else statistics.fmean(values)
    return score


def estimate(results: list[RunResult], recipe: str, budget: float, tasks: tuple[str, ...]) -> Estimate | None:
    """``recipe``'s mean score over ``tasks`` at ``budget``, over its seeds."""
    return _per_seed(_runs(results, recipe, budget), task_mean(tasks))


def _compare(results: list[RunResult], budget: float, better: str, baseline: str, tasks: tuple[str, ...],
             statement: str, source: str, margin: float = 0.0) -> Claim:
    """``better`` scores above ``baseline`` (at least ``-margin`` above, for "does not hurt" claims)."""
    a, b = estimate(results, better, budget, tasks), estimate(results, baseline, budget, tasks)
    if a is None or b is None:
        missing = [n for n, s in ((better, a), (baseline, b)) if s is None]
        return Claim(statement, source, "not measured",
                     f"needs {' and '.join(missing)} in --recipes with {', '.join(tasks)} scored")
    verdict, numbers = judge(a, b, margin)
    return Claim(statement, source, verdict, f"{better} {a} vs {baseline} {b}; {numbers} ({', '.join(tasks)}; "
                                             f"{budget:.3g} FLOPs each)")


def check_claims(results: list[RunResult], config: ArenaConfig) -> list[Claim]:
    """The claims the issue names, at the largest budget: RTD beats MLM at equal compute (ELECTRA sec. 3.2); removing
    NSP does not hurt (RoBERTa sec. 4.2); span masking helps span tasks (SpanBERT sec. 5); T5's span corruption
    shortens the targets (T5 sec. 3.3.4: its targets are much shorter than a denoising objective that rebuilds the
    whole input, as BART's); pretraining beats random initialisation; ALBERT's sharing saves parameters at equal
    FLOPs; fine-tuning favours bidirectional context and prompting unidirectional (Artetxe et al. 2022)."""
    budget = max(config.budgets)
    tasks = tuple(t for t in config.downstream if t in DOWNSTREAM)
    span_tasks = tuple(t for t in tasks if t in ("cloze-spans", "markup-spans"))
    claims = [
        _compare(results, budget, "electra", "bert", tasks, "Replaced token detection beats MLM at equal compute",
                 "Clark et al. 2020, sec. 3.2 / Fig. 1"),
        _compare(results, budget, "deberta-v3", "deberta", tasks, "RTD beats MLM on a DeBERTa backbone",
                 "He et al. 2023, sec. 5.1"),
        _compare(results, budget, *_without_nsp(config), tasks, "Removing NSP does not hurt downstream scores",
                 "Liu et al. 2019, sec. 4.2, Table 2", margin=TOLERANCE),
        _compare(results, budget, "spanbert", "bert", span_tasks or ("cloze-spans",),
                 "Span masking helps span-selection tasks", "Joshi et al. 2020, sec. 5"),
        _target_lengths(results, budget),
        _pretraining_helps(results, budget, tasks, config),
        _albert_sharing(results, budget, tasks),
        _bidirectionality(results, budget, tuple(config.downstream)),
    ]
    return claims


def _without_nsp(config: ArenaConfig) -> tuple[str, str]:
    """(the recipe without NSP, its baseline): a ``bert[model.sentence_prediction=none;...]`` variant against
    ``bert`` (one tokenizer and corpus; the pairs become full-sentence rows, RoBERTa's FULL-SENTENCES), else
    ``roberta`` (which also changes the tokenizer to byte-level BPE)."""
    variant = next((r for r in config.recipes if recipe_variant(r)[0] == "bert"
                    and recipe_variant(r)[1].get("model.sentence_prediction") == "none"), None)
    return variant or "roberta", "bert"


def _target_lengths(results: list[RunResult], budget: float) -> Claim:
    """Deterministic: the corruption statistics and the measured step time at the same input length."""
    statement, source = "T5's span corruption shortens the targets", "Raffel et al. 2020, sec. 3.3.4"
    t5, bart = _runs(results, "t5", budget), _runs(results, "bart", budget)
    length = [r[0].statistics.get("target_length_mean") if r else None for r in (t5, bart)]
    if not all(length):
        return Claim(statement, source, "not measured", "needs t5 and bart in --recipes")
    ratio = length[0] / length[1]
    step = [statistics.fmean(x.seconds_per_step for x in r) if all(x.seconds_per_step for x in r) else None
            for r in (t5, bart)]
    timing = f"; a step {step[0] * 1000:.0f} ms (t5) vs {step[1] * 1000:.0f} ms (bart)" if all(step) else ""
    return Claim(statement, source, "reproduces" if ratio < 0.5 else "does not reproduce",
                 f"mean target {length[0]:.1f} tokens (t5) vs {length[1]:.1f} (bart, the whole input): "
                 f"{ratio:.2f}x{timing}")


def _pretraining_helps(results: list[RunResult], budget: float, tasks: tuple[str, ...], config: ArenaConfig) -> Claim:
    """Each ``--random-init`` recipe's fine-tuned score against its architecture from random weights, per seed."""
    statement, source = "Pretraining beats random initialisation downstream", "Devlin et al. 2019, sec. 5; " \
                                                                                "Erhan et al. 2010"
    pairs = [(r.recipe, task_mean(tasks)(r), task_mean(tasks, "random_init")(r)) for recipe in config.random_init
             for r in _runs(results, recipe, budget)]
    pairs = [(name, a, b) for name, a, b in pairs if a is not None and b is not None]
    if not pairs or not tasks:
        return Claim(statement, source, "not measured", "needs --random-init RECIPE and fine-tuning tasks")
    pretrained, scratch = Estimate.of([a for _, a, _ in pairs]), Estimate.of([b for _, _, b in pairs])
    verdict, numbers = judge(pretrained, scratch)
    names = ", ".join(sorted({name for name, _, _ in pairs}))
    return Claim(statement, source, verdict, f"{names} pretrained {pretrained} vs from random weights {scratch}; "
                                             f"{numbers} ({', '.join(tasks)}; {budget:.3g} FLOPs)")


def _albert_sharing(results: list[RunResult], budget: float, tasks: tuple[str, ...]) -> Claim:
    """Parameters are deterministic (a ratio); the score's cost is judged like any difference."""
    statement, source = "ALBERT's cross-layer sharing cuts parameters at equal FLOPs", "Lan et al. 2020, sec. 4.4"
    albert, bert = _runs(results, "albert", budget), _runs(results, "bert", budget)
    if not albert or not bert:
        return Claim(statement, source, "not measured", "needs albert and bert in --recipes")
    ratio = albert[0].parameters / bert[0].parameters
    a, b = estimate(results, "albert", budget, tasks), estimate(results, "bert", budget, tasks)
    cost = ""
    if a is not None and b is not None:
        verdict, numbers = judge(a, b)
        reading = {"reproduces": "albert scores higher", "does not reproduce": "bert scores higher"}.get(
            verdict, "no difference beyond noise")
        cost = f"; what it costs downstream: albert {a} vs bert {b}, {numbers}: {reading}"
    return Claim(statement, source, "reproduces" if ratio < 0.5 else "does not reproduce",
                 f"{albert[0].parameters:,} vs {bert[0].parameters:,} parameters ({ratio:.2f}x){cost}")


def _bidirectionality(results: list[RunResult], budget: float, tasks: tuple[str, ...]) -> Claim:
    """Artetxe et al. 2022: of the continuum's variants, the most bidirectional fine-tunes best and the least
    bidirectional prompts best (``continuum[data.bidirectional_fraction=f;...]`` recipes; 0.5 when unset)."""
    statement = "Fine-tuning favours bidirectional context, prompting favours unidirectional"
    source = "Artetxe et al. 2022, On the Role of Bidirectionality in Language Modeling at Scale, sec. 5"
    variants = {r.recipe: float(recipe_variant(r.recipe)[1].get("data.bidirectional_fraction", 0.5)) for r in results
                if recipe_variant(r.recipe)[0] == "continuum" and r.budget == budget}
    finetuned, prompted = tuple(t for t in tasks if t in DOWNSTREAM), tuple(t for t in tasks if t in PROMPTS)
    if len(set(variants.values())) < 2 or not finetuned or not prompted:
        return Claim(statement, source, "not measured", "needs continuum variants of two bidirectional fractions "
                     "in --recipes and both fine-tuned and prompt-* tasks in --downstream")
    uni, bi = min(variants, key=variants.get), max(variants, key=variants.get)
    # a task one end cannot take (extractive QA refuses a causal reader) is left out of both sides' means
    finetuned, prompted = (tuple(t for t in ts if all(r.downstream.get(t) is not None for r in results
                                                      if r.recipe in (uni, bi) and r.budget == budget))
                           for ts in (finetuned, prompted))
    scores = {name: (estimate(results, bi, budget, ts), estimate(results, uni, budget, ts))
              for name, ts in (("fine-tuned", finetuned), ("prompted", prompted))}
    if any(v is None for pair in scores.values() for v in pair):
        return Claim(statement, source, "not measured", "a variant's fine-tuned or prompted scores are missing")
    (ft_bi, ft_uni), (pr_bi, pr_uni) = scores["fine-tuned"], scores["prompted"]
    ft_verdict, ft_numbers = judge(ft_bi, ft_uni)
    pr_verdict, pr_numbers = judge(pr_uni, pr_bi)
    verdicts = {ft_verdict, pr_verdict}
    verdict = ("reproduces" if verdicts == {"reproduces"} else "does not reproduce" if "does not reproduce" in verdicts
               else INCONCLUSIVE)
    return Claim(statement, source, verdict,
                 f"bidirectional fraction {variants[bi]:g} vs {variants[uni]:g}: fine-tuned {ft_bi} vs {ft_uni} "
                 f"({', '.join(finetuned)}; {ft_numbers}), prompted {pr_bi} vs {pr_uni} ({', '.join(prompted)}; "
                 f"unidirectional minus bidirectional: {pr_numbers}); {budget:.3g} FLOPs each")


def _summary(results: list[RunResult], config: ArenaConfig) -> list[list[str]]:
    """One row per (recipe, budget): seeds, steps, parameters, the mean ± standard deviation of each score."""
    tasks = list(config.downstream)
    rows = []
    for budget in config.budgets:
        for recipe in config.recipes:
            runs = _runs(results, recipe, budget)
            if not runs:
                continue
            cells = [_per_seed(runs, lambda r: r.val_loss)]
            cells += [_per_seed(runs, lambda r, t=t: r.downstream.get(t)) for t in tasks]
            cells += [_per_seed(runs, lambda r, t=t: r.random_init.get(t)) if recipe in config.random_init else None
                      for t in tasks if t in DOWNSTREAM and config.random_init]
            rows.append([recipe, f"{budget:.3g}", str(len(runs)), str(runs[0].steps), f"{runs[0].parameters:,}",
                         *("" if c is None else str(c).replace(f" (n={len(runs)})", "") for c in cells)])
    return rows


def _downstream_words(config: ArenaConfig) -> str:
    """The page's sentence on how each downstream task is scored."""
    finetuned = [t for t in config.downstream if t in DOWNSTREAM]
    prompted = [t for t in config.downstream if t in PROMPTS]
    probed = [t for t in config.downstream if t not in DOWNSTREAM and t not in PROMPTS]
    ranking = {"none": "summed log-likelihood", "token": "log-likelihood per token",
               "char": "log-likelihood per character"}[config.prompt_normalize]
    parts = [f"{', '.join(finetuned)} fine-tuned for {config.finetune_steps} steps each"] if finetuned else []
    if "code-or-prose" in finetuned:
        parts[0] += " (code-or-prose by macro-F1: always answering prose, its majority class, scores about 0.47)"
    if prompted:
        limit = f", the first {config.prompt_limit} validation examples" if config.prompt_limit else ""
        parts.append(f"{', '.join(prompted)} prompted {config.prompt_shots}-shot, candidates ranked by {ranking}"
                     f"{limit}")
    if probed:
        parts.append(f"{', '.join(probed)} probed")
    return "; ".join(parts) or "none"


def _markdown(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def _plots(results: list[RunResult], config: ArenaConfig, out: Path) -> None:
    """``loss_vs_flops.png`` (each recipe's mean curve over seeds at the largest budget) and
    ``downstream_vs_flops.png`` (each task's score against pretraining FLOPs, mean ± standard deviation over seeds,
    with the random-initialisation score as a dashed line where it was measured)."""
    plt = pyplot()
    budget = max(config.budgets)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for recipe in config.recipes:
        curves = [r.val_curve for r in _runs(results, recipe, budget) if r.val_curve]
        if curves:
            n = min(len(c) for c in curves)
            ax.plot([curves[0][i][0] for i in range(n)], [statistics.fmean(c[i][1] for c in curves) for i in range(n)],
                    marker="o", label=recipe)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (each objective's own)")
    ax.set_title("validation loss vs training FLOPs, mean over seeds (losses of different objectives are not "
                 "comparable)", fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "loss_vs_flops.png", dpi=110)
    plt.close(fig)
    tasks = list(config.downstream)
    single = len(config.budgets) == 1  # one budget: recipes side by side, not a FLOPs axis a step wide
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5.5 * max(1, len(tasks)), 4.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        metric = DOWNSTREAM.get(task) or ("accuracy" if task in PROMPTS else "P@1")
        for index, recipe in enumerate(config.recipes):
            points = []
            for b in config.budgets:
                runs = _runs(results, recipe, b)
                score = _per_seed(runs, lambda r, t=task: r.downstream.get(t))
                if score is not None:
                    points.append((index if single else statistics.fmean(r.flops for r in runs), score))
            if not points:
                continue
            line = ax.errorbar([p[0] for p in points], [p[1].mean for p in points],
                               yerr=[p[1].std or 0.0 for p in points], marker="o", capsize=3, label=recipe)
            scratch = _per_seed(_runs(results, recipe, budget), lambda r, t=task: r.random_init.get(t))
            if scratch is not None:
                ax.axhline(scratch.mean, linestyle="--", linewidth=1, color=line[0].get_color(),
                           label=f"{recipe} from random weights")
        if single:
            ax.set_xticks(range(len(config.recipes)), [recipe_variant(r)[0] + ("*" if recipe_variant(r)[1] else "")
                                                        for r in config.recipes], rotation=20, fontsize=8)
            ax.set_xlim(-0.5, len(config.recipes) - 0.5)
            ax.set_xlabel(f"recipe at {budget:.3g} pretraining FLOPs (* a variant: see the legend)")
        else:
            import matplotlib.ticker as ticker

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel(f"{task}: validation {metric.removeprefix('val/')}")
        ax.set_title(f"{task} after {config.finetune_steps} fine-tuning steps (mean ± sd over seeds)"
                     if task in DOWNSTREAM else f"{task} (mean ± sd over seeds)", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "downstream_vs_flops.png", dpi=110)
    plt.close(fig)


def write_report(results: list[RunResult], config: ArenaConfig, directory: str | Path,
                 command: str | None = None) -> dict[str, Path]:
    """``results.csv`` (one row per run), ``results.md``, ``loss_vs_flops.png``, ``downstream_vs_flops.png`` and
    ``report.md`` (the claims, then the mean ± standard deviation of every score over seeds; ``command``, the line
    that ran the arena, at its top)."""
    out = Path(directory)
    tasks = list(config.downstream)
    header = ["recipe", "seed", "objective", "budget_flops", "steps", "flops", "flops_per_step", "parameters",
              "val_loss", *tasks, *(f"random-init:{t}" for t in tasks if t in DOWNSTREAM and config.random_init),
              "errors"]
    rows = [[r.recipe, r.seed, r.objective, f"{r.budget:.3g}", r.steps, f"{r.flops:.4g}", f"{r.flops_per_step:.4g}",
             r.parameters, "" if r.val_loss is None else f"{r.val_loss:.4f}",
             *["" if r.downstream.get(t) is None else f"{r.downstream[t]:.4f}" for t in tasks],
             *["" if r.random_init.get(t) is None else f"{r.random_init[t]:.4f}" for t in tasks
               if t in DOWNSTREAM and config.random_init],
             "; ".join(f"{k}: {v}" for k, v in r.errors.items())] for r in results]
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    (out / "results.md").write_text("\n".join(_markdown(header, rows)) + "\n", encoding="utf-8")
    _plots(results, config, out)

    claims = check_claims(results, config)
    seeds = sorted({r.seed for r in results})
    summary_header = ["recipe", "budget FLOPs", "seeds", "steps", "parameters", "val loss", *tasks,
                      *(f"{t} from random weights" for t in tasks if t in DOWNSTREAM and config.random_init)]
    lines = [f"# Objective arena: {len(config.recipes)} recipes at {', '.join(f'{b:.3g}' for b in config.budgets)} "
             f"training FLOPs, {len(seeds)} seed{'s' if len(seeds) != 1 else ''}", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    lines += [f"Backbone: hidden {config.hidden_size}, {config.num_layers} layers ({config.num_layers} + "
              f"{config.num_layers} for encoder-decoders), {config.num_heads} heads, FFN {config.intermediate_size}; "
              f"rows of {config.seq_len} tokens, {config.batch_size} rows per step; "
              f"{config.data or 'the embedded corpus'}. Downstream: {_downstream_words(config)}. Each seed varies "
              "the pretraining seed (initialisation, sample order, masks, held-out split) and the fine-tuning seed "
              "(head initialisation, order, dropout).", "",
              f"What it costs: the runs reported took {sum(r.seconds for r in results) / 3600:.1f} hours on this "
              "machine, each run's pretraining and scoring timed as it ran.", "",
              "## Claims of the literature", "",
              "A claim *reproduces* only where the difference of the means exceeds two standard errors of the "
              "difference (Welch); the opposite difference beyond two standard errors *does not reproduce*; "
              "anything between is *inconclusive at this scale*.", "",
              "| claim | source | verdict | evidence |", "|---|---|---|---|"]
    lines += [f"| {c.statement} | {c.source} | **{c.verdict}** | {c.evidence} |" for c in claims]
    lines += ["", "A verdict measures these tiny models and budgets, not the claim at the papers' scale. Ten times the "
              "compute on a GPU: the same command with each `--budget-flops` value times ten and `--accelerator gpu` "
              "(every run on one CUDA device in bf16-mixed).", "",
              "## Scores (mean ± standard deviation over seeds)", "",
              *_markdown(summary_header, _summary(results, config)), "",
              "![validation loss vs FLOPs](loss_vs_flops.png)", "", "![downstream vs FLOPs](downstream_vs_flops.png)",
              "", "Every run, seed by seed: [results.csv](results.csv).", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return {"csv": out / "results.csv", "markdown": out / "results.md", "report": out / "report.md",
            "loss_plot": out / "loss_vs_flops.png", "downstream_plot": out / "downstream_vs_flops.png"}
