"""Variable-length attention: the sequences of a batch as blocks of one flat token stream, attended with xformers'
block-diagonal biases (``BlockDiagonalMask``, its causal and causal-banded forms), so that no FLOP is spent on padding
nor across the documents packed into a row.

A padded ``[B, L]`` batch is unpadded to its real tokens (``plm_lightning.nn.unpad``); a packed one (several documents
per row, ``document_ids``) is cut at every document boundary. Either way, token ``t`` may attend to token ``s`` iff
both lie in the same block (and ``s <= t`` when causal, ``t - s < window`` when banded): exactly the dense mask
``padding & document (& causal) (& window)`` restricted to the real tokens, which ``tests/test_varlen.py`` checks on
CPU by materialising the bias. Only xformers has kernels for these biases (CUDA); elsewhere the dense masks serve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class Segments:
    """The attention blocks of a flat token stream, in order, and the mask shape inside each block."""

    lengths: tuple[int, ...]
    causal: bool = False
    window: int | None = None
    """Causal banded attention inside each block: ``0 <= t - s < window`` (GPT-3's local layers)."""

    @classmethod
    def of_batch(cls, attention_mask: Tensor | None, document_ids: Tensor | None, shape: tuple[int, int],
                 causal: bool = False) -> Segments | None:
        """The blocks of a ``[B, L]`` batch flattened row after row (padding dropped): one per row, or one per
        document of each row. None when some document's tokens are not contiguous in its row (the dense document
        mask lets them see each other across the gap; no block-diagonal bias can)."""
        b, n = shape
        device = (attention_mask if attention_mask is not None else document_ids).device
        rows = torch.arange(b, device=device)[:, None].expand(b, n)
        key = rows if document_ids is None else torch.stack([rows, document_ids.long().expand(b, n)], -1)
        key = key.reshape(b * n, -1)
        if attention_mask is not None:
            key = key[attention_mask.reshape(-1).bool()]
        runs, counts = torch.unique_consecutive(key, dim=0, return_counts=True)
        if document_ids is not None and runs.shape[0] != torch.unique(key, dim=0).shape[0]:
            return None
        return cls(tuple(counts.tolist()), causal)

    def banded(self, window: int) -> Segments:
        if not self.causal:
            raise ValueError("xformers has no bidirectional banded block-diagonal bias; use the dense local mask")
        return replace(self, window=window)

    @property
    def total(self) -> int:
        return sum(self.lengths)

    def xformers_bias(self, device: torch.device | None = None) -> object:
        """The xformers ``AttentionBias`` of these blocks."""
        from xformers.ops.fmha import attn_bias

        bias = attn_bias.BlockDiagonalMask.from_seqlens(list(self.lengths), device=device)
        if self.window is not None:
            return bias.make_local_attention(self.window)
        return bias.make_causal() if self.causal else bias


def xformers_varlen_attention(q: Tensor, k: Tensor, v: Tensor, segments: Segments, dropout_p: float,
                              scale: float) -> Tensor:
    """xformers memory-efficient attention over the blocks of a flat stream: ``q, k, v`` ``[1, H, T, D]`` (the
    layout of ``MultiHeadAttention``) -> ``[1, H, T, D]``."""
    import xformers.ops as xops

    if q.shape[0] != 1 or q.shape[2] != segments.total:
        raise ValueError(f"variable-length attention takes one flat stream of {segments.total} tokens, got "
                         f"{tuple(q.shape)}")
    out = xops.memory_efficient_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          attn_bias=segments.xformers_bias(q.device), p=dropout_p, scale=scale)
    return out.transpose(1, 2)
