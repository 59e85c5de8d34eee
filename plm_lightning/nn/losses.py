"""Fused linear + cross-entropy: the LM loss ``CE(h W^T + b, y)`` computed chunk by chunk over the rows, never holding
the ``[N, V]`` logits (nor their log-softmax and gradient, each as large) at once.

The idea of Liger Kernel's ``FusedLinearCrossEntropy`` (Hsu et al. 2024, sec. 3.4) and of Cut Cross-Entropy (Wijmans
et al. 2025), here in plain PyTorch for every device: each chunk's logits are made, reduced to per-row losses, turned
in place into ``d loss / d logits = (softmax - onehot) / N`` and multiplied into the gradients of ``h``, ``W`` and
``b`` right away, in the forward pass; the backward pass only scales them by the incoming gradient. The FLOPs are those
of the unfused head (one matmul forward, two backward); what goes is the memory (a 50k vocabulary over 8 x 1024
tokens: 1.6 GB of fp32 logits, again for their log-softmax and again for its gradient) and the time spent writing and
reading it. Argmax predictions and per-row losses come out as by-products for the metrics.

On CPU a chunk's logits are further made in blocks of the vocabulary, each its own ``[rows, block]`` matrix, and their
softmax is assembled from the blocks' maxima and sums (online softmax); see ``VOCAB_BLOCK``.

On CUDA the head's matrix is padded with zero rows to a multiple of 128 for its GEMMs (``PAD_VOCAB_MULTIPLE``): the
padded logits are set to -inf before the softmax, so they are never predicted and carry no probability, and the
loss and gradients are those of the unpadded head; the parameters themselves stay at the real vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

CHUNK_ELEMENTS = {"cpu": 1 << 26, "cuda": 1 << 28}
"""Most logits per chunk by device: 64M floats (256 MB) on CPU, where every chunk adds its rank-``rows`` update to the
whole fp32 ``[V, H]`` weight gradient, a pass over memory that small chunks repeat (BART-base's 50k head over 1024
tokens, forward and backward on 2 threads: 4.29 s with 8M-float chunks of 166 rows, 4.03 s with 32M, 4.16 s
unfused; with vocabulary blocks, 64M chunks took 0.97-0.98 of the time of 32M); 256M (1 GiB) on CUDA, where each chunk
costs a dozen kernel launches and a pass over the weight gradient, so few large chunks are faster (a 50k vocabulary
over 16k tokens: 4 chunks, not 98)."""

VOCAB_BLOCK = {"cpu": 2048}
"""Most vocabulary columns per logits matrix by device (the whole vocabulary where absent). On CPU (2 threads)
a ``[rows, 50265]`` logits GEMM ``h @ W^T`` ran at 113-125 GFLOP/s for 667 to 1335 rows, and at 176-181
GFLOP/s made as ``[rows, 2048]`` matrices (the same GEMM written into column slices of one ``[rows, V]`` buffer stayed
at 120: it is the long output rows, not the GEMM's shape); the two backward GEMMs run at 190-200 either way. The
whole head of BART-base over 1024 tokens took 0.86-0.92 of the time of one whole-vocabulary chunk; a 32k vocabulary,
whose whole-width GEMM is not slow (164 GFLOP/s), took 1.02 of it; a whole BART-base training step, 0.92. On CUDA one
kernel per matrix is best."""


PAD_VOCAB_MULTIPLE = {"cuda": 128}
"""Vocabulary rows the head's matrix is padded to a multiple of, by device, where absent none. GPT-2's 50257 is odd:
cuBLAS then runs the ``[tokens, 50257]`` logits GEMM and its two backward GEMMs on slow unaligned kernels (seen in
the H200 profile of issue 41; nanoGPT pads to 50304 for the same reason). The padded matrix is made in one copy, cast
on the way, where autocast makes its bf16 copy anyway (GPT-2's eager step on an H200: 81.5 ms unpadded, 55.1 ms
padded). CPU GEMMs gain nothing from it."""


def padded_size(vocab: int, multiple: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple``."""
    return -(-vocab // multiple) * multiple


def pad_multiple_for(device: torch.device, multiple: int | None) -> int:
    """The padding multiple to use: ``multiple`` when given, else the device's default (``PAD_VOCAB_MULTIPLE``)."""
    if multiple is not None:
        if multiple < 1:
            raise ValueError(f"pad_vocab_multiple={multiple} must be >= 1 (1: no padding)")
        return multiple
    return PAD_VOCAB_MULTIPLE.get(device.type, 1)


def padded_rows(weight: Tensor, rows: int, dtype: torch.dtype | None = None) -> Tensor:
    """``weight`` ``[V, ...]`` in ``dtype`` with zero rows appended up to ``rows`` (differentiable; ``weight`` itself
    when nothing is to pad and no cast asked)."""
    dtype = dtype or weight.dtype
    if rows == weight.shape[0]:
        return weight.to(dtype)
    out = weight.new_zeros((rows, *weight.shape[1:]), dtype=dtype)
    out[: weight.shape[0]] = weight  # one copy, cast on the way (autograd passes the gradient's rows back)
    return out


class LMLoss(NamedTuple):
    loss: Tensor
    """Mean cross-entropy over the rows (differentiable)."""
    predictions: Tensor
    """Argmax of each row's logits (no gradient)."""
    token_losses: Tensor
    """Each row's cross-entropy, fp32 (no gradient)."""


def _softmax_blocks(h: Tensor, w: Tensor, bias: Tensor | None, targets: Tensor, blocks: list[tuple[int, int]],
                    vocab: int) -> tuple[list[Tensor], Tensor, Tensor, Tensor, Tensor]:
    """One row chunk's logits ``h W^T + b``, made one vocabulary block at a time: each block turned in place into
    ``exp(logits - block max)`` and the block maxima and sums combined into the log-sum-exp (the online softmax of
    Milakov & Gimelshein 2018, eq. 4, over blocks). Returns the blocks, each row's factor per block that turns them
    into the softmax (``[rows, blocks]``), the log-sum-exp, the argmax and the target logit. Columns from ``vocab``
    on are padding (``w``'s zero rows): they are set to -inf, so they take no probability and are never the argmax."""
    exps, maxima, sums, argmaxes, target = [], [], [], [], torch.zeros(len(targets), device=h.device)
    for s, e in blocks:
        logits = (h @ w[s:e].t()).float()
        if bias is not None and s < vocab:
            logits[:, :min(e, vocab) - s] += bias[s:min(e, vocab)].float()
        if e > vocab:
            logits[:, max(vocab - s, 0):] = float("-inf")
        best, argmax = logits.max(-1)  # one pass for the max and the argmax
        inside = (targets >= s) & (targets < e)  # masks, not indices: no device sync on CUDA
        target = torch.where(inside, logits.gather(1, (targets - s).clamp(0, e - s - 1)[:, None]).squeeze(1), target)
        exps.append(logits.sub_(best[:, None]).exp_())
        maxima.append(best)
        sums.append(exps[-1].sum(-1))
        argmaxes.append(argmax + s)
    block_max = torch.stack(maxima, 1)
    top, which = block_max.max(1)
    factors = (block_max - top[:, None]).exp_()  # exp(block max - row max)
    total = (torch.stack(sums, 1) * factors).sum(1)
    factors /= total[:, None]
    return exps, factors, top + total.log(), torch.stack(argmaxes, 1).gather(1, which[:, None]).squeeze(1), target


def _write_or_add(out: Tensor, a: Tensor, b: Tensor, write: bool) -> None:
    """``out = a @ b`` if ``write`` else ``out += a @ b``; in ``out``'s fp32 when ``a`` and ``b`` are not."""
    if a.dtype == out.dtype:
        torch.mm(a, b, out=out) if write else out.addmm_(a, b)
    elif write:
        out.copy_(a @ b)
    else:
        out += a @ b


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,  # noqa: ANN001
                rows: int, block: int, grads: bool, dtype: torch.dtype, padded: int) -> tuple[Tensor, Tensor, Tensor]:
        n, vocab = hidden.shape[0], weight.shape[0]
        token_losses = torch.empty(n, dtype=torch.float32, device=hidden.device)
        predictions = torch.empty(n, dtype=torch.long, device=hidden.device)
        w = padded_rows(weight.detach(), padded, dtype)
        blocks = [(s, min(s + block, vocab)) for s in range(0, vocab, block)]
        blocks[-1] = (blocks[-1][0], padded)  # the padding joins the last block: every block has a real column
        grad_hidden = torch.empty_like(hidden) if grads else None
        grad_weight = torch.empty((padded, weight.shape[1]), dtype=torch.float32, device=weight.device) if grads else None
        grad_bias = torch.zeros(padded, dtype=torch.float32, device=weight.device) if grads and bias is not None \
            else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, rows):
                h, t = hidden[start:start + rows].to(dtype), targets[start:start + rows]
                exps, factors, lse, predictions[start:start + rows], target = _softmax_blocks(h, w, bias, t, blocks, vocab)
                token_losses[start:start + rows] = lse - target
                if not grads:
                    continue
                direct = hidden.dtype == torch.float32
                grad_h = grad_hidden[start:start + rows] if direct else torch.empty(h.shape, device=h.device)
                for i, ((s, e), probs) in enumerate(zip(blocks, exps)):
                    probs.mul_(factors[:, i:i + 1] / n)  # d loss / d logits, in place: (softmax - onehot) / n
                    inside = ((t >= s) & (t < e)).float()
                    probs.scatter_add_(1, (t - s).clamp(0, e - s - 1)[:, None], -inside[:, None] / n)
                    if grad_bias is not None:
                        grad_bias[s:e] += probs.sum(0)
                    g = probs.to(dtype)
                    _write_or_add(grad_h, g, w[s:e], i == 0)
                    _write_or_add(grad_weight[s:e], g.t(), h, start == 0)  # the first chunk writes: no zero-fill
                if not direct:
                    grad_hidden[start:start + rows] = grad_h.to(hidden.dtype)
        if grad_weight is not None and n == 0:
            grad_weight.zero_()
        if grads and padded != vocab:  # the padding rows' gradients are zero (their softmax is): drop them
            grad_weight = grad_weight[:vocab]
            grad_bias = None if grad_bias is None else grad_bias[:vocab]
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
                None if grad_bias is None else grad_bias.to(ctx.bias_dtype), None, None, None, None, None, None)


def linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                         chunk_elements: int | None = None, vocab_block: int | None = None,
                         pad_vocab_multiple: int | None = None) -> LMLoss:
    """Mean ``CE(hidden W^T + bias, targets)`` over the rows of ``hidden`` ``[N, H]``, chunked (module docstring).

    Under autocast the matmuls run in the autocast dtype and the softmax in fp32, as autocast would run the unfused
    head; gradients accumulate in fp32. ``pad_vocab_multiple``: the GEMMs' vocabulary is padded to a multiple of it
    (None: the device's default, ``PAD_VOCAB_MULTIPLE``; 1: none), with the same loss and gradients.
    """
    grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad
                                         or (bias is not None and bias.requires_grad))
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    chunk_elements = chunk_elements or CHUNK_ELEMENTS.get(device, CHUNK_ELEMENTS["cuda"])
    rows = max(1, chunk_elements // weight.shape[0])
    padded = padded_size(weight.shape[0], pad_multiple_for(hidden.device, pad_vocab_multiple))
    block = vocab_block or VOCAB_BLOCK.get(device) or padded
    loss, predictions, token_losses = _LinearCrossEntropy.apply(hidden, weight, bias, targets, rows, block, grads,
                                                                dtype, padded)
    return LMLoss(loss, predictions, token_losses)
