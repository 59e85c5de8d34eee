"""The claims of the literature the arena checks, each judged at every budget on the tasks that pass its sanity
gate (:mod:`plm_lightning.arena.signal`); the verdict is the largest budget's, and the claim says how the difference
moves with compute.

A claim compares two means over seeds. It *reproduces* only when the difference exceeds two standard errors of the
difference, ``2 sqrt(s_a^2 / n_a + s_b^2 / n_b)`` (Welch's standard error; about a 95% interval); it *does not
reproduce* when the opposite difference does; otherwise it is *inconclusive at this scale*, with the numbers. One seed
has no error bar, so a claim on one seed is always inconclusive (``--seeds 3``). Where no task passes the gate for
every recipe it compares, the claim is *not judged: below the floor*: models that do not beat random weights say
nothing about which objective is better."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from plm_lightning.arena.config import DOWNSTREAM, PROMPTS, ArenaConfig, RunResult, recipe_variant
from plm_lightning.arena.signal import (
    BELOW_FLOOR,
    INCONCLUSIVE,
    Estimate,
    estimate,
    family,
    gated_tasks,
    judge,
    runs_of,
    signal,
    two_standard_errors,
    uninformative,
)

TOLERANCE = 0.01
"""How far below the baseline a score may be and still count as "does not hurt" (a fraction: one point)."""
SPAN_TASKS = ("cloze-spans", "markup-spans", "world-spans")


@dataclass(frozen=True)
class Claim:
    """A claim of the literature, checked on the arena's results."""

    statement: str
    source: str
    verdict: str
    """``reproduces``, ``does not reproduce``, ``inconclusive at this scale``, ``not judged: below the floor`` or
    ``not measured``."""
    evidence: str
    by_budget: str = ""
    """The difference at each budget (``1e+12: +0.0100 ± 0.0200, inconclusive; ...``): how it moves with compute."""


@dataclass(frozen=True)
class Point:
    """A claim at one budget."""

    budget: float
    verdict: str
    evidence: str
    difference: float | None = None
    bound: float | None = None

    def short(self) -> str:
        if self.difference is None:
            return f"{self.budget:.3g}: {self.verdict}"
        bound = "" if self.bound is None else f" ± {self.bound:.4f}"
        return f"{self.budget:.3g}: {self.difference:+.4f}{bound}, {self.verdict}"


def _over_budgets(config: ArenaConfig, statement: str, source: str, point: Callable[[float], Point]) -> Claim:
    """The claim judged at every budget: the largest budget's verdict and evidence, the others as its trend."""
    points = [point(b) for b in sorted(config.budgets)]
    trend = "; ".join(p.short() for p in points) if len(points) > 1 else ""
    return Claim(statement, source, points[-1].verdict, points[-1].evidence, trend)


def _gated_means(results: list[RunResult], config: ArenaConfig, budget: float, first: str, second: str,
                 tasks: tuple[str, ...]) -> tuple[tuple[str, ...], list[str], Estimate | None, Estimate | None]:
    """The tasks both recipes pass the gate on, a line for each task left out, and each recipe's mean over the
    tasks kept (None for both when none is kept)."""
    judged, notes = gated_tasks(results, config.random_init, (first, second), tasks, budget)
    if not judged:
        return judged, notes, None, None
    return judged, notes, estimate(results, first, budget, judged), estimate(results, second, budget, judged)


def _compare_at(results: list[RunResult], config: ArenaConfig, budget: float, better: str, baseline: str,
                tasks: tuple[str, ...], margin: float = 0.0) -> Point:
    """``better`` scores above ``baseline`` (at least ``-margin`` above, for "does not hurt" claims), on the tasks
    that pass both recipes' gates."""
    if not tasks:
        return Point(budget, "not measured", "needs a task that suits the claim in --downstream (fine-tuned tasks; "
                                             f"span-selection ones, {' or '.join(SPAN_TASKS)}, for span masking)")
    if not runs_of(results, better, budget) or not runs_of(results, baseline, budget):
        missing = [n for n in (better, baseline) if not runs_of(results, n, budget)]
        return Point(budget, "not measured", f"needs {' and '.join(missing)} in --recipes with {', '.join(tasks)} "
                                             "scored")
    judged, notes, a, b = _gated_means(results, config, budget, better, baseline, tasks)
    left_out = f"; left out: {'; '.join(notes)}" if notes else ""
    if not judged:
        return Point(budget, BELOW_FLOOR, f"no task where both beat random weights: {'; '.join(notes)} "
                                          f"({budget:.3g} FLOPs each)")
    if a is None or b is None:
        return Point(budget, "not measured", f"{', '.join(judged)} not scored for every seed")
    verdict, numbers = judge(a, b, margin)
    return Point(budget, verdict, f"{better} {a} vs {baseline} {b}; {numbers} ({', '.join(judged)}; "
                                  f"{budget:.3g} FLOPs each){left_out}", a.mean - b.mean, two_standard_errors(a, b))


def _compare(results: list[RunResult], config: ArenaConfig, better: str, baseline: str, tasks: tuple[str, ...],
             statement: str, source: str, margin: float = 0.0) -> Claim:
    return _over_budgets(config, statement, source,
                         lambda b: _compare_at(results, config, b, better, baseline, tasks, margin))


def check_claims(results: list[RunResult], config: ArenaConfig) -> list[Claim]:
    """The claims the arena checks: RTD beats MLM at equal compute, on the same fine-tuning protocol (ELECTRA sec.
    3.2); RTD on a DeBERTa backbone (DeBERTaV3 sec. 5.1); removing NSP does not hurt (RoBERTa sec. 4.2); span masking
    helps span tasks (SpanBERT sec. 5); T5's span corruption shortens the targets (T5 sec. 3.3.4); pretraining beats
    random initialisation; ALBERT's sharing saves parameters at equal FLOPs; fine-tuning favours bidirectional
    context and prompting unidirectional (Artetxe et al. 2022)."""
    finetuned = tuple(t for t in config.downstream if t in DOWNSTREAM)
    span_tasks = tuple(t for t in finetuned if t in SPAN_TASKS)
    return [
        _compare(results, config, "electra", "bert", finetuned, "Replaced token detection beats MLM at equal compute",
                 "Clark et al. 2020, sec. 3.2 / Fig. 1"),
        _compare(results, config, "deberta-v3", "deberta", finetuned, "RTD beats MLM on a DeBERTa backbone",
                 "He et al. 2023, sec. 5.1"),
        _compare(results, config, *_without_nsp(config), finetuned, "Removing NSP does not hurt downstream scores",
                 "Liu et al. 2019, sec. 4.2, Table 2", margin=TOLERANCE),
        _compare(results, config, "spanbert", "bert", span_tasks, "Span masking helps span-selection tasks",
                 "Joshi et al. 2020, sec. 5"),
        _target_lengths(results, max(config.budgets)),
        _pretraining_helps(results, config),
        _albert_sharing(results, config, finetuned),
        _bidirectionality(results, config),
    ]


def _without_nsp(config: ArenaConfig) -> tuple[str, str]:
    """(the recipe without NSP, its baseline): a ``bert[model.sentence_prediction=none;...]`` variant against
    ``bert`` (one tokenizer and corpus; the pairs become full-sentence rows, RoBERTa's FULL-SENTENCES), else
    ``roberta`` (which also changes the tokenizer to byte-level BPE)."""
    variant = next((r for r in config.recipes if recipe_variant(r)[0] == "bert"
                    and recipe_variant(r)[1].get("model.sentence_prediction") == "none"), None)
    return variant or "roberta", "bert"


def _target_lengths(results: list[RunResult], budget: float) -> Claim:
    """Deterministic: target tokens per input token of each corruption (T5's inputs are whole rows, BART's are its
    shorter corrupted documents, so absolute lengths would compare texts of different lengths), and the measured
    step time. Reproduces where T5's targets are under half BART's, per input token."""
    statement, source = "T5's span corruption shortens the targets", "Raffel et al. 2020, sec. 3.3.4"
    t5, bart = runs_of(results, "t5", budget), runs_of(results, "bart", budget)
    stats = [r[0].statistics if r else {} for r in (t5, bart)]
    if not all(s.get("target_length_mean") for s in stats):
        return Claim(statement, source, "not measured", "needs t5 and bart in --recipes")
    if not all(s.get("input_length_mean") for s in stats):
        return Claim(statement, source, "not measured", "the runs' corruption statistics have no input_length_mean "
                                                        "(measured before 2026-12-07: run the arena again)")
    per_input = [s["target_length_mean"] / s["input_length_mean"] for s in stats]
    ratio = per_input[0] / per_input[1]
    step = [statistics.fmean(x.seconds_per_step for x in r) if all(x.seconds_per_step for x in r) else None
            for r in (t5, bart)]
    timing = f"; a step {step[0] * 1000:.0f} ms (t5) vs {step[1] * 1000:.0f} ms (bart)" if all(step) else ""
    lengths = [f"{s['target_length_mean']:.1f} target tokens per {s['input_length_mean']:.1f} input tokens" for s in stats]
    return Claim(statement, source, "reproduces" if ratio < 0.5 else "does not reproduce",
                 f"{lengths[0]} (t5: {per_input[0]:.2f} per input token) vs {lengths[1]} (bart, the whole text: "
                 f"{per_input[1]:.2f}): {ratio:.2f}x{timing}")


def _pretraining_at(results: list[RunResult], config: ArenaConfig, budget: float) -> Point:
    """Per family, every recipe against random weights (its own, else its family's ``--random-init`` recipe's) on
    each informative task: reproduces where every family measured has a recipe and task on which pretraining beats
    random weights beyond two standard errors; does not reproduce where a family's random weights beat pretraining
    on every task it was scored on."""
    by_family: dict[str, list] = {}
    for recipe in config.recipes:
        for task in config.downstream:
            if uninformative(results, task, budget) is not None:  # every run at one floor
                continue
            found = signal(results, config.random_init, recipe, task, budget)
            if found.difference is not None:
                by_family.setdefault(family(results, recipe) or "?", []).append(found)
    if not by_family:
        return Point(budget, "not measured", "needs --random-init RECIPE with an informative task scored from random "
                                             "weights")
    parts, passed, reversed_ = [], [], []
    for name, signals in by_family.items():
        best = max(signals, key=lambda s: s.difference - (s.bound or 0.0))
        passed.append(any(s.passed for s in signals))
        reversed_.append(all(s.bound is not None and s.difference < -s.bound for s in signals))
        against = "" if best.baseline == best.recipe else f" (against {best.baseline}'s random weights)"
        parts.append(f"{name}: {best.recipe} on {best.task} {best.short()}{against}"
                     f"{'' if best.passed else ', below two standard errors'}")
    verdict = "reproduces" if all(passed) else "does not reproduce" if any(reversed_) else INCONCLUSIVE
    best = max((s for signals in by_family.values() for s in signals), key=lambda s: s.difference - (s.bound or 0.0))
    return Point(budget, verdict, f"pretrained minus random weights, the best recipe and task per family: "
                                  f"{'; '.join(parts)} ({budget:.3g} FLOPs; every recipe in the signal tables)",
                 best.difference, best.bound)


def _pretraining_helps(results: list[RunResult], config: ArenaConfig) -> Claim:
    return _over_budgets(config, "Pretraining beats random initialisation downstream",
                         "Devlin et al. 2019, sec. 5; Erhan et al. 2010",
                         lambda b: _pretraining_at(results, config, b))


def _albert_sharing(results: list[RunResult], config: ArenaConfig, tasks: tuple[str, ...]) -> Claim:
    """Parameters are deterministic (a ratio: reproduces where ALBERT has fewer); the score's cost is judged like any
    difference, on gated tasks."""
    statement, source = "ALBERT's cross-layer sharing cuts parameters at equal FLOPs", "Lan et al. 2020, sec. 4.4"
    budget = max(config.budgets)
    albert, bert = runs_of(results, "albert", budget), runs_of(results, "bert", budget)
    if not albert or not bert:
        return Claim(statement, source, "not measured", "needs albert and bert in --recipes")
    ratio = albert[0].parameters / bert[0].parameters
    cost = _compare_at(results, config, budget, "albert", "bert", tasks)
    reading = {"reproduces": "albert scores higher", "does not reproduce": "bert scores higher",
               INCONCLUSIVE: "no difference beyond noise"}.get(cost.verdict, cost.verdict)
    layers = config.num_layers  # one layer's weights serve all of them: at most num_layers times fewer layer weights
    return Claim(statement, source, "reproduces" if ratio < 1 else "does not reproduce",
                 f"{albert[0].parameters:,} vs {bert[0].parameters:,} parameters ({ratio:.2f}x; one set of layer "
                 f"weights for {layers} layers, at most {layers}x fewer, plus the factorised embeddings; the paper's "
                 f"base models, 12 layers: 12M vs 108M, 0.11x); what it costs downstream: {reading} ({cost.evidence})")


def _bidirectionality_at(results: list[RunResult], config: ArenaConfig, budget: float) -> Point:
    """Artetxe et al. 2022: of the continuum's variants, the most bidirectional fine-tunes best and the least
    bidirectional prompts best (``continuum[data.bidirectional_fraction=f;...]`` recipes; 0.5 when unset)."""
    variants = {r.recipe: float(recipe_variant(r.recipe)[1].get("data.bidirectional_fraction", 0.5)) for r in results
                if recipe_variant(r.recipe)[0] == "continuum" and r.budget == budget}
    finetuned = tuple(t for t in config.downstream if t in DOWNSTREAM)
    prompted = tuple(t for t in config.downstream if t in PROMPTS)
    if len(set(variants.values())) < 2 or not finetuned or not prompted:
        return Point(budget, "not measured", "needs continuum variants of two bidirectional fractions in --recipes "
                                             "and both fine-tuned and prompt-* tasks in --downstream")
    uni, bi = min(variants, key=variants.get), max(variants, key=variants.get)
    # a task one end cannot take (extractive QA refuses a causal reader) is left out of both sides
    finetuned, prompted = (tuple(t for t in ts if all(r.downstream.get(t) is not None for r in results
                                                      if r.recipe in (uni, bi) and r.budget == budget))
                           for ts in (finetuned, prompted))
    if not finetuned or not prompted:
        return Point(budget, "not measured", "both variants need scores on a fine-tuned and a prompted task")
    sides = []
    for name, ts, first, second in (("fine-tuned", finetuned, bi, uni), ("prompted", prompted, uni, bi)):
        judged, notes, a, b = _gated_means(results, config, budget, first, second, ts)
        if not judged:
            return Point(budget, BELOW_FLOOR, f"{name}: no task where both variants beat random weights: "
                                              f"{'; '.join(notes) or 'none scored'} ({budget:.3g} FLOPs each)")
        if a is None or b is None:
            return Point(budget, "not measured", f"a variant's {name} scores are missing")
        sides.append((name, judged, a, b, *judge(a, b)))
    verdicts = {side[4] for side in sides}
    verdict = ("reproduces" if verdicts == {"reproduces"} else "does not reproduce" if "does not reproduce" in verdicts
               else INCONCLUSIVE)
    (_, ft_tasks, ft_bi, ft_uni, _, ft_numbers), (_, pr_tasks, pr_uni, pr_bi, _, pr_numbers) = sides
    return Point(budget, verdict,
                 f"bidirectional fraction {variants[bi]:g} vs {variants[uni]:g}: fine-tuned {ft_bi} vs {ft_uni} "
                 f"({', '.join(ft_tasks)}; {ft_numbers}), prompted {pr_bi} vs {pr_uni} ({', '.join(pr_tasks)}; "
                 f"unidirectional minus bidirectional: {pr_numbers}); {budget:.3g} FLOPs each")


def _bidirectionality(results: list[RunResult], config: ArenaConfig) -> Claim:
    return _over_budgets(config, "Fine-tuning favours bidirectional context, prompting favours unidirectional",
                         "Artetxe et al. 2022, On the Role of Bidirectionality in Language Modeling at Scale, sec. 5",
                         lambda b: _bidirectionality_at(results, config, b))
