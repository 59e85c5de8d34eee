"""MASS (Song et al. 2019, "MASS: Masked Sequence to Sequence Pre-training for Language Generation", sec. 2.2, eq. 1):
one contiguous fragment x^{u:v} of k tokens (k = 50% of the sentence) is masked in the encoder input (80% [MASK], 10% a
random token, 10% unchanged, as in BERT); the decoder predicts the fragment and nothing else, reading at each step
the token before it. k = 1 leaves the decoder no context (BERT's masked LM); k = the whole sentence leaves the encoder
nothing (GPT's language model).

What the paper leaves to its code follows microsoft/MASS (``MASS/src/trainer.py``, the ICML release, and its
fairseq ports): the fragment starts at the first position with probability 0.2, at the last possible one with 0.2,
anywhere (uniformly) otherwise; the decoder's first input is the token just before the fragment, x_{u-1} (a start
token only where the fragment opens the row); the decoder's cross-attention does not see the encoder's [MASK]
positions."""

from __future__ import annotations

import numpy as np

FIRST_START_PROB = 0.2
"""microsoft/MASS: the share of fragments that open the row ..."""
LAST_START_PROB = 0.2
"""... and the share that close it; the rest start uniformly at random."""


def fragment_length(length: int, ratio: float) -> int:
    """k = round(length * ratio), at least 1 and at most ``length``."""
    return min(length, max(1, int(round(length * ratio))))


def fragment_start(length: int, k: int, rng: np.random.Generator) -> int:
    """u: 0 with probability 0.2, ``length - k`` with 0.2, uniform over ``[0, length - k]`` otherwise (microsoft/MASS
    ``mask_start``; its uniform draw leaves out the last start, ours does not, a difference of one start in ``length
    - k``)."""
    last, p = length - k, rng.random()
    if p < FIRST_START_PROB:
        return 0
    if p < FIRST_START_PROB + LAST_START_PROB:
        return last
    return int(rng.integers(0, last + 1))


def mass_corrupt(tokens: np.ndarray, ratio: float, rng: np.random.Generator, mask_id: int, random_ids: np.ndarray,
                 mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, start_id: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(encoder input, decoder input, target, fragment start u) of one row: the fragment ``tokens[u : u + k]``
    replaced in the encoder input; the decoder reads ``tokens[u - 1 : u + k - 1]`` (``start_id`` first where u = 0)
    and predicts the fragment."""
    k = fragment_length(len(tokens), ratio)
    start = fragment_start(len(tokens), k, rng)
    fragment = tokens[start:start + k].copy()
    draw = rng.random(k)
    replaced = np.where(draw < mask_replace_prob, mask_id, fragment)
    randomised = (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    replaced[randomised] = rng.choice(random_ids, int(randomised.sum()))
    encoder = tokens.copy()
    encoder[start:start + k] = replaced
    before = tokens[start - 1] if start > 0 else start_id
    decoder = np.concatenate([[before], fragment[:-1]]).astype(tokens.dtype)
    return encoder, decoder, fragment, start
