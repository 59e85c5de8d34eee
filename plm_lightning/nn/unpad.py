"""Unpadding: the real tokens of a padded ``[B, L]`` batch packed into one row, so token-wise layers (projections,
feed-forward, norms) spend nothing on padding (MosaicBERT, Portes et al. 2023; ModernBERT, Warner et al. 2024,
sec. 2.1.3). Attention keeps per-sequence boundaries: on xformers it attends the unpadded stream block-diagonally
(``plm_lightning.nn.varlen``); elsewhere its kernel runs on the re-padded ``[B, L]`` layout with the padding mask
(the math is the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Unpadding:
    index: Tensor
    """``[T]`` flat positions (``b * L + i``) of the real tokens, in order."""
    batch: int
    length: int

    @classmethod
    def from_attention_mask(cls, attention_mask: Tensor) -> Unpadding:
        b, n = attention_mask.shape
        return cls(attention_mask.reshape(-1).nonzero().squeeze(1), b, n)

    def unpad(self, x: Tensor) -> Tensor:
        """``[B, L, ...]`` -> ``[1, T, ...]``."""
        return x.flatten(0, 1).index_select(0, self.index)[None]

    def pad(self, x: Tensor) -> Tensor:
        """``[1, T, ...]`` -> ``[B, L, ...]`` with zeros at the padded positions."""
        out = x.new_zeros(self.batch * self.length, *x.shape[2:])
        return out.index_copy(0, self.index, x[0]).view(self.batch, self.length, *x.shape[2:])
