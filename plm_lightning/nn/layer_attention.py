"""What one attention call reads besides its input (:class:`LayerAttention`, a layer's share of the batch's
:class:`~plm_lightning.nn.attention_plan.AttentionPlan`) and the key-value caches of incremental decoding."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor

from plm_lightning.nn.unpad import Unpadding
from plm_lightning.nn.varlen import Segments


@dataclass
class KVCache:
    """One attention module's keys and values ``[B, heads, T, head_dim]`` during incremental decoding."""

    key: Tensor | None = None
    value: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        if self.key is not None:
            self.key, self.value = self.key.index_select(0, index), self.value.index_select(0, index)

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[2]


@dataclass
class LayerCache:
    """A block's self-attention and cross-attention caches."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)



@dataclass(frozen=True)
class LayerAttention:
    """One attention call's shape. Self-attention reads every field but ``kv``; ``cross`` is the same block's
    cross-attention (keys and values ``kv`` from the encoder). Unset fields mean: every key visible, no position
    term, the dense ``[B, L, H]`` layout, every query computed."""

    mask: Tensor | None = None
    """Boolean, True = may attend, broadcastable to ``[B, 1, Lq, Lk]`` (padding, documents, prefix, window)."""
    is_causal: bool = False
    """A causal mask on top of ``mask`` (taken by SDPA's fused causal path when it is the only mask)."""
    position_bias: Tensor | None = None
    """Additive ``[B|1, heads, Lq, Lk]`` (T5's bucketed relative positions)."""
    rope: tuple[Tensor, Tensor] | None = None
    """Rotary (cos, sin) ``[L, D]`` / ``[B, L, D]``, or the stream's ``[1, T, D]`` with ``segments``."""
    relative: Any = None
    """DeBERTa's (relative table, positions) or Transformer-XL's ``XLRelative``, read by their attention classes."""
    query_index: Tensor | None = None
    """``[B, K]``: compute only these queries (the sparse last layer, XLNet's streams); keys stay every position."""
    unpadding: Unpadding | None = None
    """The input is ``[1, T, H]``, the real tokens only; the kernel runs on the re-padded layout."""
    segments: Segments | None = None
    """The input is one flat stream of these blocks, attended block-diagonally; ``mask`` is not read."""
    cache: KVCache | LayerCache | None = None
    """Incremental decoding: the block's ``LayerCache``, its attention modules' ``KVCache``."""
    memory: Tensor | None = None
    """Transformer-XL: hidden states of earlier segments, extra keys before the input."""
    kv: Tensor | None = None
    """Cross-attention: the encoder output the keys and values are projected from."""
    cross: LayerAttention | None = None
    """The block's cross-attention shape (``kv``, the encoder's padding mask, its cache)."""

    def self_attention(self) -> LayerAttention:
        """The view the block's self-attention module reads: its own ``KVCache``."""
        return replace(self, cache=self.cache.self_attn) if isinstance(self.cache, LayerCache) else self

    def cross_attention(self) -> LayerAttention:
        """The view the block's cross-attention module reads."""
        if self.cross is None:
            raise ValueError("this block has cross-attention: pass encoder_out (LayerAttention.cross)")
        return self.cross


EVERY_POSITION = LayerAttention()
"""Bidirectional attention over every position, no position term: a block called with no plan."""
