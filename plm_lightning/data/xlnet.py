"""XLNet data (Yang et al. 2019, sec. 2.2-2.5 and appendix A.1): rows ``A <sep> B <sep> <cls>`` (B the continuation of
A, or a random segment with ``packing: sentence_pairs`` - XLNet's data mixes both and drops NSP), segment ids 0 / 1
/ 2 for A, B and ``<cls>``, and the permutation-LM targets and masks of ``data.corruption.permutation``. The input
is never corrupted: ``labels`` hold each target's own token at its position (-100 elsewhere), ``perm_mask`` the
factorization order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.permutation import factorization_ranks, permutation_mask, sample_span_targets
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError


def xlnet_layout(ids: np.ndarray, b_start: int, cls_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` (our pair packing) -> XLNet's ``A [SEP] B [SEP] <cls>`` and its segment ids."""
    tokens = np.concatenate([ids[1:], [cls_id]])
    types = np.where(np.arange(len(tokens)) < b_start - 1, 0, 1)
    types[-1] = 2
    return tokens, types


class PermutationLMCollator:
    """Pair rows -> ``input_ids``, ``attention_mask``, ``token_type_ids``, ``perm_mask`` ``[B, L, L]`` and
    ``labels``; with ``bidirectional_data`` the last ``B // 2`` rows are reversed (the model reads their relative
    distances negated)."""

    objective = "permutation_lm"

    def __init__(self, seq_len: int, pad_id: int, sep_id: int, cls_id: int, partial_prediction_k: float, perm_size: int,
                 max_gram: int = 5, mask_alpha: int = 6, mask_beta: int = 1, ngram_unit: str = "word",
                 bidirectional_data: bool = False, seed: int = 0) -> None:
        self.seq_len, self.pad_id, self.sep_id, self.cls_id = seq_len, pad_id, sep_id, cls_id
        self.partial_prediction_k, self.perm_size, self.max_gram = partial_prediction_k, perm_size, max_gram
        self.mask_alpha, self.mask_beta, self.ngram_unit = mask_alpha, mask_beta, ngram_unit
        self.bidirectional_data, self.seed = bidirectional_data, seed

    @property
    def num_predict(self) -> int:
        """Targets of a full row (XLNet: 85 of 512)."""
        return self.targets_for(self.seq_len)

    def targets_for(self, length: int) -> int:
        """round(length / K): the last 1/K of the order (a row cut short at a document's end predicts fewer)."""
        return max(1, round(length / self.partial_prediction_k))

    def row(self, sample: dict[str, Any], key: int, reverse: bool) -> tuple[np.ndarray, ...]:
        real = np.asarray(sample["document_ids"]) >= 0
        ids = np.asarray(sample["input_ids"])[real].astype(np.int64)
        tokens, types = xlnet_layout(ids, int(sample["segment_b_start"]), self.cls_id)
        starts = np.concatenate([np.asarray(sample["word_starts"])[real][1:], [True]])
        rng = np.random.default_rng(key)
        functional = (tokens == self.sep_id) | (tokens == self.cls_id)
        targets = np.zeros(len(tokens), dtype=bool)
        goal = self.targets_for(len(tokens))
        budget = [goal // 2, goal - goal // 2]  # half from A, half from B
        for segment, goal in zip((0, 1), budget):
            where = np.flatnonzero((types == segment) & ~functional)
            if len(where):
                targets[where] = sample_span_targets(starts[where], goal, rng, self.max_gram, self.mask_alpha,
                                                     self.mask_beta, self.ngram_unit)
        if reverse:
            tokens, types, targets, functional = tokens[::-1], types[::-1], targets[::-1], functional[::-1]
        pad = self.seq_len - len(tokens)
        tokens, types = np.pad(tokens, (0, pad), constant_values=self.pad_id), np.pad(types, (0, pad))
        targets, functional = np.pad(targets, (0, pad)), np.pad(functional, (0, pad))
        ranks = factorization_ranks(self.seq_len, self.perm_size, rng)
        return tokens, types, targets, permutation_mask(targets, functional, ranks), len(tokens) - pad

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        n = len(samples)
        rows = [self.row(s, int(key), self.bidirectional_data and i >= n - n // 2)
                for i, (s, key) in enumerate(zip(samples, sample_keys(self.seed, samples)))]
        tokens = np.stack([r[0] for r in rows])
        targets = np.stack([r[2] for r in rows])
        lengths = torch.tensor([r[4] for r in rows])
        return {"input_ids": torch.from_numpy(tokens),
                "attention_mask": torch.arange(self.seq_len)[None] < lengths[:, None],
                "token_type_ids": torch.from_numpy(np.stack([r[1] for r in rows]).astype(np.int64)),
                "perm_mask": torch.from_numpy(np.stack([r[3] for r in rows])),
                "labels": torch.from_numpy(np.where(targets, tokens, IGNORE_INDEX))}


class PermutationLMDataModule(TextDataModule):
    """XLNet's pretraining data over segment pairs of ``seq_len`` tokens."""

    document_mask_refusal = ("draws one factorisation order over the whole row; its two-stream masks have no per-"
                            "document form")

    inspection_view = "permutation"

    required_special_tokens = ("pad", "sep", "cls")

    def __init__(self, *args: Any, packing: PackingMode = "continuation_pairs", partial_prediction_k: float = 6.0,
                 perm_size: int | None = None, max_gram: int = 5, mask_alpha: int = 6, mask_beta: int = 1,
                 ngram_unit: Literal["word", "token"] = "word", bidirectional_data: bool = False,
                 **kwargs: Any) -> None:
        """
        Args:
            partial_prediction_k: K of partial prediction: the last 1/K of each factorization order is predicted,
                round(length / K) tokens per row (XLNet: K = 6, 85 of 512).
            perm_size: Length of the chunks the order permutes within (XLNet: seq_len / 2); seq_len must be a
                multiple of it.
            max_gram: Longest target span in words (XLNet: 5), n drawn with P(n) ~ 1/n.
            mask_alpha: Context of ``n * mask_alpha / mask_beta`` tokens around each n-gram span (XLNet: 6 / 1).
            mask_beta: See mask_alpha.
            ngram_unit: word (spans of whole words) or token (the released code's behaviour, see
                ``sample_span_targets``).
            bidirectional_data: XLNet's bi_data: the last half of every batch reversed; the model needs
                ``backbone_overrides.bidirectional_data: true`` too.
        """
        super().__init__(*args, packing=packing, **kwargs)
        if self.packing not in ("continuation_pairs", "sentence_pairs"):
            raise ConfigError(f"data.packing={self.packing}: XLNet reads segment pairs (continuation_pairs or "
                              "sentence_pairs)")
        if partial_prediction_k <= 1:
            raise ConfigError(f"data.partial_prediction_k={partial_prediction_k} must be > 1 (XLNet: 6)")
        self.perm_size = perm_size if perm_size is not None else self.seq_len // 2
        if self.perm_size < 1 or self.seq_len % self.perm_size:
            raise ConfigError(f"data.seq_len={self.seq_len} must be a multiple of data.perm_size={self.perm_size} "
                              "(XLNet permutes within chunks of perm_size, by default seq_len / 2: use an even seq_len)")
        if max_gram < 1 or mask_alpha < 1 or mask_beta < 1:
            raise ConfigError("data.max_gram, data.mask_alpha and data.mask_beta must be positive (XLNet: 5, 6, 1)")
        if ngram_unit not in ("word", "token"):
            raise ConfigError(f"data.ngram_unit={ngram_unit!r} is not one of word, token")
        self.partial_prediction_k, self.max_gram, self.mask_alpha, self.mask_beta = (partial_prediction_k, max_gram,
                                                                                    mask_alpha, mask_beta)
        self.ngram_unit, self.bidirectional_data = ngram_unit, bidirectional_data

    def contract(self) -> DataContract:
        return replace(super().contract(), bidirectional_data=self.bidirectional_data)

    def collator(self) -> PermutationLMCollator:
        tok = self.tokenizer
        return PermutationLMCollator(self.seq_len, tok.ids["pad"], tok.ids["sep"], tok.ids["cls"], self.partial_prediction_k,
                                     self.perm_size, self.max_gram, self.mask_alpha, self.mask_beta, self.ngram_unit,
                                     self.bidirectional_data, self.seed)
