"""DeBERTa's disentangled attention (He et al. 2021, sec. 3.1, eqs. 2-4) and its v2 options.

A token is a content vector H_i plus, for every pair, a relative position delta(i, j). The attention score adds to
content-to-content the content-to-position and position-to-content terms, each over sqrt(3d) (eq. 4):

    A_ij = Q^c_i K^c_j + Q^c_i K^r_{delta(i,j)} + K^c_j Q^r_{delta(j,i)}

with Q^r = P W_q,r and K^r = P W_k,r projections of a relative embedding table P shared by all layers (v2's
``share_attention_key``: W_q,r = W_q and W_k,r = W_k). Distances are clipped to [0, 2k) around k; DeBERTa-v2/v3
bucket them logarithmically beyond k/2 (``relative_position_buckets``). The table rows follow the reference code
(and transformers' ``DebertaV2Model``), so weights transfer exactly: both terms read row clip(i - j + k), c2p through
the query, p2c through the key.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.attention import MultiHeadAttention, take_query_rows, take_rows
from plm_lightning.nn.dropout import Dropout
from plm_lightning.nn.layer_attention import EVERY_POSITION, LayerAttention


def log_bucket_position(relative: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """DeBERTa-v2 log buckets: distances inside (-k/2, k/2) kept, longer ones mapped logarithmically up to
    ``max_position`` (an odd function of the distance)."""
    sign = torch.sign(relative)
    mid = bucket_size // 2
    inside = (relative < mid) & (relative > -mid)
    abs_pos = torch.where(inside, torch.tensor(mid - 1).type_as(relative), relative.abs())
    log_pos = torch.ceil(torch.log(abs_pos / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative.type_as(log_pos), log_pos * sign).long()


def relative_positions(length: int, bucket_size: int, max_position: int, device: torch.device | None = None) -> Tensor:
    """``[L, L]`` relative positions i - j (log-bucketed when ``bucket_size > 0``)."""
    ids = torch.arange(length, device=device)
    relative = ids[:, None] - ids[None, :]
    if bucket_size > 0 and max_position > 0:
        relative = log_bucket_position(relative, bucket_size, max_position)
    return relative


class DisentangledSelfAttention(MultiHeadAttention):
    """Self-attention with DeBERTa's content-to-position and position-to-content terms as an additive bias, so the
    same kernels (eager / SDPA) run it. ``forward`` takes ``relative`` = (normed relative embedding table P
    ``[2k, H]``, relative positions ``[L, L]``)."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float, bias: bool, backend: str,
                 span: int, share_key: bool, position_dropout: float) -> None:
        super().__init__(hidden_size, num_heads, dropout, bias, backend,
                         scale=1.0 / math.sqrt(3 * (hidden_size // num_heads)))
        self.span, self.share_key = span, share_key
        self.position_dropout = Dropout(position_dropout)
        if not share_key:
            self.pos_key_proj = nn.Linear(hidden_size, hidden_size, bias=True)
            self.pos_query_proj = nn.Linear(hidden_size, hidden_size, bias=True)

    def _position_projections(self, table: Tensor) -> tuple[Tensor, Tensor]:
        """(K^r, Q^r), each ``[heads, 2k, d]``."""
        h = self.hidden_size
        if self.share_key and self.sliceable:
            w, b = self.qkv_proj.weight, self.qkv_proj.bias
            q_r = F.linear(table, w[:h], None if b is None else b[:h])
            k_r = F.linear(table, w[h:2 * h], None if b is None else b[h:2 * h])
        elif self.share_key:  # split by tensor parallelism: this rank's heads' rows, through the module
            q_r, k_r, _ = self.qkv_proj(table).split(h, dim=-1)
        else:
            q_r, k_r = self.pos_query_proj(table), self.pos_key_proj(table)
        split = lambda t: t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(0, 1)  # noqa: E731
        return split(k_r), split(q_r)

    def relative_bias(self, q: Tensor, k: Tensor, table: Tensor, positions: Tensor,
                      query_index: Tensor | None = None) -> Tensor:
        """c2p + p2c, already over sqrt(3d), for queries ``q`` ``[B, heads, Lq, d]`` (at ``query_index`` ``[B, Lq]``
        when they are a subset) and keys ``k`` ``[B, heads, L, d]``; ``positions`` ``[L, L]`` relative positions."""
        span = self.span
        k_r, q_r = self._position_projections(self.position_dropout(table[: 2 * span]))
        b, heads, lq, _ = q.shape
        length = k.shape[2]
        rows = positions[None] if query_index is None else take_rows(positions.expand(b, length, length), query_index)
        index = torch.clamp(rows + span, 0, 2 * span - 1)[:, None]  # delta(i, j)
        c2p = torch.matmul(q, k_r.transpose(-1, -2))  # [B, h, Lq, 2k]: Q^c_i . K^r_m
        c2p = c2p.gather(-1, index.expand(b, heads, lq, length))
        p2c_index = torch.clamp(-positions + span, 0, 2 * span - 1)
        p2c = torch.matmul(k, q_r.transpose(-1, -2))  # [B, h, L(j), 2k]: K^c_j . Q^r_m
        p2c = p2c.gather(-1, p2c_index.expand(b, heads, length, length)).transpose(-1, -2)  # [B, h, L(i), L(j)]
        if query_index is not None:
            p2c = take_query_rows(p2c, query_index)
        return (c2p + p2c) * self.scale

    def forward(self, x: Tensor, attention: LayerAttention = EVERY_POSITION,  # noqa: D102
                query: Tensor | None = None) -> Tensor:
        """``attention.relative``: the stack's (relative table, positions). ``attention.query_index`` ``[B, K]``:
        outputs only for these positions. ``query``: a separate query stream (DeBERTa's Enhanced Mask Decoder) at
        ``query_index`` (or at every position); keys and values always come from ``x``."""
        a = attention
        if a.relative is None:
            raise ValueError("disentangled attention needs relative=(embedding table, positions)")
        if a.kv is not None or a.rope is not None or a.segments is not None or a.unpadding is not None:
            raise ValueError("disentangled attention takes no kv, rope, segments or unpadding")
        h = self.hidden_size
        q, k, v = (self._heads(t) for t in self.project(x, a.query_index, query))
        bias = self.relative_bias(q, k, *a.relative, query_index=a.query_index)
        mask, position_bias = a.mask, a.position_bias
        if a.query_index is not None:
            mask, position_bias = take_query_rows(mask, a.query_index), take_query_rows(position_bias, a.query_index)
        if position_bias is not None:
            bias = bias + position_bias
        out = self.attend(q, k, v, mask, a.is_causal, bias)
        bsz, _, n, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(bsz, n, h))


class ConvLayer(nn.Module):
    """DeBERTa-v2's convolution beside the first layer: ``LayerNorm(h_1 + act(conv1d(h_0)))`` over the embedding
    output h_0 (pads zeroed), to learn local n-gram dependencies (He et al. 2021, the v2 release notes)."""

    def __init__(self, hidden_size: int, kernel_size: int, norm: nn.Module, dropout: float,
                 activation: str = "gelu") -> None:
        super().__init__()
        self.conv = nn.Conv1d(hidden_size, hidden_size, kernel_size, padding=(kernel_size - 1) // 2)
        self.norm, self.dropout = norm, Dropout(dropout)
        self.act = {"gelu": F.gelu, "tanh": torch.tanh, "relu": F.relu}[activation]

    def forward(self, embedded: Tensor, layer_out: Tensor, attention_mask: Tensor | None) -> Tensor:
        if attention_mask is not None:
            embedded = embedded * attention_mask[..., None].to(embedded.dtype)
        out = self.conv(embedded.transpose(1, 2)).transpose(1, 2)
        if attention_mask is not None:
            out = out * attention_mask[..., None].to(out.dtype)
        return self.norm(layer_out + self.act(self.dropout(out)))
