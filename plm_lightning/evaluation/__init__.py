"""Evaluation without fine-tuning: minimal-pair acceptability (BLiMP-style) by (pseudo-)log-likelihood, and zero/few-shot
prompting (candidate log-likelihoods, generation with exact match and ROUGE-L).

Every name is imported on first use (``plm_lightning.lazy``): the commands (``evaluation.commands``) load without
PyTorch, so ``--help`` stays instant."""

from __future__ import annotations

from plm_lightning.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "plm_lightning.evaluation.minimal_pairs": ("AcceptabilityReport", "MinimalPair", "evaluate_pairs",
        "pseudo_log_likelihood", "read_pairs", "sentence_log_likelihood", "template_pairs",),
    "plm_lightning.evaluation.prompting": ("PromptExample", "PromptScorer", "build_prompt", "demonstrations",
        "evaluate_prompts", "load_prompt_task",),
})
