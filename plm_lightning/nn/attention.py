"""Multi-head attention (self and cross) with three interchangeable kernels: eager, PyTorch SDPA, xformers.

Scaled dot-product attention, Vaswani et al. 2017, eq. 1: softmax(Q K^T / sqrt(d_k) + bias) V.
The eager kernel is the reference the other two are tested against.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.dropout import dropout
from plm_lightning.nn.masks import causal_mask, combine, to_additive
from plm_lightning.nn.positions import apply_rotary
from plm_lightning.nn.unpad import Unpadding
from plm_lightning.nn.varlen import Segments, xformers_varlen_attention

BACKENDS = ("auto", "eager", "sdpa", "xformers")


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

    def _cached(self, k: Tensor, v: Tensor, cache: KVCache | None) -> tuple[Tensor, Tensor]:
        """Self-attention appends the new keys/values to the cache; cross-attention's are computed once."""
        if cache is None:
            return k, v
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

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        position_bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        kv: Tensor | None = None,
        query_index: Tensor | None = None,
        unpadding: Unpadding | None = None,
        cache: KVCache | None = None,
        segments: Segments | None = None,
    ) -> Tensor:
        """``query_index`` ``[B, K]``: compute the output only for these query positions (keys and values still
        come from every position), returning ``[B, K, H]``. ``unpadding``: ``x`` is ``[1, T, H]`` (real tokens
        only); the kernel runs on the re-padded layout and the output is unpadded again. ``cache``: incremental
        decoding; ``x`` holds only the new positions, which attend to the cached ones too (causal masks are
        aligned to the end of the keys). ``segments``: ``x`` (``[1, T, H]`` unpadded or ``[B, L, H]`` packed rows)
        is one flat stream of these blocks, attended with xformers' block-diagonal bias (``plm_lightning.nn.varlen``;
        ``rope`` then holds the stream's ``[1, T, D]`` angles); ``mask`` and ``is_causal`` are not read."""
        h = self.hidden_size
        if segments is not None:
            if self.cross_attention or query_index is not None or cache is not None or position_bias is not None \
                    or self.upcast:
                raise ValueError("segments are for self-attention over every position, without cache, bias or "
                                 "upcast_attention")
            q, k, v = (self._heads(t) for t in self.qkv_proj(x.reshape(1, -1, x.shape[-1])).split(h, dim=-1))
            if rope is not None:
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            out = xformers_varlen_attention(q, k, v, segments, self.dropout if self.training else 0.0, self.scale)
            return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], h))
        if unpadding is not None:
            if self.cross_attention or query_index is not None:
                raise ValueError("unpadding is for self-attention over every position")
            qkv = unpadding.pad(self.qkv_proj(x))
            q, k, v = (self._heads(t) for t in qkv.split(h, dim=-1))
            if rope is not None:
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            out = self.attend(q, k, v, mask, is_causal, position_bias)
            return self.o_proj(unpadding.unpad(out.transpose(1, 2).flatten(2)))
        if self.cross_attention and cache is not None and cache.key is not None:  # the encoder's keys, cached
            q = self._heads(self.q_proj(x))
            out = self.attend(q, cache.key, cache.value, mask, False, position_bias)
            b, _, n, _ = out.shape
            return self.o_proj(out.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))
        if self.cross_attention:
            if kv is None:
                raise ValueError("cross-attention needs kv (the encoder output)")
            q = self.q_proj(x if query_index is None else take_rows(x, query_index))
            k, v = self.kv_proj(kv).split(h, dim=-1)
        elif kv is not None:
            raise ValueError("self-attention takes no kv; build the module with cross_attention=True")
        else:
            q, k, v = self.project(x, query_index)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        rope_q = rope
        if query_index is not None:
            if is_causal:
                raise ValueError("query_index is for bidirectional attention; pass the causal mask in `mask`")
            mask, position_bias = take_query_rows(mask, query_index), take_query_rows(position_bias, query_index)
            if rope is not None:
                rope_q = tuple(take_rows(t.expand(query_index.shape[0], *t.shape[-2:]), query_index) for t in rope)
        if rope is not None:
            q, k = apply_rotary(q, *rope_q), apply_rotary(k, *rope)
        k, v = self._cached(k, v, cache)
        if cache is not None and is_causal and q.shape[2] == 1:
            is_causal = False  # one new query sees every cached key
        out = self.attend(q, k, v, mask, is_causal, position_bias)
        b, _, n, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))

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
