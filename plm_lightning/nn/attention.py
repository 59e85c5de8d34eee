"""Multi-head attention (self and cross) with interchangeable kernels: eager, PyTorch SDPA, xformers, FlexAttention
(``nn.flex``: an additive bias and the masks inside the fused kernel).

Scaled dot-product attention, Vaswani et al. 2017, eq. 1: softmax(Q K^T / sqrt(d_k) + bias) V.
The eager kernel is the reference the others are tested against.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.dropout import dropout
from plm_lightning.nn.layer_attention import EVERY_POSITION, KVCache, LayerAttention, LayerCache  # noqa: F401 (re-exported)
from plm_lightning.nn.masks import causal_mask, combine, to_additive
from plm_lightning.nn.positions import apply_rotary
from plm_lightning.nn.varlen import xformers_varlen_attention

BACKENDS = ("auto", "eager", "sdpa", "xformers", "flex")


@functools.cache
def xformers_available() -> bool:
    return importlib.util.find_spec("xformers") is not None


@functools.cache
def xformers_unusable_reason() -> str | None:
    """Why xformers cannot attend on this machine's GPU, or None when a tiny call of its kernel ran. An installed
    wheel built for another PyTorch/CUDA imports fine but has no kernels; the probe catches that once."""
    if not xformers_available():
        return "xformers is not installed (pip install 'plm-lightning[gpu]')"
    if not torch.cuda.is_available():
        return "xformers has no CPU kernels"
    try:
        import xformers.ops as xops

        q = torch.zeros(1, 8, 1, 16, device="cuda", dtype=torch.float16)
        xops.memory_efficient_attention(q, q, q)
    except Exception as error:  # noqa: BLE001 - any failure means: not usable here
        return f"xformers' kernels do not run here ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
    return None


@functools.cache
def _log_fallback_once(reason: str) -> None:
    logging.getLogger(__name__).warning("attention_backend=auto uses SDPA on CUDA: %s", reason)


_KERNELS_LOGGED: set[tuple] = set()


def sdpa_kernel_choice(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool
                       ) -> tuple[str, str]:
    """The kernel PyTorch's SDPA dispatches this call to on CUDA, in its own order (flash, then memory-efficient,
    then math; cuDNN's only when asked for first), and why the faster ones were passed over (PyTorch's own reasons,
    from its probes' debug warnings)."""
    import warnings

    cuda = torch.backends.cuda
    params = cuda.SDPAParams(q, k, v, mask, dropout_p, is_causal, False)
    reasons = []
    for name, enabled, probe in (("flash", cuda.flash_sdp_enabled(), cuda.can_use_flash_attention),
                                 ("memory-efficient", cuda.mem_efficient_sdp_enabled(), cuda.can_use_efficient_attention)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if enabled and probe(params, True):
                return name, "; ".join(reasons) or "it serves this call"
        said = "; ".join(str(w.message).splitlines()[0] for w in caught) or ("disabled" if not enabled else "refused")
        reasons.append(f"not {name}: {said}")
    return "math", "; ".join(reasons)


def log_kernel_once(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool) -> None:
    """Log, once per kind of call (mask or none, causal, dtype, head size, dropout), which CUDA kernel SDPA runs."""
    if q.device.type != "cuda" or torch.compiler.is_compiling():
        return
    key = (mask is None, is_causal, q.dtype, q.shape[-1], dropout_p > 0)
    if key in _KERNELS_LOGGED:
        return
    _KERNELS_LOGGED.add(key)
    try:
        kernel, why = sdpa_kernel_choice(q, k, v, mask, dropout_p, is_causal)
    except (AttributeError, RuntimeError, TypeError) as error:  # an older PyTorch without the probes
        kernel, why = "chosen by PyTorch", f"the probe failed: {error}"
    logging.getLogger(__name__).info("attention on CUDA (%s, %s, head size %d): SDPA's %s kernel, because %s",
                                     "causal" if is_causal else "masked" if mask is not None else "unmasked",
                                     str(q.dtype).removeprefix("torch."), q.shape[-1], kernel, why)


def resolve_backend(backend: str, device: torch.device) -> str:
    """``auto`` is xformers on CUDA when its kernels run here, else SDPA (on CUDA the reason is logged once). Asking
    for xformers where it cannot run is an error that says why."""
    if backend not in BACKENDS:
        raise ValueError(f"attention_backend={backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "auto":
        if device.type != "cuda":
            return "sdpa"
        reason = xformers_unusable_reason()
        if reason is not None:
            _log_fallback_once(reason)
        return "sdpa" if reason else "xformers"
    if backend == "xformers":
        if device.type != "cuda":
            raise RuntimeError(f"attention_backend='xformers' needs CUDA tensors (xformers has no {device.type} "
                               "kernels); use 'sdpa' or 'auto'")
        reason = xformers_unusable_reason()
        if reason is not None:
            raise RuntimeError(f"attention_backend='xformers' but {reason}; use 'sdpa' or 'auto'")
    return backend


def eager_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float) -> Tensor:
    """Reference kernel on ``[B, H, L, D]`` tensors; softmax in float32."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    probs = dropout(probs, dropout_p, dropout_p > 0)
    return torch.matmul(probs, v)


def xformers_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, is_causal: bool, dropout_p: float,
                       scale: float) -> Tensor:
    """xformers memory-efficient attention; takes ``[B, H, L, D]`` and returns the same layout."""
    import xformers.ops as xops

    attn_bias: object | None = None
    if bias is None and is_causal:
        attn_bias = xops.LowerTriangularMask()
    elif bias is not None:
        b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        # xformers wants the bias' last dimension padded to a multiple of 8 in memory
        padded = torch.empty(b, h, lq, (lk + 7) // 8 * 8, dtype=q.dtype, device=q.device)
        padded[..., :lk] = bias.expand(b, h, lq, lk)
        attn_bias = padded[..., :lk]
    out = xops.memory_efficient_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=attn_bias, p=dropout_p, scale=scale
    )
    return out.transpose(1, 2)


def take_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x`` ``[B, L, ...]`` at per-row positions ``index`` ``[B, K]`` -> ``[B, K, ...]``."""
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]


def take_query_rows(t: Tensor | None, index: Tensor) -> Tensor | None:
    """A mask or bias ``[B|1, H|1, Lq|1, Lk]`` restricted to the queries at ``index`` ``[B, K]``."""
    if t is None or t.shape[-2] == 1:
        return t
    t = t.expand(index.shape[0], *t.shape[1:])
    return t.gather(2, index[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1]))


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention. Self-attention projects q, k, v with one fused matmul (``qkv_proj``, the GPT-2
    ``c_attn`` layout); cross-attention projects q from the decoder and k, v (fused ``kv_proj``) from the encoder.

    ``mask`` is boolean (True = may attend), ``position_bias`` additive (T5), ``rope`` a (cos, sin) pair.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        backend: str = "auto",
        scale: float | None = None,
        cross_attention: bool = False,
        kv_size: int | None = None,
        upcast: bool = False,
    ) -> None:
        """``upcast``: scores, softmax and the weighted sum in float32 whatever the autocast dtype (GPT-2's
        ``reorder_and_upcast_attn``), the result cast back to the input's dtype."""
        super().__init__()
        self.upcast = upcast
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        self.dropout, self.backend = dropout, backend
        self.hidden_size, self.cross_attention = hidden_size, cross_attention
        self.sliceable = True
        """Whether the fused q/k/v weight may be sliced (False once tensor parallelism has split it)."""
        if cross_attention:
            self.q_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
            self.kv_proj = nn.Linear(hidden_size if kv_size is None else kv_size, 2 * hidden_size, bias=bias)
        else:
            self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=bias)

    def _cached(self, k: Tensor | None, v: Tensor | None, cache: KVCache | None) -> tuple[Tensor, Tensor]:
        """Self-attention appends the new keys/values to the cache; cross-attention's are computed once (``k`` and
        ``v`` None once cached)."""
        if cache is None:
            return k, v
        if k is None:
            return cache.key, cache.value
        if cache.key is not None and not self.cross_attention:
            k, v = torch.cat([cache.key, k], dim=2), torch.cat([cache.value, v], dim=2)
        cache.key, cache.value = k, v
        return k, v

    def project(self, x: Tensor, query_index: Tensor | None = None,
                query: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's q, k, v ``[B, *, H]``: k and v for every row of ``x``, q for every row, for the rows
        ``query_index`` ``[B, K]``, or for a separate ``query`` stream. For a subset, the fused weight's first third
        projects the queries alone, unless tensor parallelism has split the weight (``sliceable`` False): then every
        row is projected whole and the queries' kept."""
        h = self.hidden_size
        if query is None and query_index is None:
            return self.qkv_proj(x).split(h, dim=-1)
        if not self.sliceable:
            q, k, v = self.qkv_proj(x).split(h, dim=-1)
            q = take_rows(q, query_index) if query is None else self.qkv_proj(query)[..., :h]
            return q, k, v
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        q = F.linear(take_rows(x, query_index) if query is None else query, w[:h], None if b is None else b[:h])
        k, v = F.linear(x, w[h:], None if b is None else b[h:]).split(h, dim=-1)
        return q, k, v

    def _heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def forward(self, x: Tensor, attention: LayerAttention = EVERY_POSITION, query: Tensor | None = None) -> Tensor:
        """Attention of ``x`` ``[B, L, H]`` as ``attention`` (a :class:`LayerAttention`) says: which keys each query
        sees (its mask, causality, or the block-diagonal ``segments`` of a flat stream), how positions enter (rotary
        angles, an additive bias), the layout ``x`` is in (rows, the real tokens only, a stream), the queries to
        compute (``query_index``: ``[B, K, H]`` out), the cache of incremental decoding (``x`` holds the new
        positions, which see the cached ones too) and, for cross-attention, the encoder output ``kv``. ``query``: a
        separate query stream (the subclasses' two-stream attention)."""
        a = attention
        if query is not None:
            raise ValueError(f"{type(self).__name__} has no separate query stream")
        self._check(a)
        q, k, v = self._heads_of(x, a)
        if a.rope is not None:
            rope_q = a.rope
            if a.query_index is not None:
                rope_q = tuple(take_rows(t.expand(a.query_index.shape[0], *t.shape[-2:]), a.query_index) for t in a.rope)
            q, k = apply_rotary(q, *rope_q), apply_rotary(k, *a.rope)
        k, v = self._cached(k, v, a.cache)
        if a.segments is not None:
            out = xformers_varlen_attention(q, k, v, a.segments, self.dropout if self.training else 0.0, self.scale)
        else:
            mask, bias, is_causal = a.mask, a.position_bias, a.is_causal
            if a.query_index is not None:
                mask, bias = take_query_rows(mask, a.query_index), take_query_rows(bias, a.query_index)
            if a.cache is not None and is_causal and q.shape[2] == 1:
                is_causal = False  # one new query sees every cached key
            out = self.attend(q, k, v, mask, is_causal, bias)
        return self.o_proj(self._rows_of(out, x, a))

    def _check(self, a: LayerAttention) -> None:
        """Refuse what this module cannot compute as asked, rather than compute something else."""
        if self.cross_attention and a.kv is None and (a.cache is None or a.cache.key is None):
            raise ValueError("cross-attention needs kv (the encoder output)")
        if not self.cross_attention and a.kv is not None:
            raise ValueError("self-attention takes no kv; build the module with cross_attention=True")
        if a.segments is not None and (self.cross_attention or a.query_index is not None or a.cache is not None
                                       or a.position_bias is not None or self.upcast):
            raise ValueError("segments are for self-attention over every position, without cache, bias or "
                             "upcast_attention")
        if a.unpadding is not None and (self.cross_attention or a.query_index is not None):
            raise ValueError("unpadding is for self-attention over every position")
        if a.query_index is not None and a.is_causal:
            raise ValueError("query_index is for bidirectional attention; pass the causal mask in `mask`")

    def _heads_of(self, x: Tensor, a: LayerAttention) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """q, k, v ``[B, heads, *, head_dim]`` in the layout the kernel runs on: the flat stream ``[1, T]`` with
        segments, the re-padded rows of unpadded input, else ``x``'s rows (q at ``query_index``); k and v are None
        where the cache holds the encoder's already."""
        h = self.hidden_size
        if a.segments is not None:
            return tuple(self._heads(t) for t in self.qkv_proj(x.reshape(1, -1, x.shape[-1])).split(h, dim=-1))
        if a.unpadding is not None:
            return tuple(self._heads(t) for t in a.unpadding.pad(self.qkv_proj(x)).split(h, dim=-1))
        if self.cross_attention:
            q = self._heads(self.q_proj(x if a.query_index is None else take_rows(x, a.query_index)))
            if a.cache is not None and a.cache.key is not None:  # the encoder's keys, cached
                return q, None, None
            return q, *(self._heads(t) for t in self.kv_proj(a.kv).split(h, dim=-1))
        return tuple(self._heads(t) for t in self.project(x, a.query_index))

    def _rows_of(self, out: Tensor, x: Tensor, a: LayerAttention) -> Tensor:
        """The kernel's ``[B, heads, N, head_dim]`` back in ``x``'s layout, heads merged."""
        merged = out.transpose(1, 2).flatten(2)
        if a.segments is not None:
            return merged.reshape(*x.shape[:-1], self.hidden_size)
        if a.unpadding is not None:
            return a.unpadding.unpad(merged)
        return merged

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
               position_bias: Tensor | None) -> Tensor:
        """``softmax(q k^T * scale + bias) v`` by the configured kernel (in float32 when ``upcast``)."""
        if self.upcast and q.dtype != torch.float32:
            with torch.autocast(q.device.type, enabled=False):
                return self._attend(q.float(), k.float(), v.float(), mask, is_causal, position_bias).to(q.dtype)
        return self._attend(q, k, v, mask, is_causal, position_bias)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                position_bias: Tensor | None) -> Tensor:
        backend = resolve_backend(self.backend, q.device)
        dropout_p = self.dropout if self.training else 0.0
        if backend == "sdpa" and dropout_p > 0 and q.device.type == "cpu":
            # SDPA on CPU drops out through its math path (probabilities materialised, mask from bernoulli_); the
            # eager kernel does the same work with the faster mask of nn.dropout (about 1.5x on a 128-token layer)
            backend = "eager"
        if backend == "flex":
            return self._flex(q, k, v, mask, is_causal, position_bias, dropout_p)
        only_causal = is_causal and mask is None and position_bias is None and q.shape[2] == k.shape[2]
        if is_causal and not only_causal:
            mask = combine(mask, causal_mask(q.shape[2], q.device, k.shape[2]))
        if backend == "sdpa" and position_bias is None:
            log_kernel_once(q, k, v, mask, dropout_p, only_causal)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=only_causal, scale=self.scale
            )
        bias = to_additive(mask, q.dtype)
        if position_bias is not None:
            bias = position_bias.to(q.dtype) if bias is None else bias + position_bias.to(q.dtype)
        if backend == "sdpa":
            log_kernel_once(q, k, v, bias, dropout_p, False)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=self.scale)
        if backend == "xformers":
            return xformers_attention(q, k, v, bias, only_causal, dropout_p, self.scale)
        if only_causal:
            bias = to_additive(causal_mask(q.shape[2], q.device, k.shape[2]), q.dtype)
        return eager_attention(q, k, v, bias, dropout_p, self.scale)

    def _flex(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
              position_bias: Tensor | None, dropout_p: float) -> Tensor:
        """``attention_backend: flex``: the bias and masks inside FlexAttention's kernel; what it cannot compute
        exactly (dropout, a CPU backward) is refused, naming the setting."""
        from plm_lightning.nn.flex import flex_attention, flex_unusable_reason

        needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                     for t in (q, k, v, position_bias))
        reason = flex_unusable_reason(q.device, needs_grad, dropout_p)
        if reason is not None:
            raise RuntimeError(f"attention_backend='flex': {reason}")
        return flex_attention(q, k, v, mask, is_causal, position_bias, self.scale)
