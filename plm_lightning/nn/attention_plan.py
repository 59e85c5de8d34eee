"""The attention shape of a batch as one value: what each query may see and how positions enter the scores.

An objective is a corruption of the input, an attention-mask shape and the positions that carry loss. The middle
part is this module. :func:`plan_attention` reads what the batch and the config say once per forward pass (padding,
packed documents, causal / bidirectional / prefix masks, sliding windows per layer, rotary angles, T5's bucketed
bias, DeBERTa's relative table, the sparse last layer's query rows, the key-value cache) and returns an
:class:`AttentionPlan`. Block ``i`` receives ``plan.layer(i)``, a :class:`LayerAttention`, and its attention module
reads nothing else: the stack's loop does not know which mask shape it runs.

Two layouts serve the same plan:

* **dense**: ``[B, L, H]`` rows (or the real tokens only, ``[1, T, H]``, re-padded around the kernel: ``unpadding``)
  with a boolean mask ``[B|1, 1, Lq, Lk]``, SDPA / eager / xformers kernels;
* **stream**: one flat stream of blocks attended block-diagonally (``segments``, :mod:`plm_lightning.nn.varlen`),
  on xformers when the mask is padding and documents only (plus causal and banded windows): no dense mask is built
  and no FLOP is spent on padding or across documents.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from plm_lightning.nn.attention import resolve_backend
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.masks import combine, document_mask, padding_mask, sliding_window_mask
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.nn.unpad import Unpadding
from plm_lightning.nn.varlen import Segments


@dataclass(frozen=True)
class AttentionPlan:
    """Each layer's :class:`LayerAttention` for one batch, the layout the hidden states are in, and the positions
    the embeddings take."""

    layers: tuple[LayerAttention, ...]
    position_ids: Tensor | None = None
    """Position ids for the embeddings (set when decoding continues after cached positions)."""
    unpadding: Unpadding | None = None
    """Hidden states are the real tokens only (``[1, T, H]``) from the embeddings on, until a layer needs rows."""

    def layer(self, i: int) -> LayerAttention:
        return self.layers[i]

    def enter(self, i: int, x: Tensor) -> Tensor:
        """``x`` in the layout layer ``i`` reads (the embedding output for ``i = 0``, else the previous layer's)."""
        if self.unpadding is None:
            return x
        if i == 0:
            return self.unpadding.unpad(x)
        reads_rows = self.layers[i].unpadding is None and self.layers[i].segments is None
        return self.unpadding.pad(x) if reads_rows and self.unpadded(i - 1) else x

    def unpadded(self, i: int) -> bool:
        """Whether layer ``i``'s output holds the real tokens only."""
        return self.unpadding is not None and (self.layers[i].unpadding is not None or
                                               self.layers[i].segments is not None)


def plan_attention(stack: nn.Module, input_ids: Tensor, num_layers: int, inputs: StackInputs,
                   causal: bool) -> AttentionPlan:
    """The plan of ``num_layers`` layers of ``stack`` (a ``TransformerStack``: its config, rotary tables, T5 bias
    and DeBERTa's relative table) for this batch's ``inputs``, with the mask shape ``causal`` or not.

    Per layer: a global layer sees its whole mask, a local one (ModernBERT, Gemma-style alternation) the same mask
    cut to ``cfg.local_attention_window`` with its own rotary base; the stream layout is taken on xformers where the
    mask is padding and documents only (:func:`stream_segments`), by every global layer and by local layers of a
    causal stack (a banded window of a bidirectional one has no block-diagonal form); the last layer computes only
    ``output_positions`` when given, in the dense layout.
    """
    cfg, length, device = stack.cfg, input_ids.shape[1], input_ids.device
    past, inputs = cached_positions(stack, inputs, length, causal, device)
    if inputs.attention_mask is not None and bool(inputs.attention_mask.all()):
        inputs = inputs.but(attention_mask=None)  # no padding: SDPA's mask-free (and, if causal, is_causal) path
    positions = cfg.max_position_embeddings - cfg.position_offset
    if past + length > positions and cfg.position_embedding in ("learned", "sinusoidal"):
        raise ValueError(f"sequence length {past + length} exceeds the {positions} positions of "
                         f"max_position_embeddings={cfg.max_position_embeddings}")
    segments = (stream_segments(stack, inputs.attention_mask, inputs.document_ids, inputs.mask, causal, input_ids)
                if inputs.cache is None and inputs.encoder_out is None else None)
    window = cfg.local_attention_window
    global_mask = local_mask = None
    if segments is None or inputs.output_positions is not None or (window is not None and not causal):
        global_mask, local_mask = dense_masks(inputs, window, causal, length, past, device)
    global_rope, local_rope = rotary_angles(stack, inputs.position_ids, length, device)
    unpadding = None
    if (cfg.unpad or segments is not None) and inputs.attention_mask is not None and inputs.encoder_out is None:
        unpadding = Unpadding.from_attention_mask(inputs.attention_mask)
    common = LayerAttention(
        position_bias=(stack.relative_bias(length, past + length, device, query_offset=past)
                       if stack.relative_bias is not None else None),
        relative=stack.relative_inputs(length, device), unpadding=unpadding,
        cross=None if inputs.encoder_out is None else LayerAttention(
            kv=inputs.encoder_out, mask=(padding_mask(inputs.encoder_attention_mask)
                                         if inputs.encoder_attention_mask is not None else None)))
    dense = (replace(common, mask=global_mask, is_causal=causal, rope=global_rope),
             replace(common, mask=local_mask, rope=local_rope))
    stream: tuple[LayerAttention | None, LayerAttention | None] = (None, None)
    if segments is not None:
        like_rows = (unpadding.batch if unpadding is not None else input_ids.shape[0], length)
        global_stream = replace(common, segments=segments, rope=stream_angles(global_rope, like_rows, unpadding))
        local_stream = (replace(global_stream, segments=segments.banded(window),
                                rope=stream_angles(local_rope, like_rows, unpadding))
                        if window is not None and causal else None)
        stream = (global_stream, local_stream)
    layers = layer_plans(cfg, num_layers, dense, stream, inputs)
    return AttentionPlan(layers, inputs.position_ids, unpadding)


def cached_positions(stack: nn.Module, inputs: StackInputs, length: int, causal: bool,
                     device: torch.device) -> tuple[int, StackInputs]:
    """(tokens already cached, ``inputs`` with positions counted after them when decoding incrementally)."""
    if inputs.cache is None:
        return 0, inputs
    cfg = stack.cfg
    if cfg.unpad or stack.relative_embeddings is not None or (cfg.local_attention_window is not None
                                                              and not causal):
        raise ValueError("the key-value cache serves dense or causal-banded, absolute / rotary / T5-bucket "
                         "attention stacks")
    past = inputs.cache[0].self_attn.length
    if inputs.position_ids is None:
        inputs = inputs.but(position_ids=torch.arange(past, past + length, device=device)[None])
    return past, inputs


def dense_masks(inputs: StackInputs, window: int | None, causal: bool, length: int, past: int,
                device: torch.device) -> tuple[Tensor | None, Tensor | None]:
    """(global, local) boolean masks: padding, documents and the further mask; the local one cut to ``window``."""
    documents = document_mask(inputs.document_ids) if inputs.document_ids is not None else None
    padding = padding_mask(inputs.attention_mask) if inputs.attention_mask is not None else None
    global_mask = local_mask = combine(padding, inputs.mask, documents)
    if window is not None:
        local_mask = combine(global_mask, sliding_window_mask(length, window, causal, device,
                                                              key_length=past + length))
    return global_mask, local_mask


def rotary_angles(stack: nn.Module, position_ids: Tensor | None, length: int,
                  device: torch.device) -> tuple[tuple[Tensor, Tensor] | None, tuple[Tensor, Tensor] | None]:
    """(global, local) rotary (cos, sin) at ``position_ids`` (default 0..length-1), or None without rotary."""
    if stack.rotary is None:
        return None, None
    angles_at = position_ids if position_ids is not None else torch.arange(length, device=device)
    rope = stack.rotary(angles_at)
    return rope, stack.local_rotary(angles_at) if stack.local_rotary is not None else rope


def layer_plans(cfg: object, num_layers: int, dense: tuple[LayerAttention, LayerAttention],
                stream: tuple[LayerAttention | None, LayerAttention | None],
                inputs: StackInputs) -> tuple[LayerAttention, ...]:
    """Each layer's shape: its kind's (global / local) stream layout where there is one, else dense; the last
    layer sparse at ``output_positions``; the cache's share of each block when decoding."""
    layers = []
    for i in range(num_layers):
        kind = 0 if cfg.is_global_layer(i) else 1
        if i == num_layers - 1 and inputs.output_positions is not None:  # the sparse last layer reads padded rows
            layer = replace(dense[kind], query_index=inputs.output_positions, unpadding=None)
        else:
            layer = stream[kind] or dense[kind]
        if inputs.cache is not None:
            cross = None if layer.cross is None else replace(layer.cross, cache=inputs.cache[i].cross_attn)
            layer = replace(layer, cache=inputs.cache[i], cross=cross)
        layers.append(layer)
    return tuple(layers)


def stream_segments(stack: nn.Module, attention_mask: Tensor | None, document_ids: Tensor | None,
                    mask: Tensor | None, causal: bool, input_ids: Tensor) -> Segments | None:
    """The batch's attention blocks when the stack attends block-diagonally (xformers, no mask beyond padding and
    documents, no relative-position term), else None."""
    if attention_mask is None and document_ids is None or mask is not None:
        return None
    if stack.cfg.position_embedding in ("t5_relative", "disentangled", "xl_relative"):
        return None
    if resolve_backend(stack.cfg.attention_backend, input_ids.device) != "xformers":
        return None
    return Segments.of_batch(attention_mask, document_ids, tuple(input_ids.shape), causal)


def stream_angles(rope: tuple[Tensor, Tensor] | None, rows: tuple[int, int],
                  unpadding: Unpadding | None) -> tuple[Tensor, Tensor] | None:
    """Rotary angles ``[L, D]`` or ``[B, L, D]`` laid out as the flat stream of ``rows`` = (B, L): ``[1, T, D]``."""
    if rope is None:
        return None
    expanded = tuple(t.expand(rows[0], *t.shape[-2:]) for t in rope)
    return tuple(unpadding.unpad(t) if unpadding is not None else t.reshape(1, -1, t.shape[-1]) for t in expanded)
