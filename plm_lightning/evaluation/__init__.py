"""Evaluation without fine-tuning: minimal-pair acceptability (BLiMP-style) by (pseudo-)log-likelihood, and zero/few-shot
prompting (candidate log-likelihoods, generation with exact match and ROUGE-L)."""

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

__all__ = ["AcceptabilityReport", "MinimalPair", "PromptExample", "PromptScorer", "build_prompt", "demonstrations",
           "evaluate_pairs", "evaluate_prompts", "load_prompt_task", "pseudo_log_likelihood", "read_pairs",
           "sentence_log_likelihood", "template_pairs"]
