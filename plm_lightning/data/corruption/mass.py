"""MASS (Song et al. 2019, "MASS: Masked Sequence to Sequence Pre-training for Language Generation", sec. 2.2):
one contiguous fragment of k tokens (k = 50% of the sentence) is masked in the encoder input (80% [MASK], 10% a
random token, 10% unchanged, as in BERT); the decoder predicts the fragment, reading it shifted right, and nothing
else. k = 1 leaves the decoder no context (BERT's masked LM); k = the whole sentence leaves the encoder nothing
(GPT's language model)."""

from __future__ import annotations

import numpy as np


def fragment_length(length: int, ratio: float) -> int:
    """k = round(length * ratio), at least 1 and at most ``length``."""
    return min(length, max(1, int(round(length * ratio))))


def mass_corrupt(tokens: np.ndarray, ratio: float, rng: np.random.Generator, mask_id: int, random_ids: np.ndarray,
                 mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, start_id: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(encoder input, decoder input, target, fragment start) of one row: the fragment tokens[u : u + k] replaced
    in the encoder input; the decoder reads ``[start_id, fragment[:-1]]`` and predicts ``fragment``."""
    k = fragment_length(len(tokens), ratio)
    start = int(rng.integers(0, len(tokens) - k + 1))
    fragment = tokens[start:start + k].copy()
    draw = rng.random(k)
    replaced = np.where(draw < mask_replace_prob, mask_id, fragment)
    randomised = (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    replaced[randomised] = rng.choice(random_ids, int(randomised.sum()))
    encoder = tokens.copy()
    encoder[start:start + k] = replaced
    decoder = np.concatenate([[start_id], fragment[:-1]])
    return encoder, decoder, fragment, start
