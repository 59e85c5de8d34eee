"""Position information: sinusoidal tables, rotary embeddings (RoPE) and T5 relative position buckets.

Learned absolute positions are a plain ``nn.Embedding`` in :mod:`plm_lightning.nn.embeddings`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """Vaswani et al. 2017, sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(num_positions, dim)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)[:, : dim // 2]
    return table


class RotaryEmbedding(nn.Module):
    """RoPE, Su et al. 2021 (RoFormer), eq. 34: rotate each pair of query/key channels by ``pos * theta_i``.

    Uses the "rotate half" channel layout of GPT-NeoX / LLaMA / ModernBERT.
    """

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``positions`` ``[L]`` or ``[B, L]`` to (cos, sin), each ``[(B,) L, head_dim]``."""
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``[B, H, L, D]`` by the angles in cos/sin (``[L, D]`` or ``[B, L, D]``)."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos.to(x.dtype)) + (rotated * sin.to(x.dtype))


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5 relative position buckets, Raffel et al. 2020 sec. 2.1: exact for small offsets, log-spaced up to
    ``max_distance``; bidirectional stacks spend half the buckets on each direction."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_bucket = max_exact + (
        torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    log_bucket = torch.clamp(log_bucket, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, log_bucket)


class RelativePositionBias(nn.Module):
    """Learned scalar bias per (bucket, head), added to attention logits (T5); computed once per stack."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
        super().__init__()
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.embedding = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int, device: torch.device | None = None,
                query_offset: int = 0) -> Tensor:
        """``[1, H, Lq, Lk]``; ``query_offset``: the queries' first position (the cached length when decoding)."""
        q = torch.arange(query_offset, query_offset + query_length, device=device)[:, None]
        k = torch.arange(key_length, device=device)[None, :]
        buckets = relative_position_bucket(k - q, self.bidirectional, self.num_buckets, self.max_distance)
        return self.embedding(buckets).permute(2, 0, 1)[None]  # [1, H, Lq, Lk]
