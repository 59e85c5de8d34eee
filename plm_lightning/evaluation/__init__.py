"""Evaluation without fine-tuning: minimal-pair acceptability (BLiMP-style) by (pseudo-)log-likelihood, and zero/few-shot
prompting (candidate log-likelihoods, generation with exact match and ROUGE-L).

Every name is imported on first use (``plm_lightning.lazy``): the commands (``evaluation.commands``) load without
PyTorch, so ``--help`` stays instant."""

# ruff: noqa: F401 - the TYPE_CHECKING imports are re-exports for type checkers
from __future__ import annotations

from typing import TYPE_CHECKING

from plm_lightning.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "plm_lightning.evaluation.minimal_pairs": ("AcceptabilityReport", "MinimalPair", "evaluate_pairs",
        "pseudo_log_likelihood", "read_pairs", "sentence_log_likelihood", "template_pairs",),
    "plm_lightning.evaluation.prompting": ("PromptExample", "PromptScorer", "build_prompt", "demonstrations",
        "evaluate_prompts", "load_prompt_task",),
})

if TYPE_CHECKING:  # what a type checker and an IDE see: the same names, imported eagerly
    from plm_lightning.evaluation.minimal_pairs import (
        AcceptabilityReport,
        MinimalPair,
        evaluate_pairs,
        pseudo_log_likelihood,
        read_pairs,
        sentence_log_likelihood,
        template_pairs,
    )
    from plm_lightning.evaluation.prompting import (
        PromptExample,
        PromptScorer,
        build_prompt,
        demonstrations,
        evaluate_prompts,
        load_prompt_task,
    )
