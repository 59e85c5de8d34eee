"""Fill-in-the-middle (Bavarian et al. 2022, "Efficient Training of Language Models to Fill in the Middle", sec. 3):
a document is cut at two uniformly random points into (prefix, middle, suffix) and moved so that a left-to-right
model learns to write the middle after seeing both sides:

- PSM: ``<PRE> prefix <SUF> suffix <MID> middle``
- SPM: ``<PRE> <SUF> suffix <MID> prefix middle`` (the paper's variant with both sentinels first, sec. 3 and app. D,
  so that the prefix runs on into the middle).

The cut is at the character level (the paper's default: the text is decoded, split, and each part encoded on its
own, so a middle may start inside a word) or at the token level. Applied per document with probability ``fim_rate``
(0.5) inside each packed context ("context-level FIM"), the context then cut back to its length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

FIMSplit = Literal["character", "token"]


def fim_cut(length: int, rng: np.random.Generator) -> tuple[int, int]:
    """Two cut points 0 <= i <= j <= length, uniform (the paper's sorted pair of uniform draws)."""
    i, j = sorted(int(x) for x in rng.integers(0, length + 1, 2))
    return i, j


def fim_tokens(prefix: list[int], middle: list[int], suffix: list[int], ids: dict[str, int], spm: bool) -> list[int]:
    """The PSM or SPM layout of the three pieces."""
    if spm:
        return [ids["fim_prefix"], ids["fim_suffix"], *suffix, ids["fim_middle"], *prefix, *middle]
    return [ids["fim_prefix"], *prefix, ids["fim_suffix"], *suffix, ids["fim_middle"], *middle]


def fim_document(tokens: list[int], rng: np.random.Generator, ids: dict[str, int], spm_rate: float,
                 split: FIMSplit = "character", decode: Callable[[list[int]], str] | None = None,
                 encode: Callable[[str], list[int]] | None = None) -> tuple[list[int], tuple[int, int]]:
    """One document in FIM layout, and its cut points (in characters or tokens)."""
    spm = bool(rng.random() < spm_rate)
    if split == "token":
        i, j = fim_cut(len(tokens), rng)
        return fim_tokens(tokens[:i], tokens[i:j], tokens[j:], ids, spm), (i, j)
    if decode is None or encode is None:
        raise ValueError("character-level FIM needs the tokenizer's decode and encode")
    text = decode(tokens)
    i, j = fim_cut(len(text), rng)
    return fim_tokens(encode(text[:i]), encode(text[i:j]), encode(text[j:]), ids, spm), (i, j)
