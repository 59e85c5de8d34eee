"""BART's five noising functions (Lewis et al. 2020, "BART: Denoising Sequence-to-Sequence Pre-training", sec. 2.2
and fig. 2) with the semantics of the reference code (fairseq ``DenoisingDataset``), applied in its order:

1. sentence permutation (``permute_sentence_ratio``): that share of the sentences exchange places at random;
2. masking (``mask_ratio`` of the words), by ``mask_length``:
   ``subword``/``word`` + ``replace_length=-1`` = token masking (each token becomes ``<mask>``);
   ``replace_length=0`` = token deletion; ``span-poisson`` + ``replace_length=1`` = text infilling (span lengths
   in words ~ Poisson(lambda), each span becomes one ``<mask>``, a zero-length span inserts one ``<mask>``);
   ``mask_random`` of the spans get a random token instead of ``<mask>``;
3. insertion (``insert_ratio``): that many extra ``<mask>``/random tokens at random places;
4. document rotation (``rotate_ratio``): with that probability the document starts at a random token.

A row is ``<s> tokens </s>``; ``<s>`` and ``</s>`` are never noised. The decoder's target is always the original row.
Random tokens are drawn from the non-special ids (fairseq draws any id but 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from plm_lightning.data.corruption.poisson_spans import poisson_span_lengths
from plm_lightning.errors import ConfigError

MaskLength = Literal["subword", "word", "span-poisson"]
SpanPlacement = Literal["exact", "fairseq"]


@dataclass(frozen=True)
class BARTNoise:
    """Defaults: the paper's recipe for the large model (sec. 5.1): text infilling of 30% of the tokens with
    Poisson(3) spans, and every sentence permuted. fairseq's released bart.large run used ``poisson_lambda`` 3.5
    and ``mask_random`` 0.1."""

    mask_ratio: float = 0.3
    mask_length: MaskLength = "span-poisson"
    poisson_lambda: float = 3.0
    replace_length: int = 1
    """-1: every masked token becomes a mask; 0: masked tokens are deleted; 1: each span becomes one mask."""
    mask_random: float = 0.0
    placement: SpanPlacement = "exact"
    """How spans are laid out (:func:`span_words`): ``exact`` (no overlaps, the budget covered exactly) or
    ``fairseq`` (independent starts, as the reference code)."""
    insert_ratio: float = 0.0
    permute_sentence_ratio: float = 1.0
    rotate_ratio: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mask_ratio", "mask_random", "insert_ratio", "permute_sentence_ratio", "rotate_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"data.{name}={value} must lie in [0, 1]")
        if self.mask_length not in ("subword", "word", "span-poisson"):
            raise ConfigError(f"data.mask_length={self.mask_length!r} is not one of subword, word, span-poisson")
        if self.replace_length not in (-1, 0, 1):
            raise ConfigError(f"data.replace_length={self.replace_length} is not one of -1 (mask every token), "
                              "0 (delete), 1 (one mask per span)")
        if self.placement not in ("exact", "fairseq"):
            raise ConfigError(f"data.placement={self.placement!r} is not one of exact, fairseq")
        if self.mask_length == "span-poisson" and self.poisson_lambda <= 0:
            raise ConfigError(f"data.poisson_lambda={self.poisson_lambda} must be positive (BART: 3)")


@dataclass
class Noised:
    """The encoder input of one row and what was done to it."""

    source: np.ndarray
    noised: int
    """Original tokens masked, replaced or deleted."""
    spans: int
    """Masked spans (of at least one token)."""
    inserted: int
    """Tokens inserted (zero-length spans and insertion noise)."""


def permute_sentences(sentence_starts: np.ndarray, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """Index order of a ``<s> ... </s>`` row with ``ceil(n * ratio)`` of its n sentences shuffled among their own
    places (fairseq ``permute_sentences``). ``sentence_starts``: True at each sentence's first token."""
    length = len(sentence_starts)
    starts = [1, *(int(i) for i in np.flatnonzero(sentence_starts[1:length - 1]) + 1 if i > 1)]
    ends = [*starts[1:], length - 1]
    n = len(starts)
    count = math.ceil(n * ratio)
    chosen = rng.permutation(n)[:count]
    ordering = np.arange(n)
    ordering[chosen] = chosen[rng.permutation(count)]
    return np.concatenate([[0], *(np.arange(starts[i], ends[i]) for i in ordering), [length - 1]]).astype(np.int64)


def insert_tokens(tokens: np.ndarray, count: int, rng: np.random.Generator, mask_id: int, random_ids: np.ndarray,
                  random_ratio: float) -> np.ndarray:
    """``count`` tokens inserted at random places strictly inside ``<s> ... </s>``; ``ceil(count * random_ratio)``
    of them random tokens, the rest masks (fairseq ``add_insertion_noise``)."""
    if count <= 0:
        return tokens
    total = len(tokens) + count
    places = rng.permutation(total - 2)[:count] + 1
    num_random = math.ceil(count * random_ratio)
    result = np.full(total, -1, dtype=np.int64)
    result[places[num_random:]] = mask_id
    result[places[:num_random]] = rng.choice(random_ids, num_random)
    keep = np.ones(total, dtype=bool)
    keep[places] = False
    result[keep] = tokens
    return result


def span_words(lengths: np.ndarray, num_words: int, placement: SpanPlacement, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """(first word, word after the last) of each span of ``lengths`` words among ``num_words``.

    ``fairseq``: each span starts at a distinct random word and runs for its length (clipped at the row's end), so
    spans may overlap and cover fewer words than their lengths add up to (about 27% of the words for a 30% budget of
    Poisson(3) spans). ``exact``: the spans are laid out without overlapping, every interleaving of spans and
    unmasked words equally likely, so they cover exactly ``sum(lengths)`` words, the paper's "30% of tokens".
    """
    k = len(lengths)
    if placement == "fairseq":
        first = rng.permutation(num_words)[:k]
        return first, np.minimum(first + lengths[: len(first)], num_words)
    slots = np.zeros(num_words - int(lengths.sum()) + k, dtype=bool)
    slots[rng.permutation(len(slots))[:k]] = True
    advance = np.ones(len(slots), dtype=np.int64)
    advance[slots] = lengths
    first = (np.cumsum(advance) - advance)[slots]
    return first, first + lengths


def mask_words(tokens: np.ndarray, word_starts: np.ndarray, noise: BARTNoise, rng: np.random.Generator, mask_id: int,
               random_ids: np.ndarray) -> Noised:
    """fairseq ``add_whole_word_mask``: ``ceil(words * mask_ratio)`` words masked in spans of whole words (one word
    each unless ``mask_length`` is span-poisson), placed by :func:`span_words`; see the module docstring."""
    source = tokens.copy()
    flags = word_starts.astype(bool).copy() if noise.mask_length != "subword" else np.ones(len(tokens), dtype=bool)
    flags[0] = flags[-1] = False
    word_pos = np.flatnonzero(flags)
    budget = math.ceil(len(word_pos) * noise.mask_ratio)
    if budget == 0:
        return Noised(source, 0, 0, 0)
    inserts = 0
    if noise.mask_length == "span-poisson":
        lengths = poisson_span_lengths(budget, noise.poisson_lambda, rng)
        inserts = int((lengths == 0).sum())
        lengths = lengths[lengths > 0]
    else:
        lengths = np.ones(budget, dtype=np.int64)
    first, stop = span_words(lengths, len(word_pos), noise.placement, rng)
    word_end = np.append(word_pos[1:], len(tokens) - 1)  # a word runs to the next word start (or to </s>)
    starts, ends = word_pos[first], word_end[stop - 1]
    randomised = rng.random(len(starts)) < noise.mask_random
    keep = np.ones(len(source), dtype=bool)
    noised = np.zeros(len(source), dtype=bool)
    if noise.replace_length == 0:
        keep[starts] = False
    else:
        source[starts] = mask_id
        source[starts[randomised]] = rng.choice(random_ids, int(randomised.sum()))
    for start, end, is_random in zip(starts, ends, randomised):  # the rest of each span
        noised[start:end] = True
        if noise.replace_length == -1:
            source[start + 1:end] = rng.choice(random_ids, end - start - 1) if is_random else mask_id
        else:
            keep[start + 1:end] = False
    source = insert_tokens(source[keep], inserts, rng, mask_id, random_ids, noise.mask_random)
    return Noised(source, int(noised.sum()), len(starts), inserts)


def rotate(tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """fairseq ``add_rolling_noise``: ``<s> t[k:] t[1:k] </s>`` for k uniform in [1, len - 1]."""
    offset = int(rng.integers(1, max(1, len(tokens) - 1) + 1))
    return np.concatenate([tokens[:1], tokens[offset:-1], tokens[1:offset], tokens[-1:]])


def bart_noise(tokens: np.ndarray, word_starts: np.ndarray, sentence_starts: np.ndarray, noise: BARTNoise,
               rng: np.random.Generator, mask_id: int, random_ids: np.ndarray) -> Noised:
    """The encoder input of one ``<s> ... </s>`` row under ``noise`` (permute, mask, insert, rotate)."""
    if len(tokens) < 3:
        return Noised(tokens.copy(), 0, 0, 0)
    if noise.permute_sentence_ratio > 0:
        order = permute_sentences(sentence_starts, noise.permute_sentence_ratio, rng)
        tokens, word_starts = tokens[order], word_starts[order]
    out = Noised(tokens.copy(), 0, 0, 0)
    if noise.mask_ratio > 0:
        out = mask_words(tokens, word_starts, noise, rng, mask_id, random_ids)
    if noise.insert_ratio > 0:
        count = math.ceil(len(out.source) * noise.insert_ratio)
        out.source = insert_tokens(out.source, count, rng, mask_id, random_ids, noise.mask_random)
        out.inserted += count
    if noise.rotate_ratio > 0 and rng.random() < noise.rotate_ratio:
        out.source = rotate(out.source, rng)
    return out
