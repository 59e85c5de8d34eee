"""T5 span corruption (Raffel et al. 2020, sec. 3.1.4 and 3.3.4), exactly as the T5 code does it
(``t5.data.preprocessors``: ``random_spans_noise_mask``, ``random_spans_helper``, ``noise_span_to_unique_sentinel``,
``nonnoise_span_to_unique_sentinel``).

A row of ``raw`` tokens gets exactly round(raw * noise_density) noise tokens in round(noise / mean_span_length)
spans; the span lengths and the lengths of the clean runs between them are random segmentations, interleaved
clean-noise-clean-noise... (the row always ends in noise). The input keeps the clean tokens and replaces each noise
span by one sentinel; the target lists each sentinel followed by the span it hides. Sentinels count down from the
top of the vocabulary: ``<extra_id_0>`` is the highest id. Both end with EOS.
"""

from __future__ import annotations

import numpy as np

from plm_lightning.errors import ConfigError


def noise_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a row of ``length`` tokens, as ``random_spans_noise_mask`` computes them."""
    length = max(length, 2)
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = max(int(round(num_noise / mean_noise_span_length)), 1)
    return num_noise, num_spans


def raw_length_for(inputs_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """``random_spans_helper``: the longest raw row whose corrupted input (clean tokens + one sentinel per span +
    EOS) fits in ``inputs_length``, and its target length (noise tokens + one sentinel per span + EOS). T5's 512
    input tokens come from 568 raw tokens, with 114 target tokens."""

    def lengths(tokens: int) -> tuple[int, int]:  # with the mask's clamps (>= 1 span), so short rows fit exactly too
        num_noise, num_spans = noise_counts(tokens, noise_density, mean_noise_span_length)
        return tokens - num_noise + num_spans + 1, num_noise + num_spans + 1

    tokens = inputs_length - 1
    while lengths(tokens + 1)[0] <= inputs_length:
        tokens += 1
    return tokens, lengths(tokens)[1]


def raw_length_for_concatenated(total_length: int, noise_density: float, mean_noise_span_length: float) -> int:
    """Decoder-only (prefix LM, Raffel et al. 2020 sec. 3.2.1): the longest raw row whose corrupted input and target
    together fit in ``total_length`` (raw + 2 sentinels per span + 2 EOS)."""
    tokens = 1
    while tokens + 1 + 2 * noise_counts(tokens + 1, noise_density, mean_noise_span_length)[1] + 2 <= total_length:
        tokens += 1
    return tokens


def _random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths (all >= 1) of a uniformly random split of ``num_items`` into ``num_segments`` runs."""
    first = np.zeros(num_items, dtype=np.int64)
    first[1:] = rng.permutation((np.arange(num_items - 1) < num_segments - 1).astype(np.int64))
    segment = np.cumsum(first)
    return np.bincount(segment, minlength=num_segments)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator) -> np.ndarray:
    """Boolean ``[length]``: True on noise tokens (see the module docstring)."""
    original = length
    length = max(length, 2)
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = _random_segmentation(num_noise, num_spans, rng)
    clean_lengths = _random_segmentation(length - num_noise, num_spans, rng)
    interleaved = np.stack([clean_lengths, noise_lengths], axis=1).reshape(-1)
    starts = np.cumsum(interleaved)[:-1]
    indicator = np.zeros(length, dtype=np.int64)
    indicator[starts] = 1
    return (np.cumsum(indicator) % 2 == 1)[:original]


def sentinel_ids(vocab_size: int, count: int) -> np.ndarray:
    """``<extra_id_0>`` .. ``<extra_id_{count-1}>``: vocab_size - 1, vocab_size - 2, ..."""
    return vocab_size - 1 - np.arange(count)


def _spans_to_sentinels(tokens: np.ndarray, mask: np.ndarray, sentinels: np.ndarray) -> np.ndarray:
    """``noise_span_to_unique_sentinel``: each run of ``mask`` becomes the next sentinel, its other tokens go."""
    previous = np.concatenate([[False], mask[:-1]])
    first = mask & ~previous
    ids = np.where(first, sentinels[np.maximum(np.cumsum(first) - 1, 0)], tokens)
    return ids[~(mask & previous)]


def span_corrupt(tokens: np.ndarray, noise: np.ndarray, sentinels: np.ndarray, eos_id: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(input, target) of one row, each ending in EOS: the input replaces every noise span by the next sentinel;
    the target replaces every clean run by the next sentinel (``nonnoise_span_to_unique_sentinel``), so it reads
    ``<extra_id_0> span_0 <extra_id_1> span_1 ...`` against an input ``clean_0 <extra_id_0> clean_1 ...``."""
    previous = np.concatenate([[False], noise[:-1]])
    spans = max(int((noise & ~previous).sum()), int((~noise & (previous | (np.arange(len(noise)) == 0))).sum()))
    if spans > len(sentinels):
        raise ConfigError(f"span corruption made {spans} spans but the tokenizer has {len(sentinels)} sentinel "
                          "tokens; lower data.seq_len or data.noise_density, or raise data.mean_noise_span_length")
    return (np.append(_spans_to_sentinels(tokens, noise, sentinels), eos_id),
            np.append(_spans_to_sentinels(tokens, ~noise, sentinels), eos_id))
