"""Dropout (Srivastava et al. 2014) with a cheaper mask on CPU.

PyTorch's CPU dropout draws one ``bernoulli_`` sample per element, and even ``uniform_().ge_(p)`` draws a 32-bit
random number per element; a training step of a 12-layer model at dropout 0.1 spends ~5% of its time there. Here one
63-bit draw (``random_()`` on an int64 tensor, uniform on ``[0, 2^63)``) decides four elements: its three low 16-bit
quarters are uniform on 2^16 values and its top quarter on 2^15, and each is compared with ``p`` scaled to its range,
so an element is dropped with probability ``p`` rounded to a multiple of 2^-16 or 2^-15 (0.1 -> 0.100006).
Kept values are scaled by ``1 / (1 - p)`` as in inverted dropout, and autograd saves the boolean mask (one byte an
element, not four). Other devices, big-endian machines and ``p >= 1`` keep ``F.dropout``.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LITTLE_ENDIAN = sys.byteorder == "little"


def keep_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> Tensor:
    """A boolean tensor of ``shape``, each element True with probability ``1 - p`` (to within 2^-16),
    independently, from the default generator: four elements per 63-bit draw (module docstring). An opaque operator
    to ``torch.compile`` (its int64 -> int16 view would break the graph)."""
    return _keep_mask(list(shape), p, torch.device(device))


@torch.library.custom_op("plm_lightning::keep_mask", mutates_args=())
def _keep_mask(shape: list[int], p: float, device: torch.device) -> Tensor:
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    chunks = words.view(torch.int16).view(-1, 4)  # little-endian: chunk 3 holds the word's top 15 bits
    full, top = round(p * 65536), round(p * 32768)  # drop the lowest `full` of 2^16 values (`top` of 2^15)
    thresholds = torch.tensor([full - 32768] * 3 + [top], dtype=torch.int16, device=device)
    return chunks.ge(thresholds).view(-1)[:n].view(shape)


@_keep_mask.register_fake
def _(shape: list[int], p: float, device: torch.device) -> Tensor:
    return torch.empty(shape, dtype=torch.bool, device=device)


class _MaskedScale(torch.autograd.Function):
    """``x * keep / (1 - p)`` saving the boolean ``keep`` for the backward pass."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:  # noqa: ANN001
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def _cpu_mask(x: Tensor, p: float) -> bool:
    """Whether :func:`keep_mask` draws the mask (CPU, little-endian, 0 < p < 1)."""
    return x.device.type == "cpu" and 0.0 < p < 1.0 and _LITTLE_ENDIAN


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if not _cpu_mask(x, p):
        return F.dropout(x, p, training)
    return _MaskedScale.apply(x, keep_mask(x.shape, p), 1.0 / (1.0 - p))


def relu_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``dropout(relu(x))`` (the inner activation of T5's and the Transformer's feed-forward layer). On CPU while
    training it is one masked scale: the keep mask is and-ed with ``x > 0``, whose product is also ``relu``'s
    gradient, so neither the ReLU output nor its backward buffer is made."""
    if not training or not _cpu_mask(x, p):
        return dropout(F.relu(x), p, training)
    keep = keep_mask(x.shape, p).logical_and_(x.detach() > 0)
    return _MaskedScale.apply(x, keep, 1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
