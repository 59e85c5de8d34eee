"""Transformer-XL relative attention (Dai et al. 2019, sec. 3.3) with XLNet's relative segment encoding and query
stream (Yang et al. 2019, sec. 2.3 and 2.5).

The score of query i against key j (the keys are the previous segment's memory followed by the current segment) is
the sum of Dai et al.'s four terms, with u and v two learned per-head global biases:

    A_ij = (q_i + u)^T k_j  +  (q_i + v)^T W_R R_{i-j}

where R is the sinusoid of the relative distance i - j (no absolute positions anywhere). XLNet adds a segment term
``(q_i + b)^T s_ij``, s_ij one of two learned vectors for "same segment" / "different segment" (sec. 2.5). The three
position/segment terms form an additive bias, so the same eager/SDPA kernels run the attention; the tables, indices
and parameters follow the reference code (and transformers' ``XLNetRelativeAttention``), so weights transfer exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.attention import MultiHeadAttention, take_query_rows, take_rows
from plm_lightning.nn.layer_attention import EVERY_POSITION, LayerAttention


def relative_sinusoids(query_length: int, key_length: int, dim: int, bidirectional: bool, clamp_len: int = -1,
                       device: torch.device | None = None, reverse: bool = False) -> Tensor:
    """``[R, dim]`` sin|cos embeddings of the relative distances ``key_length, key_length - 1, ...`` down to
    ``-query_length + 1`` (bidirectional attention, R = K + Q) or 0 (causal, R = K + 1), clamped to
    ``+-clamp_len`` when it is positive. ``reverse`` negates them (XLNet's backward half of bidirectional data)."""
    end = -query_length if bidirectional else -1
    distances = torch.arange(key_length, end, -1, device=device, dtype=torch.float32)
    if reverse:
        distances = -distances
    if clamp_len > 0:
        distances = distances.clamp(-clamp_len, clamp_len)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    angles = distances[:, None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_index(query_length: int, key_length: int, table_rows: int, device: torch.device | None = None) -> Tensor:
    """``[Q, K]`` row of :func:`relative_sinusoids` for each (query, key) pair: distance (M + i) - j sits at row
    Q - i + j (M = K - Q memory keys); rows past the causal table (future keys) clamp to its last row (masked)."""
    i = torch.arange(query_length, device=device)[:, None]
    j = torch.arange(key_length, device=device)[None, :]
    return (query_length - i + j).clamp(max=table_rows - 1)


@dataclass
class XLRelative:
    """What every relative-attention layer of one forward pass shares."""

    table: Tensor
    """``[R, H]`` or ``[B, R, H]`` relative sinusoids (after dropout)."""
    index: Tensor
    """``[Q, K]`` table row per (query, key)."""
    different_segment: Tensor | None = None
    """``[B, Q, K]`` True where query and key lie in different segments (XLNet); None = no segment term."""


def local_heads(parameter: Tensor | None) -> Tensor | None:
    """A per-head parameter's heads on this rank: all of them, or under tensor parallelism (a DTensor split along
    its heads dimension) this rank's; the gradient flows back to that shard."""
    from torch.distributed.tensor import DTensor

    return parameter.to_local() if isinstance(parameter, DTensor) else parameter


class RelativeSelfAttention(MultiHeadAttention):
    """Self-attention with Transformer-XL relative positions, XLNet's segment term, a memory of earlier hidden states
    as extra keys/values, and XLNet's separate query stream (``query`` at ``query_index``). No projection biases.

    ``head_parameters`` names the per-head parameters and the dimension of their heads, which tensor parallelism
    splits (``objectives.scale``)."""

    head_parameters = {"content_bias": 0, "position_bias": 0, "segment_bias": 0, "segment_embed": 1}

    def __init__(self, hidden_size: int, num_heads: int, dropout: float, backend: str, segments: bool) -> None:
        super().__init__(hidden_size, num_heads, dropout, bias=False, backend=backend)
        d = hidden_size // num_heads
        self.r_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(num_heads, d))  # u (r_w_bias)
        self.position_bias = nn.Parameter(torch.zeros(num_heads, d))  # v (r_r_bias)
        self.segment_bias = nn.Parameter(torch.zeros(num_heads, d)) if segments else None  # b (r_s_bias)
        self.segment_embed = nn.Parameter(torch.zeros(2, num_heads, d)) if segments else None  # s+ / s-

    def forward(self, x: Tensor, attention: LayerAttention = EVERY_POSITION,  # noqa: D102
                query: Tensor | None = None) -> Tensor:
        """``attention.mask`` ``[B|1, 1, Q, K]`` (True = may attend) over the keys ``[memory; x]``,
        ``attention.relative`` the stack's ``XLRelative``. ``attention.query_index`` ``[B, N]``: outputs only for these
        positions, from ``query`` (XLNet's query stream) when given, else from ``x``; a mask with N rows is taken as
        one row per query already (both streams in one call, see ``XLStack``)."""
        relative, memory, query_index, mask = attention.relative, attention.memory, attention.query_index, attention.mask
        if relative is None:
            raise ValueError("relative attention needs relative=XLRelative(...)")
        if attention.kv is not None or attention.rope is not None or attention.position_bias is not None \
                or attention.segments is not None or attention.unpadding is not None:
            raise ValueError("relative attention takes no kv, rope, position_bias, segments or unpadding")
        h = self.hidden_size
        keys = x if memory is None else torch.cat([memory.to(x.dtype), x], dim=1)
        source = query if query is not None else take_rows(x, query_index) if query_index is not None else x
        if self.sliceable:
            w = self.qkv_proj.weight
            q, kv = F.linear(source, w[:h]), F.linear(keys, w[h:])
        else:  # split by tensor parallelism: whole projections of this rank's heads, through the module, once
            projected = self.qkv_proj(keys)  # x's rows are the last of the keys
            own = projected[:, projected.shape[1] - x.shape[1]:, :h]
            q = self.qkv_proj(query)[..., :h] if query is not None else (
                take_rows(own, query_index) if query_index is not None else own)
            kv = projected[..., h:]
        q = self._heads(q)
        k, v = (self._heads(t) for t in kv.split(h, dim=-1))
        u, v_bias, s_bias, s_embed = (local_heads(p) for p in (self.content_bias, self.position_bias,
                                                                self.segment_bias, self.segment_embed))
        b, heads, n, _ = q.shape
        r = self.r_proj(relative.table.to(x.dtype)).unflatten(-1, (heads, self.head_dim))
        r = r.permute(0, 2, 1, 3) if r.dim() == 4 else r.transpose(0, 1)[None]  # [B|1, heads, R, d]
        index = relative.index[None] if query_index is None else take_rows(relative.index.expand(b, -1, -1), query_index)
        scores = torch.matmul(q + v_bias[:, None].to(q.dtype), r.transpose(-1, -2))  # [B, heads, n, R]
        bias = scores.gather(-1, index[:, None].expand(b, heads, n, index.shape[-1]))
        if s_embed is not None and relative.different_segment is not None:
            seg = torch.einsum("bhnd,shd->bhns", q + s_bias[:, None].to(q.dtype), s_embed.to(q.dtype))
            diff = relative.different_segment
            diff = (diff if query_index is None else take_rows(diff, query_index))[:, None]
            bias = bias + torch.where(diff, seg[..., 1:], seg[..., :1])
        if query_index is not None and mask is not None and mask.shape[-2] != n:  # else: already one row per query
            mask = take_query_rows(mask, query_index)
        out = self.attend(q + u[:, None].to(q.dtype), k, v, mask, attention.is_causal and mask is None,
                          bias * self.scale)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, h))
