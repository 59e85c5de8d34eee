"""Batch collators: stack packed blocks and apply an objective's corruption, seeded per sample.

Every collator returns ``input_ids``, ``attention_mask`` and ``labels`` where ``labels[b, i]`` is the token the
model must predict *from position i* (-100 where there is no loss). Extras: ``token_type_ids``,
``sentence_label`` (NSP or SOP), ``document_ids`` (for block-diagonal attention over packed documents).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from plm_lightning.data.corruption import IGNORE_INDEX, MaskingConfig, mask_tokens, mask_whole_words, row_keys
from plm_lightning.data.corruption.span_mask import SpanConfig, mask_ngrams, mask_spans, span_boundaries
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.errors import ConfigError


def sample_keys(seed: int, samples: list[dict[str, Any]], epoch_period: int | None = None) -> np.ndarray:
    """One counter key per sample from (seed, epoch, sample index): resumed runs, every DataLoader worker and every
    world size reproduce the same corruption. ``epoch_period`` cycles epochs (static masking's dupe_factor)."""
    epochs = np.array([s["epoch"] for s in samples], dtype=np.int64)
    if epoch_period is not None:
        epochs %= epoch_period
    return row_keys(seed, epochs, np.array([s["index"] for s in samples], dtype=np.int64))


def pad_rows(rows: list[np.ndarray], value: int) -> torch.Tensor:
    """Right-pad 1-D int arrays to the longest into one ``[B, L]`` tensor."""
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


def length_mask(rows: list[np.ndarray]) -> torch.Tensor:
    """``[B, L]`` True over each row's real tokens, for rows padded by :func:`pad_rows`."""
    lengths = torch.tensor([len(r) for r in rows])
    return torch.arange(int(lengths.max()))[None] < lengths[:, None]


def stack_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The packed rows as int64 arrays ``input_ids`` / ``document_ids`` and their padding mask (document id >= 0):
    what every token-level collator corrupts."""
    ids = np.stack([s["input_ids"] for s in samples]).astype(np.int64)
    docs = np.stack([s["document_ids"] for s in samples]).astype(np.int64)
    return {"input_ids": ids, "document_ids": docs, "attention_mask": docs >= 0}


def sample_extras(samples: list[dict[str, Any]], stacked: dict[str, Any],
                  document_mask: bool) -> dict[str, torch.Tensor]:
    """The batch keys every collator passes on unchanged: the attention mask, the segment ids and sentence label of
    sentence-pair rows, and (``document_mask``) the document ids for block-diagonal attention."""
    out: dict[str, torch.Tensor] = {"attention_mask": torch.from_numpy(stacked["attention_mask"])}
    if samples[0].get("segment_b_start") is not None:
        starts = np.array([s["segment_b_start"] for s in samples])[:, None]
        positions = np.arange(stacked["input_ids"].shape[1])[None]
        out["token_type_ids"] = torch.from_numpy(((positions >= starts) & stacked["attention_mask"]).astype(np.int64))
        out["sentence_label"] = torch.tensor([int(s["sentence_label"]) for s in samples])
    if document_mask:
        out["document_ids"] = torch.from_numpy(stacked["document_ids"])
    return out


KNOWLEDGE_STAGES = {"basic": ("word_starts", None), "phrase": ("phrase_starts", "in_phrase"),
                    "entity": ("entity_starts", "in_entity")}


@dataclass(frozen=True)
class MaskedLMSettings:
    """What a :class:`MaskedLMCollator` is configured with: the tokenizer's ids, the masking budget and scheme, the
    seed, and the scheme's own settings (``MaskedLMDataModule.collator_settings`` builds it from ``data.*``)."""

    special_ids: np.ndarray
    """Ids never masked (and never drawn as random replacements)."""
    mask_token_id: int
    vocab_size: int
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    seed: int = 0
    static_masking: bool = False
    """Fixed maskings (``dupe_factor`` of them, cycled over epochs: BERT's original pipeline) instead of dynamic."""
    dupe_factor: int = 10
    document_mask: bool = False
    """Pass ``document_ids`` on, for block-diagonal attention over packed documents."""
    masking_scheme: str = "token"
    """A key of :data:`MASKING_SCHEMES`."""
    spans: SpanConfig = field(default_factory=SpanConfig)
    max_ngram: int = 3
    stages: tuple[str, ...] = ("basic", "phrase", "entity")
    """ERNIE's knowledge stages in training order."""
    stage_epochs: tuple[float, ...] = ()
    """ERNIE: the training progress, in epochs, at which each later stage begins."""


Masked = tuple[np.ndarray, np.ndarray, dict[str, torch.Tensor]]
"""(corrupted ids, labels, extra batch keys) of one masking scheme."""


def _mask_token(c: MaskedLMCollator, samples: list[dict[str, Any]], ids: np.ndarray, maskable: np.ndarray,
                keys: np.ndarray) -> Masked:
    """BERT (Devlin et al. 2019, sec. 3.1): single tokens."""
    return (*mask_tokens(ids, maskable, keys, c.masking, c.mask_token_id, c.random_token_ids), {})


def _mask_whole_word(c: MaskedLMCollator, samples: list[dict[str, Any]], ids: np.ndarray, maskable: np.ndarray,
                     keys: np.ndarray) -> Masked:
    """BERT-wwm: every token of a chosen word."""
    starts = np.stack([s["word_starts"] for s in samples])
    return (*mask_whole_words(ids, maskable, starts, keys, c.masking, c.mask_token_id, c.random_token_ids), {})


def _mask_ngram(c: MaskedLMCollator, samples: list[dict[str, Any]], ids: np.ndarray, maskable: np.ndarray,
                keys: np.ndarray) -> Masked:
    """ALBERT (Lan et al. 2020, sec. 4.1): n-grams of whole words, P(n) ~ 1/n."""
    starts = np.stack([s["word_starts"] for s in samples])
    return (*mask_ngrams(ids, maskable, starts, keys, c.masking, c.max_ngram, c.mask_token_id,
                         c.random_token_ids), {})


def _mask_span(c: MaskedLMCollator, samples: list[dict[str, Any]], ids: np.ndarray, maskable: np.ndarray,
               keys: np.ndarray) -> Masked:
    """SpanBERT (Joshi et al. 2020, sec. 3.1): geometric spans of whole words, with the span ids and boundary
    positions the Span Boundary Objective reads."""
    starts = np.stack([s["word_starts"] for s in samples])
    corrupted, labels, span_ids = mask_spans(ids, maskable, starts, keys, c.masking, c.spans, c.mask_token_id,
                                             c.random_token_ids)
    left, right, offset = span_boundaries(span_ids)
    return corrupted, labels, {"span_ids": torch.from_numpy(span_ids), "span_left": torch.from_numpy(left),
                               "span_right": torch.from_numpy(right), "span_offset": torch.from_numpy(offset)}


def _mask_knowledge(c: MaskedLMCollator, samples: list[dict[str, Any]], ids: np.ndarray, maskable: np.ndarray,
                    keys: np.ndarray) -> Masked:
    """ERNIE (Sun et al. 2019, sec. 3.2): each row masks whole units of its stage (basic = words, phrase, entity),
    the stage's units first, then other words, to the same token budget."""
    stage = np.array([c.stage_of(s.get("progress", 0.0)) for s in samples])
    corrupted, labels = ids.copy(), np.full_like(ids, IGNORE_INDEX)
    for k in np.unique(stage):
        rows = np.flatnonzero(stage == k)
        starts_key, priority_key = KNOWLEDGE_STAGES[c.stages[k]]
        if starts_key not in samples[0]:
            raise ConfigError("data.masking_scheme=ernie needs blocks packed with knowledge units; they are "
                              "built by MaskedLMDataModule(masking_scheme='ernie')")
        starts = np.stack([samples[r][starts_key] for r in rows])
        priority = None if priority_key is None else np.stack([samples[r][priority_key] for r in rows])
        corrupted[rows], labels[rows] = mask_whole_words(ids[rows], maskable[rows], starts, keys[rows], c.masking,
                                                         c.mask_token_id, c.random_token_ids, priority)
    return corrupted, labels, {"knowledge_stage": torch.from_numpy(stage)}


class KnowledgeMaskingNotes(InspectionNotes):
    """ERNIE 1.0 (``masking_scheme=ernie``) in ``inspect``: the share of masked tokens inside phrases / entities,
    the stage mix of the measured rows, and the sample's knowledge units bracketed."""

    def __init__(self, stages: tuple[str, ...]) -> None:
        self.stages, self.seen, self.chosen = stages, [], 0
        self.inside = {"in_phrase": 0, "in_entity": 0}

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        loss = batch["labels"].numpy() != IGNORE_INDEX
        self.chosen += int(loss.sum())
        for name in self.inside:
            if name in samples[0]:
                self.inside[name] += int(np.stack([s[name] for s in samples])[loss].sum())
        self.seen.extend(batch["knowledge_stage"].tolist())

    def summary(self) -> dict[str, Any]:
        if not self.seen:
            return {}
        share = {name: n / self.chosen if self.chosen else None for name, n in self.inside.items()}
        return {"phrase_token_fraction": share["in_phrase"], "entity_token_fraction": share["in_entity"],
                "stages": {self.stages[k]: self.seen.count(k) for k in sorted(set(self.seen))}}

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        text = "".join(f"{kind} units [...]:\n  {bracket_units(sample, kind, tokenizer, real)}\n\n"
                       for kind in ("phrase", "entity") if f"in_{kind}" in sample)
        return text + f"stage: {self.stages[int(batch['knowledge_stage'][0])]}\n\n"


def bracket_units(sample: dict[str, Any], kind: str, tokenizer: Any, real: int) -> str:
    """The sample's tokens with each multi-token phrase or entity unit in brackets."""
    inside, starts = sample[f"in_{kind}"][:real], sample[f"{kind}_starts"][:real]
    pieces = []
    for i, t in enumerate(sample["input_ids"][:real].tolist()):
        opens = inside[i] and (i == 0 or starts[i] or not inside[i - 1])
        closes = inside[i] and (i + 1 == real or starts[i + 1] or not inside[i + 1])
        pieces.append(("[" if opens else "") + tokenizer.id_to_token(t) + ("]" if closes else ""))
    return " ".join(pieces)


MASKING_SCHEMES: dict[str, Callable[..., Masked]] = {
    "token": _mask_token, "whole_word": _mask_whole_word, "ngram": _mask_ngram, "span": _mask_span,
    "ernie": _mask_knowledge,
}
"""``data.masking_scheme`` -> its masking function ``(collator, samples, ids, maskable, keys) -> Masked``."""


class MaskedLMCollator:
    """Masked-LM corruption, dynamic (or static: ``dupe_factor`` fixed maskings cycled over epochs), by one of
    :data:`MASKING_SCHEMES`: single tokens (BERT), whole words (BERT-wwm), n-grams of whole words (ALBERT), spans
    of whole words (SpanBERT) or ERNIE's knowledge units. Configured by one :class:`MaskedLMSettings`, whose fields
    it also carries as attributes."""

    def __init__(self, settings: MaskedLMSettings) -> None:
        if settings.masking_scheme not in MASKING_SCHEMES:
            raise ConfigError(f"data.masking_scheme={settings.masking_scheme!r} is not one of "
                              f"{', '.join(MASKING_SCHEMES)}")
        self.settings = settings
        for name in (f.name for f in fields(settings)):
            setattr(self, name, getattr(settings, name))
        self.random_token_ids = np.setdiff1d(np.arange(settings.vocab_size), settings.special_ids)
        scheme = settings.masking_scheme
        self.objective = "masked_lm" if scheme == "token" else f"masked_lm_{scheme}"

    def stage_of(self, progress: float) -> int:
        """ERNIE's stage (an index into ``stages``) at a training progress given in epochs."""
        return int(np.searchsorted(np.asarray(self.stage_epochs), progress, side="right"))

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        stacked = stack_samples(samples)
        ids = stacked["input_ids"]
        maskable = stacked["attention_mask"] & ~np.isin(ids, self.special_ids)
        keys = sample_keys(self.seed, samples, self.dupe_factor if self.static_masking else None)
        corrupted, labels, extra = MASKING_SCHEMES[self.masking_scheme](self, samples, ids, maskable, keys)
        return {"input_ids": torch.from_numpy(corrupted), "labels": torch.from_numpy(labels), **extra,
                **sample_extras(samples, stacked, self.document_mask)}


class CausalLMCollator:
    """Next-token prediction: ``labels[i] = input_ids[i + 1]`` (no corruption; every real token carries loss)."""

    objective = "causal_lm"
    corrupts_input = False
    """The input is the text itself (``inspect`` reports no mask/random/unchanged fractions)."""

    def __init__(self, document_mask: bool = False) -> None:
        self.document_mask = document_mask

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        stacked = stack_samples(samples)
        ids, real = stacked["input_ids"], stacked["attention_mask"]
        labels = np.full_like(ids, IGNORE_INDEX)
        labels[:, :-1] = np.where(real[:, 1:], ids[:, 1:], IGNORE_INDEX)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels),
                **sample_extras(samples, stacked, self.document_mask)}
