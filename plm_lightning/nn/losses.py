"""Fused linear + cross-entropy: the LM loss ``CE(h W^T + b, y)`` computed chunk by chunk over the rows, never holding
the ``[N, V]`` logits (nor their log-softmax and gradient, each as large) at once.

The idea of Liger Kernel's ``FusedLinearCrossEntropy`` (Hsu et al. 2024, sec. 3.4) and of Cut Cross-Entropy (Wijmans
et al. 2025), here in plain PyTorch for every device: each chunk's logits are made, reduced to per-row losses, turned
in place into ``d loss / d logits = (softmax - onehot) / N`` and multiplied into the gradients of ``h``, ``W`` and
``b`` right away, in the forward pass; the backward pass only scales them by the incoming gradient. The FLOPs are those
of the unfused head (one matmul forward, two backward); what goes is the memory (a 50k vocabulary over 8 x 1024
tokens: 1.6 GB of fp32 logits, again for their log-softmax and again for its gradient) and the time spent writing and
reading it. Argmax predictions and per-row losses come out as by-products for the metrics.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

CHUNK_ELEMENTS = {"cpu": 1 << 25, "cuda": 1 << 28}
"""Most logits per chunk by device: 32M floats (128 MB) on CPU, where every chunk adds its rank-``rows`` update to the
whole fp32 ``[V, H]`` weight gradient, a pass over memory that small chunks repeat (BART-base's 50k head over 1024
tokens, forward and backward on 2 threads: 4.29 s with 8M-float chunks of 166 rows, 4.03 s with 32M, 4.16 s
unfused); 256M (1 GiB) on CUDA, where each chunk costs a dozen kernel launches and a pass over the weight gradient,
so few large chunks are faster (a 50k vocabulary over 16k tokens: 4 chunks, not 98)."""


class LMLoss(NamedTuple):
    loss: Tensor
    """Mean cross-entropy over the rows (differentiable)."""
    predictions: Tensor
    """Argmax of each row's logits (no gradient)."""
    token_losses: Tensor
    """Each row's cross-entropy, fp32 (no gradient)."""


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,  # noqa: ANN001
                rows: int, grads: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        n = hidden.shape[0]
        token_losses = torch.empty(n, dtype=torch.float32, device=hidden.device)
        predictions = torch.empty(n, dtype=torch.long, device=hidden.device)
        w = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden) if grads else None
        grad_weight = torch.empty(weight.shape, dtype=torch.float32, device=weight.device) if grads else None
        grad_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if grads and bias is not None \
            else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, rows):
                h, t = hidden[start:start + rows].to(dtype), targets[start:start + rows]
                logits = (h @ w.t()).float()
                if bias is not None:
                    logits += bias.float()
                # one pass for the max and the argmax, then exp(logits - max) in place: lse = max + log(sum)
                best, predictions[start:start + rows] = logits.max(-1)
                target = logits.gather(1, t[:, None]).squeeze(1)
                probs = logits.sub_(best[:, None]).exp_()
                total = probs.sum(-1)
                token_losses[start:start + rows] = best + total.log() - target
                if not grads:
                    continue
                probs.mul_((1.0 / (total * n))[:, None])  # d loss / d logits, in place: (softmax - onehot) / n
                probs[torch.arange(len(t), device=t.device), t] -= 1.0 / n
                if grad_bias is not None:
                    grad_bias += probs.sum(0)
                g = probs.to(dtype)
                grad_hidden[start:start + rows] = (g @ w).to(hidden.dtype)
                if start == 0:  # the first chunk writes the gradient (no zero-fill of a [V, H] buffer)
                    torch.mm(g.t(), h, out=grad_weight) if dtype == torch.float32 else grad_weight.copy_(g.t() @ h)
                elif dtype == torch.float32:
                    grad_weight.addmm_(g.t(), h)
                else:
                    grad_weight += (g.t() @ h).float()
        if grad_weight is not None and n == 0:
            grad_weight.zero_()
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.mark_non_differentiable(predictions, token_losses)
        ctx.weight_dtype, ctx.bias_dtype = weight.dtype, None if bias is None else bias.dtype
        return token_losses.mean(), predictions, token_losses

    @staticmethod
    def backward(ctx, grad_loss: Tensor, *_: Tensor):  # noqa: ANN001, ANN205
        if getattr(ctx, "consumed", False):
            raise RuntimeError("linear_cross_entropy's gradients were scaled in place by an earlier backward pass; "
                               "it can be differentiated once per forward (retain_graph=True is not supported)")
        ctx.consumed = True
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        if grad_hidden is None:
            raise RuntimeError("linear_cross_entropy ran without gradients (under no_grad or on inputs that did not "
                               "require them) and cannot be differentiated")
        # Scaled in place: the buffers are this forward's own, and a fresh [V, H] weight gradient costs as much again
        # in page faults as the scaling itself (a 32k x 768 head on CPU: ~0.2 s a step).
        grad_hidden.mul_(grad_loss.to(grad_hidden.dtype))
        grad_weight.mul_(grad_loss)
        if grad_bias is not None:
            grad_bias.mul_(grad_loss)
        return (grad_hidden, grad_weight.to(ctx.weight_dtype),
                None if grad_bias is None else grad_bias.to(ctx.bias_dtype), None, None, None, None)


def linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                         chunk_elements: int | None = None) -> LMLoss:
    """Mean ``CE(hidden W^T + bias, targets)`` over the rows of ``hidden`` ``[N, H]``, chunked (module docstring).

    Under autocast the matmuls run in the autocast dtype and the softmax in fp32, as autocast would run the unfused
    head; gradients accumulate in fp32.
    """
    grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad
                                         or (bias is not None and bias.requires_grad))
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    chunk_elements = chunk_elements or CHUNK_ELEMENTS.get(device, CHUNK_ELEMENTS["cuda"])
    rows = max(1, chunk_elements // weight.shape[0])
    loss, predictions, token_losses = _LinearCrossEntropy.apply(hidden, weight, bias, targets, rows, grads, dtype)
    return LMLoss(loss, predictions, token_losses)
