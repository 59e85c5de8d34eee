"""Evaluation without fine-tuning: minimal-pair acceptability (BLiMP-style) by (pseudo-)log-likelihood."""

from plm_lightning.evaluation.minimal_pairs import (
    AcceptabilityReport,
    MinimalPair,
    evaluate_pairs,
    pseudo_log_likelihood,
    read_pairs,
    sentence_log_likelihood,
    template_pairs,
)

__all__ = ["AcceptabilityReport", "MinimalPair", "evaluate_pairs", "pseudo_log_likelihood", "read_pairs",
           "sentence_log_likelihood", "template_pairs"]
