"""The objective arena: recipes compared at one backbone size and one training-FLOPs budget, scored by the same
downstream tasks, with a report of which claims of the literature reproduce."""

from plm_lightning.arena.report import Claim, check_claims, write_report
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

__all__ = ["DEFAULT_RECIPES", "DOWNSTREAM", "PROBES", "PROMPTS", "Arena", "ArenaConfig", "Claim", "RunResult", "check_claims",
           "measure_recipe", "write_report"]
