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
from plm_lightning.data.corruption.whole_word import mask_whole_words, select_whole_words, word_ids

__all__ = ["IGNORE_INDEX", "MaskingConfig", "mask_tokens", "masking_budget", "masking_budgets", "replace_selected",
           "mask_whole_words", "row_keys", "select_whole_words", "uniforms", "word_ids"]
