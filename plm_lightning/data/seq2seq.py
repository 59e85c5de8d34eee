"""Encoder-decoder data: T5 span corruption (Raffel et al. 2020, sec. 3.1.4; the objective of T5, T5.1.1, mT5).

Documents are joined with no separator, as T5's ``reduce_concat_tokens`` does (``data.packing=concatenated``), and
cut into raw rows of the length whose corruption is exactly ``seq_len`` encoder tokens (568 raw tokens for T5's 512;
:func:`raw_length_for`), each row corrupted when it is batched (dynamic, seeded by (seed, epoch, row)); EOS closes
the corrupted input and the target only, so the decoder never learns to end inside a target.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.t5_span import (
    random_spans_noise_mask,
    raw_length_for,
    raw_length_for_concatenated,
    span_corrupt,
)
from plm_lightning.data.corruption.ul2 import UL2_DENOISERS, denoise, mixture_weights
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.data.multilingual import MultiCorpusMixin
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError


def shift_right(targets: np.ndarray, start_id: int, pad_id: int | None = None) -> np.ndarray:
    """Teacher-forcing decoder input: ``[start, t_0, ..., t_{m-2}]``. With ``pad_id``, ``targets`` are rows padded
    with ``IGNORE_INDEX`` and the input is ``pad_id`` wherever the target is padding (so a row's decoder input does
    not depend on how far its batch pads it: without, the last target would follow into the first padded place)."""
    padding = targets == IGNORE_INDEX
    source = targets if pad_id is None else np.where(padding, pad_id, targets)
    out = np.full_like(targets, start_id)
    out[:, 1:] = source[:, :-1]
    if pad_id is not None:
        out[padding] = pad_id
    return out


def concatenate_for_decoder(pairs: list[tuple[np.ndarray, np.ndarray]], pad_id: int) -> dict[str, torch.Tensor]:
    """Decoder-only (prefix LM) rows: ``input ++ target``, the next-token labels on the target only, and
    ``prefix_lengths`` = the input's length (bidirectional over it, causal after: ``nn.masks.prefix_lm_mask``)."""
    n = max(len(i) + len(t) for i, t in pairs)
    ids = np.full((len(pairs), n), pad_id, dtype=np.int64)
    labels = np.full((len(pairs), n), IGNORE_INDEX, dtype=np.int64)
    real = np.zeros((len(pairs), n), dtype=bool)
    for row, (i, t) in enumerate(pairs):
        ids[row, : len(i) + len(t)] = np.concatenate([i, t])
        labels[row, len(i) - 1: len(i) - 1 + len(t)] = t  # position p - 1 + k predicts the k-th target token
        real[row, : len(i) + len(t)] = True
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(real),
            "labels": torch.from_numpy(labels), "prefix_lengths": torch.tensor([len(i) for i, _ in pairs])}


class SpanCorruptionCollator:
    """Raw rows -> (encoder ``input_ids``, ``labels`` = targets, ``decoder_input_ids`` = targets shifted right from
    ``decoder_start_id``), padded to the batch's longest with ``pad_id`` (labels with -100); with ``decoder_only``
    the (input, target) pairs as prefix-LM rows instead (:func:`concatenate_for_decoder`)."""

    objective = "span_corruption"

    def __init__(self, sentinels: np.ndarray, eos_id: int, pad_id: int, noise_density: float = 0.15,
                 mean_noise_span_length: float = 3.0, seed: int = 0, decoder_start_id: int | None = None,
                 decoder_only: bool = False) -> None:
        self.sentinels, self.eos_id, self.pad_id = sentinels, eos_id, pad_id
        self.noise_density, self.mean_noise_span_length, self.seed = noise_density, mean_noise_span_length, seed
        self.decoder_start_id = pad_id if decoder_start_id is None else decoder_start_id
        self.decoder_only = decoder_only

    def describe(self, batch: dict[str, torch.Tensor]) -> str:
        """The corruption of the batch's first row, in words (``inspect``)."""
        return f"noise_density={self.noise_density}, mean_noise_span_length={self.mean_noise_span_length}"

    def corrupt(self, tokens: np.ndarray, key: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, target) of one row of real tokens."""
        rng = np.random.default_rng(int(key))
        noise = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_noise_span_length, rng)
        return span_corrupt(tokens, noise, self.sentinels, self.eos_id)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        keys = sample_keys(self.seed, samples)
        pairs = [self.corrupt(np.asarray(s["input_ids"])[np.asarray(s["document_ids"]) >= 0].astype(np.int64), k)
                 for s, k in zip(samples, keys)]
        if self.decoder_only:
            return concatenate_for_decoder(pairs, self.pad_id)
        n, m = max(len(i) for i, _ in pairs), max(len(t) for _, t in pairs)
        inputs = np.full((len(pairs), n), self.pad_id, dtype=np.int64)
        targets = np.full((len(pairs), m), IGNORE_INDEX, dtype=np.int64)
        for row, (i, t) in enumerate(pairs):
            inputs[row, : len(i)], targets[row, : len(t)] = i, t
        decoder_inputs = shift_right(targets, self.decoder_start_id, self.pad_id)
        out = {"input_ids": torch.from_numpy(inputs), "attention_mask": torch.from_numpy(inputs != self.pad_id),
               "labels": torch.from_numpy(targets), "decoder_input_ids": torch.from_numpy(decoder_inputs),
               "decoder_attention_mask": torch.from_numpy(targets != IGNORE_INDEX)}
        if "stream" in samples[0]:  # multilingual data: each row's language, for per-language losses and inspect
            out["stream"] = torch.tensor([s["stream"] for s in samples])
        return out


class UL2Collator(SpanCorruptionCollator):
    """UL2's Mixture-of-Denoisers: each row draws one of :data:`UL2_DENOISERS` (seeded by (seed, epoch, row)) and is
    corrupted by it, its mode token first; the batch carries ``denoiser`` (an index into the mixture)."""

    objective = "mixture_of_denoisers"

    def __init__(self, sentinels: np.ndarray, eos_id: int, pad_id: int, mode_ids: dict[str, int],
                 weights: np.ndarray, seed: int = 0, decoder_only: bool = False) -> None:
        super().__init__(sentinels, eos_id, pad_id, seed=seed, decoder_only=decoder_only)
        self.mode_ids, self.weights = mode_ids, weights

    def describe(self, batch: dict[str, torch.Tensor]) -> str:
        return f"denoiser {UL2_DENOISERS[int(batch['denoiser'][0])].name} of the mixture"

    def choose(self, key: int) -> int:
        return int(np.random.default_rng([int(key), 7]).choice(len(self.weights), p=self.weights))

    def corrupt(self, tokens: np.ndarray, key: int) -> tuple[np.ndarray, np.ndarray]:
        denoiser = UL2_DENOISERS[self.choose(key)]
        return denoise(tokens, denoiser, np.random.default_rng(int(key)), self.sentinels, self.eos_id,
                       self.mode_ids[denoiser.mode])

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out = super().__call__(samples)
        out["denoiser"] = torch.tensor([self.choose(k) for k in sample_keys(self.seed, samples)])
        return out


class SpanCorruptionDataModule(TextDataModule):
    """T5's pretraining data: contiguous raw rows, span corruption with sentinels, targets for the decoder."""

    document_mask_refusal = ("corrupts spans over the whole packed row and its encoder, decoder and cross-attention have"
                            " no per-document mask (T5 packs C4 this way)")

    inspection_view = "seq2seq"

    required_special_tokens = ("pad", "eos")
    decoder_start_token = "pad"
    """The role of the token the decoder starts from (T5: pad); the model checks it matches its own."""

    def __init__(self, *args: Any, tokenizer: str = "unigram", packing: PackingMode = "concatenated",
                 noise_density: float = 0.15, mean_noise_span_length: float = 3.0, decoder_only: bool = False,
                 **kwargs: Any) -> None:
        """
        Args:
            noise_density: Fraction of raw tokens hidden in noise spans (T5: 0.15).
            mean_noise_span_length: Mean span length in tokens (T5: 3).
            decoder_only: Rows for a decoder-only prefix LM (input ++ target in seq_len tokens, bidirectional over
                the input; model: CausalLM) instead of an encoder-decoder (T5 sec. 3.2's "prefix LM").
        """
        super().__init__(*args, tokenizer=tokenizer, packing=packing, **kwargs)
        if not 0.0 < noise_density < 1.0:
            raise ConfigError(f"data.noise_density={noise_density} must lie in (0, 1) (T5: 0.15)")
        if mean_noise_span_length < 1.0:
            raise ConfigError(f"data.mean_noise_span_length={mean_noise_span_length} must be >= 1 (T5: 3)")
        if self.packing not in ("concatenated", "contiguous"):
            raise ConfigError(f"data.packing={self.packing}: span corruption reads raw rows of concatenated documents "
                              "(concatenated: T5's, no separator; contiguous: EOS between documents)")
        self.noise_density, self.mean_noise_span_length = noise_density, mean_noise_span_length
        self.decoder_only = decoder_only
        self.raw_length, self.target_length = raw_length_for(self.seq_len, noise_density, mean_noise_span_length)
        if decoder_only:
            self.raw_length = raw_length_for_concatenated(self.seq_len, noise_density, mean_noise_span_length)

    def packed_length(self) -> int:
        return self.raw_length

    def sentinels(self) -> np.ndarray:
        """The tokenizer's ``<extra_id_N>`` ids, or a one-line error when it has none."""
        tok = self.tokenizer
        sentinels = tok.sentinel_ids()
        if len(sentinels) == 0:
            raise ConfigError(f"data.tokenizer '{tok.name}' has no sentinel tokens (<extra_id_0>, <extra_id_1>, ...); "
                              "span corruption needs them: use data.tokenizer=unigram or a T5 tokenizer")
        return sentinels

    def contract(self) -> DataContract:
        return replace(super().contract(), decoder_only=self.decoder_only)

    def collator(self) -> SpanCorruptionCollator:
        tok = self.tokenizer
        return SpanCorruptionCollator(self.sentinels(), tok.ids["eos"], tok.ids["pad"], self.noise_density,
                                      self.mean_noise_span_length, self.seed, decoder_only=self.decoder_only)


class MultilingualSpanCorruptionDataModule(MultiCorpusMixin, SpanCorruptionDataModule):
    """mT5 (Xue et al. 2021, sec. 2): T5 span corruption over one corpus per language, a Unigram vocabulary trained
    on all of them, and languages sampled with q_i ~ p_i^alpha, alpha = 0.3."""

    def __init__(self, *args: Any, corpora: dict[str, str] | None = None, language_alpha: float = 0.3,
                 **kwargs: Any) -> None:
        """
        Args:
            corpora: Language code -> source (as data.source; fake:<source> is that source in Fake-English).
            language_alpha: Sampling exponent (mT5: 0.3, which the paper found to balance high- and low-resource
                languages).
        """
        super().__init__(*args, **kwargs)
        self._init_corpora(corpora, language_alpha)


class UL2DataModule(SpanCorruptionDataModule):
    """UL2 (Tay et al. 2023): the seven denoisers of the paper mixed by ``denoiser_weights``, on raw rows as long
    as makes an R(3, 0.15) input (mode token included) exactly ``seq_len``; longer-span or higher-rate denoisers give
    shorter inputs and longer targets, padded per batch."""

    required_special_tokens = ("pad", "eos", "mode_r", "mode_s", "mode_x")  # [R] [S] [X]: data.tokenizer=unigram

    def __init__(self, *args: Any, denoiser_weights: list[float] | None = None, **kwargs: Any) -> None:
        """
        Args:
            denoiser_weights: One weight per denoiser, in the order R(3, 0.15), R(8, 0.15), S(0.25), X(3, 0.5),
                X(8, 0.5), X(64, 0.15), X(64, 0.5); default uniform.
        """
        super().__init__(*args, **kwargs)
        self.denoiser_weights = mixture_weights(denoiser_weights)
        self.raw_length, self.target_length = raw_length_for(self.seq_len - 1, 0.15, 3.0)
        if self.decoder_only:  # every denoiser in use must fit: the rate-0.5 ones make the longest rows
            self.raw_length = min(self.seq_len - 3 if d.mode == "S" else
                                  raw_length_for_concatenated(self.seq_len - 1, d.rate, d.mean_span)
                                  for d, w in zip(UL2_DENOISERS, self.denoiser_weights) if w > 0)

    def collator(self) -> UL2Collator:
        tok = self.tokenizer
        modes = {"R": tok.ids["mode_r"], "S": tok.ids["mode_s"], "X": tok.ids["mode_x"]}
        return UL2Collator(self.sentinels(), tok.ids["eos"], tok.ids["pad"], modes, self.denoiser_weights, self.seed,
                           self.decoder_only)

    def inspection_notes(self) -> list[InspectionNotes]:
        return [*super().inspection_notes(), DenoiserNotes(self.collator())]


def input_rows(batch: dict[str, Any]) -> list[np.ndarray]:
    """Each row's (encoder or prefix) input tokens: the real tokens, or the first ``prefix_lengths`` of a
    decoder-only row."""
    ids, real = batch["input_ids"].numpy(), batch["attention_mask"].numpy().astype(bool)
    if "prefix_lengths" in batch:
        return [ids[i, :p] for i, p in enumerate(batch["prefix_lengths"].tolist())]
    return [ids[i][real[i]] for i in range(len(ids))]


class DenoiserNotes(InspectionNotes):
    """UL2 in ``inspect``: per denoiser (Tay et al. 2023, Table 1), its share of the rows, the original tokens it
    predicts, its mean span length and its input and target lengths."""

    def __init__(self, collate: UL2Collator) -> None:
        self.collate = collate
        self.markers = sorted(set(collate.sentinels.tolist()) | {collate.eos_id})
        self.per_denoiser: dict[int, list[int]] = {}  # [rows, original, noise, spans, input, target tokens]

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        labels, rows = batch["labels"].numpy(), input_rows(batch)
        for row, d in enumerate(batch["denoiser"].tolist()):
            carried = labels[row][labels[row] != IGNORE_INDEX]
            real = rows[row]
            noise = int((~np.isin(carried, self.markers)).sum())
            spans = int(np.isin(real, self.collate.sentinels).sum()) or 1  # S: the suffix is one span
            stats = [1, int((np.asarray(samples[row]["document_ids"]) >= 0).sum()), noise, spans, len(real),
                     len(carried)]
            self.per_denoiser[d] = [a + b for a, b in zip(self.per_denoiser.get(d, [0] * 6), stats)]

    def summary(self) -> dict[str, Any]:
        acc = self.per_denoiser
        if not acc:
            return {}
        total = sum(v[0] for v in acc.values())
        return {"denoisers": {UL2_DENOISERS[d].name: {"share": rows / total, "loss_fraction": noise / tokens,
                                                      "mean_span_length": noise / spans,
                                                      "input_length_mean": inputs / rows,
                                                      "target_length_mean": targets / rows}
                              for d, (rows, tokens, noise, spans, inputs, targets) in sorted(acc.items())}}
