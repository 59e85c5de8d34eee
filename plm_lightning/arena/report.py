"""The arena's results as files: ``results.csv`` (one row per run, everything the report needs, so that
``--report-only`` rebuilds the report from it alone), ``results.md``, the two figures (:mod:`.figures`) and
``report.md``: the claims (:mod:`.claims`), the signal table (pretrained minus random weights per task and family,
:mod:`.signal`), the scores, and what the runs cost and which ran at once."""

from __future__ import annotations

import csv
import json
import math
import shlex
from pathlib import Path

from plm_lightning.arena.applicability import FAMILIES
from plm_lightning.arena.claims import Claim, check_claims
from plm_lightning.arena.config import DOWNSTREAM, PROMPTS, ArenaConfig, RunResult
from plm_lightning.arena.figures import plots
from plm_lightning.arena.signal import family, per_seed, random_estimate, runs_of, signal, uninformative
from plm_lightning.errors import ConfigError

__all__ = ["Claim", "check_claims", "read_results", "write_report", "write_results_csv"]

_FIXED = ["recipe", "seed", "objective", "budget_flops", "steps", "flops", "flops_per_step", "parameters", "val_loss"]
LENGTHS = ("input_length_mean", "target_length_mean")
"""The corruption statistics a report needs (T5's claim), kept in results.csv."""
_AFTER = [*LENGTHS, "seconds_per_step", "seconds", "started", "finished", "job", "val_curve", "errors"]


def _cell(value: float | None, digits: int | None = 6) -> str:
    """A number of the table: ``digits`` significant digits, or (None) exactly, so that a report rebuilt from the
    file judges the same numbers."""
    if value is None:
        return ""
    return repr(float(value)) if digits is None else f"{value:.{digits}g}"


def _header(config: ArenaConfig) -> list[str]:
    return [*_FIXED, *config.downstream, *(f"random-init:{t}" for t in config.downstream), *_AFTER]


def write_results_csv(results: list[RunResult], config: ArenaConfig, path: Path) -> None:
    """Every run, one row each (atomically: the arena rewrites it as each run finishes)."""
    tasks = list(config.downstream)
    rows = [[r.recipe, r.seed, r.objective, _cell(r.budget), r.steps, _cell(r.flops), _cell(r.flops_per_step),
             r.parameters, _cell(r.val_loss, None), *(_cell(r.downstream.get(t), None) for t in tasks),
             *(_cell(r.random_init.get(t), None) for t in tasks), *(_cell(r.statistics.get(k), None) for k in LENGTHS),
             _cell(r.seconds_per_step, None), _cell(r.seconds, None), _cell(r.started, None), _cell(r.finished, None),
             r.job, "|".join(f"{_cell(f, None)}:{_cell(v, None)}" for f, v in r.val_curve),
             json.dumps(r.errors) if r.errors else ""] for r in results]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([_header(config), *rows])
    tmp.replace(path)


def read_results(path: Path, config: ArenaConfig) -> list[RunResult]:
    """The runs of a ``results.csv`` (what ``--report-only`` reports; nothing else is read). Budgets are matched to
    ``config``'s (the file keeps 6 significant digits); tasks the file has no column for are not scored."""
    if not path.is_file():
        raise ConfigError(f"arena --report-only: no {path} (run the arena first, or give the --dir it ran in)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    number = lambda text: float(text) if text not in ("", None) else None  # noqa: E731
    results = []
    for row in rows:
        budget = float(row["budget_flops"])
        budget = next((b for b in config.budgets if math.isclose(b, budget, rel_tol=1e-5)), budget)
        curve = [tuple(float(x) for x in point.split(":")) for point in (row.get("val_curve") or "").split("|")
                 if point]
        lengths = {k: number(row.get(k)) for k in LENGTHS if number(row.get(k)) is not None}
        results.append(RunResult(
            row["recipe"], budget, int(row["seed"]), row["objective"], float(row["flops_per_step"]), int(row["steps"]),
            float(row["flops"]), int(row["parameters"]), curve, number(row["val_loss"]),
            {t: number(row[t]) for t in config.downstream if row.get(t) not in (None, "")},
            json.loads(row["errors"]) if row.get("errors") else {},
            lengths, number(row.get("seconds")) or 0.0,
            number(row.get("seconds_per_step")) or 0.0,
            {t: number(row[f"random-init:{t}"]) for t in config.downstream
             if row.get(f"random-init:{t}") not in (None, "")},
            number(row.get("started")) or 0.0, number(row.get("finished")) or 0.0, row.get("job") or ""))
    return results


def _markdown(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def _summary(results: list[RunResult], config: ArenaConfig) -> list[list[str]]:
    """One row per (recipe, budget): seeds, steps, parameters, the mean ± standard deviation of each score."""
    rows = []
    for budget in sorted(config.budgets):
        for recipe in config.recipes:
            runs = runs_of(results, recipe, budget)
            if not runs:
                continue
            cells = [per_seed(runs, lambda r: r.val_loss)]
            cells += [per_seed(runs, lambda r, t=t: r.downstream.get(t)) for t in config.downstream]
            rows.append([recipe, f"{budget:.3g}", str(len(runs)), str(runs[0].steps), f"{runs[0].parameters:,}",
                         *("" if c is None else str(c).replace(f" (n={len(runs)})", "") for c in cells)])
    return rows


def signal_rows(results: list[RunResult], config: ArenaConfig) -> list[list[str]]:
    """The gate table: per task and family (its ``--random-init`` recipe), pretrained minus random weights ± two
    standard errors at each budget, marked where it passes; the random-weights score itself."""
    rows = []
    for task in config.downstream:
        for name in FAMILIES:
            for recipe in (r for r in config.random_init if family(results, r) == name):
                scratch = random_estimate(results, recipe, task)
                if scratch is None:
                    continue
                cells = []
                for budget in sorted(config.budgets):
                    found = signal(results, config.random_init, recipe, task, budget)
                    floor = uninformative(results, task, budget)
                    mark = " (uninformative)" if floor is not None else " **passes**" if found.passed else ""
                    cells.append(found.short() + mark)
                rows.append([task, name, recipe, str(scratch), *cells])
    return rows


def recipe_signal_rows(results: list[RunResult], config: ArenaConfig, budget: float) -> list[list[str]]:
    """Every recipe at ``budget``: per task, pretrained minus random weights (its own or its family's) ± two
    standard errors, marked where it passes the gate."""
    rows = []
    for recipe in config.recipes:
        if not runs_of(results, recipe, budget):
            continue
        cells = []
        for task in config.downstream:
            found = signal(results, config.random_init, recipe, task, budget)
            if found.pretrained is None:
                cells.append("")
                continue
            against = "" if found.baseline in (None, recipe) else f" ({found.baseline}'s)"
            cells.append(found.short() + against + (" **passes**" if found.passed else ""))
        rows.append([recipe, family(results, recipe) or "", *cells])
    return rows


def skipped_lines(config: ArenaConfig) -> list[str]:
    """One line per task that some recipes cannot take (they were not scored on it)."""
    lines = []
    for task in config.downstream:
        skipped = config.skipped(task)
        if skipped:
            reasons = sorted(set(skipped.values()))
            lines.append(f"- {task}: not applicable to {', '.join(skipped)} ({'; '.join(reasons)})")
    return lines


def timing_words(results: list[RunResult]) -> str:
    """What the runs cost: the sum of their times, the wall time from the first start to the last finish, and how
    many ran at once."""
    total = sum(r.seconds for r in results) / 3600
    timed = [(r.started, r.finished) for r in results if r.started and r.finished]
    if not timed:
        return f"the runs reported took {total:.1f} hours on this machine, each run's pretraining and scoring timed " \
               "as it ran"
    wall = (max(f for _, f in timed) - min(s for s, _ in timed)) / 3600
    events = sorted([(s, 1) for s, _ in timed] + [(f, -1) for _, f in timed])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    busy = sum(f - s for s, f in timed) / 3600
    return (f"the runs reported took {total:.1f} hours of run time; from the first start to the last finish "
            f"{wall:.1f} hours of wall time, at most {most} run{'s' if most != 1 else ''} at once (on average "
            f"{busy / wall if wall else 1:.1f}); every run's start, finish and job are in results.csv")


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
        parts.append(f"{', '.join(probed)} probed (LAMA P@1 of the world's training facts, no fine-tuning)")
    return "; ".join(parts) or "none"


def gpu_command(command: str, factor: float = 100.0) -> str:
    """``command`` (an arena command line) with every budget times ``factor``, on one GPU per run."""
    words, out = shlex.split(command), []
    replaced = {"--dir": "arena_gpu", "--accelerator": "gpu"}
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=")
        if name in (*replaced, "--budget-flops"):
            value = value if eq else (words.pop(0) if words else "")
            if name == "--budget-flops":
                out += [name, ",".join(f"{float(b) * factor:.3g}" for b in value.split(","))]
            continue
        out.append(word)
    return shlex.join([*out, *(w for pair in replaced.items() for w in pair)])


def _floor_words(claims: list[Claim], command: str | None) -> list[str]:
    """What to run where the sanity row does not reproduce for every family at these budgets."""
    sanity = next((c for c in claims if c.statement.startswith("Pretraining beats")), None)
    if sanity is None or sanity.verdict == "reproduces":
        return []
    words = [f"The sanity row (pretraining beats random weights) is *{sanity.verdict}* at the budgets of this page: "
             "some family does not leave random weights' level on any task at this compute."]
    if command:
        words.append(f"A GPU run of the same arena at a hundred times the budgets: `{gpu_command(command)}`.")
    return [" ".join(words), ""]


def _claim_lines(claims: list[Claim]) -> list[str]:
    lines = ["| claim | source | verdict | evidence | by budget |", "|---|---|---|---|---|"]
    return lines + [f"| {c.statement} | {c.source} | **{c.verdict}** | {c.evidence} | {c.by_budget} |" for c in claims]


def write_report(results: list[RunResult], config: ArenaConfig, directory: str | Path,
                 command: str | None = None) -> dict[str, Path]:
    """``results.csv`` (one row per run), ``results.md``, ``loss_vs_flops.png``, ``downstream_vs_flops.png`` and
    ``report.md`` (the claims, the signal table, then the mean ± standard deviation of every score over seeds;
    ``command``, the line that ran the arena, at its top)."""
    out = Path(directory)
    write_results_csv(results, config, out / "results.csv")
    with open(out / "results.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    (out / "results.md").write_text("\n".join(_markdown(table[0], table[1:])) + "\n", encoding="utf-8")
    plots(results, config, out)
    claims = check_claims(results, config)
    seeds = sorted({r.seed for r in results})
    budgets = sorted(config.budgets)
    lines = [f"# Objective arena: {len(config.recipes)} recipes at {', '.join(f'{b:.3g}' for b in budgets)} "
             f"training FLOPs, {len(seeds)} seed{'s' if len(seeds) != 1 else ''}", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    lines += [f"Backbone: hidden {config.hidden_size}, {config.num_layers} layers ({config.num_layers} + "
              f"{config.num_layers} for encoder-decoders), {config.num_heads} heads, FFN {config.intermediate_size}; "
              f"rows of {config.seq_len} tokens, {config.batch_size} rows per step; "
              f"{config.data or 'the embedded corpus'}. Downstream: {_downstream_words(config)}. Each seed varies "
              "the pretraining seed (initialisation, sample order, masks, held-out split) and the fine-tuning seed "
              "(head initialisation, order, dropout).", "",
              f"What it costs: {timing_words(results)}.", "",
              "## Claims of the literature", "",
              "A claim is judged only on the tasks where every recipe it compares beats random weights of its family "
              "by more than two standard errors at that budget (the signal table below) and the runs do not all "
              "score alike; with no such task it is *not judged: below the floor*. On the tasks that pass, a claim "
              "*reproduces* where the difference of the means exceeds two standard errors of the difference "
              "(Welch), *does not reproduce* where the opposite difference does, and is *inconclusive at this "
              "scale* in between. The verdict is the largest budget's; *by budget* gives the difference (± two "
              "standard errors) at each.", "", *_claim_lines(claims), "",
              "A verdict measures these tiny models and budgets, not the claim at the papers' scale. More compute on "
              "a GPU: the same command with larger `--budget-flops` values and `--accelerator gpu` (every run on one "
              "CUDA device in bf16-mixed), `--executor slurm` to send the runs to a cluster.", "",
              *_floor_words(claims, command),
              "## Signal: pretrained minus random weights", "",
              "Per task and family, the `--random-init` recipe's pretrained score minus the same architecture "
              "fine-tuned (or probed, or prompted) from random weights, ± two standard errors over seeds; "
              "**passes** where the difference exceeds them. A recipe without its own random-init runs is gated "
              "against its family's.", "",
              *_markdown(["task", "family", "recipe", "random weights", *(f"{b:.3g} FLOPs" for b in budgets)],
                         signal_rows(results, config)), "",
              f"Every recipe at {budgets[-1]:.3g} FLOPs, against its own random weights or (in brackets) its "
              "family's: the gate each claim passes or not.", "",
              *_markdown(["recipe", "family", *config.downstream], recipe_signal_rows(results, config, budgets[-1])),
              ""]
    skipped = skipped_lines(config)
    if skipped:
        lines += ["Not scored, the task not fitting the recipe:", "", *skipped, ""]
    lines += ["## Scores (mean ± standard deviation over seeds)", "",
              *_markdown(["recipe", "budget FLOPs", "seeds", "steps", "parameters", "val loss", *config.downstream],
                         _summary(results, config)), "",
              "![validation loss vs FLOPs](loss_vs_flops.png)", "", "![downstream vs FLOPs](downstream_vs_flops.png)",
              "", "Every run, seed by seed: [results.csv](results.csv).", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return {"csv": out / "results.csv", "markdown": out / "results.md", "report": out / "report.md",
            "loss_plot": out / "loss_vs_flops.png", "downstream_plot": out / "downstream_vs_flops.png"}
