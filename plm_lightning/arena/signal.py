"""Whether an arena's score carries signal: means over seeds with their standard errors (``Estimate``), the
two-standard-error rule (``judge``), and the sanity gate every claim passes first (``Signal``): a recipe's pretrained
score on a task beats random weights of its family on that task by more than two standard errors, and the task
separates the runs at all (not every run at the same floor).

A claim is judged only on tasks where every recipe it compares passes the gate at that budget; elsewhere it is
*not judged: below the floor*, with the numbers, never "does not reproduce". The random-initialisation baseline of a
recipe is its own (``--random-init RECIPE``) or, where it has none, that of a ``--random-init`` recipe of its family
(encoder, decoder, encoder-decoder: the same backbone size and scoring); random weights do not depend on the
budget, so a baseline measured at any budget serves every budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from plm_lightning.arena.applicability import family_of
from plm_lightning.arena.config import RunResult

INCONCLUSIVE = "inconclusive at this scale"
BELOW_FLOOR = "not judged: below the floor"


@dataclass(frozen=True)
class Estimate:
    """A score over seeds: mean, sample standard deviation (None for one seed) and the number of seeds."""

    mean: float
    std: float | None
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Estimate | None:
        values = list(values)
        if not values:
            return None
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))

    @property
    def sem(self) -> float | None:
        return None if self.std is None else self.std / math.sqrt(self.n)

    def __str__(self) -> str:
        return f"{self.mean:.4f}" + (f" ± {self.std:.4f}" if self.std is not None else "") + f" (n={self.n})"


def two_standard_errors(a: Estimate, b: Estimate) -> float | None:
    """``2 sqrt(s_a^2 / n_a + s_b^2 / n_b)``, Welch's standard error of a difference doubled (about a 95% interval);
    None when a side has one seed."""
    if a.sem is None or b.sem is None:
        return None
    return 2 * math.sqrt(a.sem ** 2 + b.sem ** 2)


def judge(a: Estimate, b: Estimate, margin: float = 0.0) -> tuple[str, str]:
    """The verdict on "``a`` is above ``b`` (above ``b - margin`` for a "does not hurt" claim)", and its numbers."""
    difference = a.mean - b.mean
    bound = two_standard_errors(a, b)
    if bound is None:
        return INCONCLUSIVE, f"difference {difference:+.4f}; one seed has no error bar (run with --seeds 3)"
    if bound == 0:  # every seed of both scored alike: a floor or ceiling (a majority-class score), not a measurement
        return INCONCLUSIVE, (f"difference {difference:+.4f}; every seed of each scored the same, a floor or "
                              "ceiling of the task with no error bar to judge by")
    numbers = f"difference {difference:+.4f}, two standard errors {bound:.4f}"
    if difference + margin > bound:
        return "reproduces", numbers
    if difference + margin < -bound:
        return "does not reproduce", numbers
    return INCONCLUSIVE, numbers


def runs_of(results: list[RunResult], recipe: str, budget: float) -> list[RunResult]:
    return [r for r in results if r.recipe == recipe and r.budget == budget]


def per_seed(runs: list[RunResult], score: Callable[[RunResult], float | None]) -> Estimate | None:
    return Estimate.of(v for v in (score(r) for r in runs) if v is not None)


def task_mean(tasks: tuple[str, ...]) -> Callable[[RunResult], float | None]:
    """A run's mean over ``tasks`` of its downstream scores; None unless all are there."""
    def score(run: RunResult) -> float | None:
        values = [run.downstream.get(t) for t in tasks]
        return None if not tasks or any(v is None for v in values) else statistics.fmean(values)
    return score


def estimate(results: list[RunResult], recipe: str, budget: float, tasks: tuple[str, ...]) -> Estimate | None:
    """``recipe``'s mean score over ``tasks`` at ``budget``, over its seeds."""
    return per_seed(runs_of(results, recipe, budget), task_mean(tasks))


def random_estimate(results: list[RunResult], recipe: str, task: str) -> Estimate | None:
    """``recipe``'s score on ``task`` from random weights, one value per seed (from whichever budget measured it:
    random weights are the same at every budget)."""
    by_seed: dict[int, float] = {}
    for run in sorted((r for r in results if r.recipe == recipe), key=lambda r: r.budget):
        value = run.random_init.get(task)
        if value is not None:
            by_seed.setdefault(run.seed, value)
    return Estimate.of(by_seed.values())


def family(results: list[RunResult], recipe: str) -> str | None:
    objective = next((r.objective for r in results if r.recipe == recipe and r.objective), None)
    return None if objective is None else family_of(objective)


def baseline_recipe(results: list[RunResult], random_init: tuple[str, ...], recipe: str, task: str) -> str | None:
    """The recipe whose random-initialisation scores on ``task`` are ``recipe``'s baseline: its own, else the first
    ``random_init`` recipe of its family that has them."""
    own = family(results, recipe)
    for candidate in (recipe, *random_init):
        if (candidate == recipe or family(results, candidate) == own) \
                and random_estimate(results, candidate, task) is not None:
            return candidate
    return None


@dataclass(frozen=True)
class Signal:
    """``recipe``'s pretrained score on ``task`` at ``budget`` against random weights (``baseline``'s)."""

    recipe: str
    task: str
    budget: float
    baseline: str | None
    pretrained: Estimate | None
    random: Estimate | None

    @property
    def difference(self) -> float | None:
        return None if self.pretrained is None or self.random is None else self.pretrained.mean - self.random.mean

    @property
    def bound(self) -> float | None:
        return None if self.pretrained is None or self.random is None else \
            two_standard_errors(self.pretrained, self.random)

    @property
    def passed(self) -> bool:
        """Above random weights by more than two standard errors (a zero error bar is no evidence)."""
        return self.difference is not None and self.bound is not None and self.bound > 0 and \
            self.difference > self.bound

    def short(self) -> str:
        """``+0.0123 ± 0.0045`` (pretrained minus random, two standard errors), or why there is no number."""
        if self.pretrained is None:
            return "not scored"
        if self.random is None:
            return "no random-init baseline"
        bound = "one seed" if self.bound is None else f"{self.bound:.4f}"
        return f"{self.difference:+.4f} ± {bound}"

    def __str__(self) -> str:
        if self.pretrained is None or self.random is None:
            return f"{self.recipe}: {self.short()}"
        source = "" if self.baseline == self.recipe else f" ({self.baseline}'s)"
        return f"{self.recipe} {self.pretrained.mean:.4f} vs random weights{source} {self.random.mean:.4f}: " \
               f"{self.short()}"


def signal(results: list[RunResult], random_init: tuple[str, ...], recipe: str, task: str, budget: float) -> Signal:
    baseline = baseline_recipe(results, random_init, recipe, task)
    return Signal(recipe, task, budget, baseline,
                  per_seed(runs_of(results, recipe, budget), lambda r: r.downstream.get(task)),
                  None if baseline is None else random_estimate(results, baseline, task))


def uninformative(results: list[RunResult], task: str, budget: float) -> float | None:
    """The one score every run at ``budget`` (pretrained and from random weights) has on ``task``, when there is only
    one: a task at its floor (the majority class) tells no run from another. None when the scores differ."""
    values = {round(v, 6) for r in results if r.budget == budget
              for v in (r.downstream.get(task), r.random_init.get(task)) if v is not None}
    return next(iter(values)) if len(values) == 1 and sum(
        1 for r in results if r.budget == budget and r.downstream.get(task) is not None) > 1 else None


def gated_tasks(results: list[RunResult], random_init: tuple[str, ...], recipes: tuple[str, ...],
                tasks: tuple[str, ...], budget: float) -> tuple[tuple[str, ...], list[str]]:
    """The tasks of ``tasks`` a claim on ``recipes`` may be judged on at ``budget`` (every recipe beats random
    weights beyond two standard errors, and the task is informative), and one line for each task left out."""
    kept, notes = [], []
    for task in tasks:
        floor = uninformative(results, task, budget)
        if floor is not None:
            notes.append(f"{task} uninformative (every run scored {floor:.4f})")
            continue
        signals = [signal(results, random_init, recipe, task, budget) for recipe in recipes]
        if all(s.passed for s in signals):
            kept.append(task)
        else:
            notes.append(f"{task} below the floor ({'; '.join(str(s) for s in signals)})")
    return tuple(kept), notes
