"""Corruption schemes: pure functions of (token ids, a seeded numpy Generator, a config). The first of the three
parts of every objective."""

from plm_lightning.data.corruption.counter_rng import row_keys, uniforms
from plm_lightning.data.corruption.token_mask import (
    IGNORE_INDEX,
    MaskingConfig,
    mask_tokens,
    masking_budget,
    masking_budgets,
    replace_selected,
)

__all__ = ["IGNORE_INDEX", "MaskingConfig", "mask_tokens", "masking_budget", "masking_budgets", "replace_selected",
           "row_keys", "uniforms"]
