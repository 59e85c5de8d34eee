"""The objective arena: recipes compared at one backbone size and several training-FLOPs budgets, scored by the same
downstream tasks, each claim of the literature judged only where its models beat random weights, the runs sent out
as jobs of an executor (submitit: local processes or SLURM)."""

from plm_lightning.arena.claims import Claim, check_claims
from plm_lightning.arena.executor import EXECUTORS, ExecutorSettings
from plm_lightning.arena.report import read_results, write_report
from plm_lightning.arena.runner import (
    DEFAULT_RECIPES,
    DOWNSTREAM,
    PROBES,
    PROMPTS,
    Arena,
    ArenaConfig,
    RunResult,
    measure_recipe,
)
from plm_lightning.arena.signal import Estimate, Signal, judge

__all__ = ["DEFAULT_RECIPES", "DOWNSTREAM", "EXECUTORS", "PROBES", "PROMPTS", "Arena", "ArenaConfig", "Claim",
           "Estimate", "ExecutorSettings", "RunResult", "Signal", "check_claims", "judge", "measure_recipe",
           "read_results", "write_report"]
