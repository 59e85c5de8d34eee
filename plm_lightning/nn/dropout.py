"""Dropout (Srivastava et al. 2014) with a faster mask on CPU.

PyTorch's CPU dropout draws its mask with ``bernoulli_``, about twice as slow as drawing uniforms and comparing them
(``uniform_().ge_(p)``); a training step of a 12-layer model at dropout 0.1 spends ~5% of its time there. The mask has
the same distribution (keep with probability 1 - p, kept values scaled by 1 / (1 - p)); autograd saves only the
scaled mask, as ``F.dropout`` does. Other devices keep ``F.dropout``'s fused kernel.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    keep = x.detach().new_empty(x.shape).uniform_().ge_(p).mul_(1.0 / (1.0 - p))
    return x * keep


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
