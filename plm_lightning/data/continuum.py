"""The bidirectionality continuum (Artetxe et al. 2022, "On the Role of Bidirectionality in Language Model
Pre-Training"): one objective whose knobs move it from causal LM through prefix LM to masked LM, so a sweep or the
arena can place models between the two and compare fine-tuning with prompting.

Per row of ``n`` real tokens:

- ``bidirectional_fraction`` f: the first ``round(f n)`` positions attend to each other (a prefix LM's prefix),
  the rest causally (``prefix_lengths``; f = 0 is a causal LM's mask, f = 1 an encoder's);
- ``predict_fraction`` p: ``round(p n)`` tokens carry loss (exactly, as BERT's masking budget);
- ``prediction``: ``next_token`` predicts ``x_{i+1}`` at position i, only where i cannot see it (i >= prefix - 1,
  inside the causal part); ``masked`` replaces the predicted tokens (80/10/10, BERT) and predicts each at its own
  position.

End points: (f = 0, p = 1, next_token) is exactly the causal LM's batch (:class:`~plm_lightning.data.collators.
CausalLMCollator`); (f = 1, p = 0.15, masked) is exactly the masked LM's (:class:`~plm_lightning.data.collators.
MaskedLMCollator` with the same seed); (f = 0.5, p = 0.5, next_token) is a prefix LM that predicts its suffix.
Every choice is a function of (seed, epoch, sample index), as for the other corruptions.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch

from plm_lightning.data.collators import sample_extras, sample_keys, stack_samples
from plm_lightning.data.corruption import IGNORE_INDEX, MaskingConfig, mask_tokens
from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.data.corruption.token_mask import masking_budgets
from plm_lightning.data.datamodule import CausalLMDataModule
from plm_lightning.errors import ConfigError

Prediction = Literal["next_token", "masked"]


class ContinuumCollator:
    """Rows -> ``input_ids`` (masked where ``prediction="masked"``), ``labels`` at the predicting positions and
    ``prefix_lengths`` (the bidirectional prefix of each row)."""

    objective = "continuum"

    def __init__(self, special_ids: np.ndarray, mask_token_id: int, vocab_size: int, bidirectional_fraction: float,
                 predict_fraction: float, prediction: Prediction, mask_replace_prob: float = 0.8,
                 random_replace_prob: float = 0.1, seed: int = 0, document_mask: bool = False) -> None:
        check_continuum(bidirectional_fraction, predict_fraction, prediction)
        self.special_ids, self.mask_token_id = special_ids, mask_token_id
        self.random_token_ids = np.setdiff1d(np.arange(vocab_size), special_ids)
        self.bidirectional_fraction, self.predict_fraction = bidirectional_fraction, predict_fraction
        self.prediction, self.seed, self.document_mask = prediction, seed, document_mask
        self.masking = (MaskingConfig(predict_fraction, mask_replace_prob, random_replace_prob)
                        if prediction == "masked" else None)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        stacked = stack_samples(samples)
        ids, real = stacked["input_ids"], stacked["attention_mask"]
        lengths = real.sum(1)
        prefix = np.round(self.bidirectional_fraction * lengths).astype(np.int64)
        keys = sample_keys(self.seed, samples)
        if self.prediction == "masked":
            maskable = real & ~np.isin(ids, self.special_ids)
            corrupted, labels = mask_tokens(ids, maskable, keys, self.masking, self.mask_token_id,
                                            self.random_token_ids)
        else:
            corrupted, labels = ids, next_token_labels(ids, lengths, prefix, self.predict_fraction, keys)
        return {"input_ids": torch.from_numpy(corrupted), "labels": torch.from_numpy(labels),
                "prefix_lengths": torch.from_numpy(prefix), **sample_extras(samples, stacked, self.document_mask)}


def next_token_labels(ids: np.ndarray, lengths: np.ndarray, prefix: np.ndarray, predict_fraction: float,
                      keys: np.ndarray) -> np.ndarray:
    """``labels[i] = ids[i + 1]`` at ``round(predict_fraction * n)`` positions (all of them when there are fewer)
    among those that do not see their target: ``prefix - 1 <= i <= n - 2`` (chosen by the smallest counter-based
    uniforms, so a row's choice depends only on its key)."""
    positions = np.arange(ids.shape[1])[None, :]
    candidate = (positions >= np.maximum(prefix - 1, 0)[:, None]) & (positions <= (lengths - 2)[:, None])
    scores = np.where(candidate, uniforms(np.asarray(keys, dtype=np.uint64), ids.shape[1], stream=0), np.inf)
    ranks = np.empty(ids.shape, dtype=np.int64)
    np.put_along_axis(ranks, np.argsort(scores, axis=1, kind="stable"), positions.repeat(len(ids), 0), axis=1)
    selected = candidate & (ranks < masking_budgets(lengths, predict_fraction)[:, None])
    labels = np.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = np.where(selected[:, :-1], ids[:, 1:], IGNORE_INDEX)
    return labels


def check_continuum(bidirectional_fraction: float, predict_fraction: float, prediction: str) -> None:
    if prediction not in ("next_token", "masked"):
        raise ConfigError(f"data.prediction={prediction!r} is not one of next_token, masked")
    if not 0.0 <= bidirectional_fraction <= 1.0:
        raise ConfigError(f"data.bidirectional_fraction={bidirectional_fraction} must lie in [0, 1]")
    if not 0.0 < predict_fraction <= 1.0:
        raise ConfigError(f"data.predict_fraction={predict_fraction} must lie in (0, 1]")
    if prediction == "masked" and predict_fraction >= 1.0:
        raise ConfigError("data.prediction=masked with data.predict_fraction=1 masks every token, leaving no context; "
                          "give a fraction below 1")
    if prediction == "next_token" and bidirectional_fraction >= 1.0:
        raise ConfigError("data.prediction=next_token with data.bidirectional_fraction=1: every position sees the "
                          "next token, so nothing can be predicted; lower the fraction or use prediction=masked")


class ContinuumDataModule(CausalLMDataModule):
    """Data of the bidirectionality continuum for a decoder (``CausalLM``, which reads ``prefix_lengths``)."""

    required_special_tokens = ("eos", "mask")

    def __init__(self, *args: Any, bidirectional_fraction: float = 0.5, predict_fraction: float = 0.5,
                 prediction: Prediction = "next_token", mask_replace_prob: float = 0.8,
                 random_replace_prob: float = 0.1, tokenizer: str = "bpe", **kwargs: Any) -> None:
        """
        Args:
            bidirectional_fraction: Fraction of each row (from its start) attended bidirectionally; 0 = causal LM,
                1 = masked LM's encoder.
            predict_fraction: Fraction of each row's tokens that carry loss.
            prediction: ``next_token`` (predict x_{i+1} at i, in the causal part only) or ``masked`` (replace the
                predicted tokens, 80/10/10, and predict each at its own position).
            mask_replace_prob: ``masked``: of the predicted, the share replaced by the mask token.
            random_replace_prob: ``masked``: the share replaced by a random token.
        """
        check_continuum(bidirectional_fraction, predict_fraction, prediction)
        super().__init__(*args, tokenizer=tokenizer, **kwargs)
        self.bidirectional_fraction, self.predict_fraction = bidirectional_fraction, predict_fraction
        self.prediction = prediction
        self.mask_replace_prob, self.random_replace_prob = mask_replace_prob, random_replace_prob

    def collator(self) -> ContinuumCollator:
        tok = self.tokenizer
        return ContinuumCollator(tok.special_ids(), tok.ids["mask"], tok.vocab_size, self.bidirectional_fraction,
                                 self.predict_fraction, self.prediction, self.mask_replace_prob,
                                 self.random_replace_prob, self.seed, self.document_mask)
