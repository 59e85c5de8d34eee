"""Attention-mask builders: the second of the three parts of every objective.

Every builder returns a boolean tensor broadcastable to ``[batch, heads, queries, keys]`` where ``True`` means
"this query may attend to this key". Combine several with :func:`combine` (logical AND).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Bidirectional mask hiding padded keys: ``[B, L]`` of 1/0 (or bool) to ``[B, 1, 1, L]``."""
    return attention_mask.bool()[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None, key_length: int | None = None) -> Tensor:
    """Lower-triangular ``[1, 1, Lq, Lk]``: query i sees keys j <= i (+ the offset of a longer key cache)."""
    key_length = length if key_length is None else key_length
    offset = key_length - length
    q = torch.arange(length, device=device)[:, None]
    k = torch.arange(key_length, device=device)[None, :]
    return (k <= q + offset)[None, None]


def prefix_lm_mask(prefix_lengths: Tensor, length: int) -> Tensor:
    """Prefix-LM (UniLM seq2seq, T5 prefix-LM, GLM): bidirectional over the first ``p`` tokens, causal after.

    Dong et al. 2019 (UniLM), Fig. 1: key j is visible to query i when ``j < p`` or ``j <= i``.
    """
    device = prefix_lengths.device
    q = torch.arange(length, device=device)[None, :, None]
    k = torch.arange(length, device=device)[None, None, :]
    return ((k < prefix_lengths[:, None, None]) | (k <= q))[:, None]


ATTENTION_KINDS = ("bidirectional", "left_to_right", "right_to_left", "prefix")
"""The self-attention shapes a batch can ask for by index (``attention_kind``): UniLM's four (Dong et al. 2019,
Fig. 1) and the prefix-LM of UL2's decoder-only mode and GLM."""


def attention_shape(kind: str, length: int, prefix_lengths: Tensor | None = None,
                    device: torch.device | str | None = None) -> Tensor | None:
    """The mask of one of :data:`ATTENTION_KINDS`: None (every key), causal, anti-causal (query i sees j >= i) or
    :func:`prefix_lm_mask` over ``prefix_lengths``."""
    if kind == "bidirectional":
        return None
    if kind == "left_to_right":
        return causal_mask(length, device)
    if kind == "right_to_left":
        return causal_mask(length, device).transpose(-1, -2)
    if kind == "prefix":
        if prefix_lengths is None:
            raise ValueError("attention kind 'prefix' needs prefix_lengths")
        return prefix_lm_mask(prefix_lengths, length)
    raise ValueError(f"attention kind {kind!r} is not one of {', '.join(ATTENTION_KINDS)}")


def document_mask(document_ids: Tensor) -> Tensor:
    """Block-diagonal mask for packed sequences: a token only sees tokens of its own document. ``[B, L]`` ids."""
    return (document_ids[:, :, None] == document_ids[:, None, :])[:, None]


def sliding_window_mask(length: int, window: int, causal: bool = False, device: torch.device | str | None = None,
                        key_length: int | None = None) -> Tensor:
    """Local attention (Longformer, ModernBERT local layers): ``|i - j| <= window // 2``, or causal
    ``0 <= i - j < window`` (GPT-3's banded layers; queries offset by a longer key cache)."""
    key_length = length if key_length is None else key_length
    q = torch.arange(length, device=device)[:, None] + (key_length - length)
    k = torch.arange(key_length, device=device)[None, :]
    if causal:
        allowed = (q - k >= 0) & (q - k < window)
    else:
        allowed = (q - k).abs() <= window // 2
    return allowed[None, None]


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of masks with broadcasting; ``None`` entries mean "no restriction"."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def to_additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Boolean mask to an additive float bias (0 where allowed, the dtype's minimum where not)."""
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)
