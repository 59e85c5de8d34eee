"""The Transformer-XL / XLNet stack: the shared blocks with relative attention, segment-level recurrence memory, and
XLNet's two-stream attention.

Transformer-XL (Dai et al. 2019, sec. 3.2): layer n of segment t attends over ``[sg(h^{n-1}_{t-1}); h^{n-1}_t]``, the
memory being the previous segment's layer inputs without gradient, so the context grows with depth and evaluation can
look further back than a training segment.

XLNet (Yang et al. 2019, sec. 2.3, eqs. 4-5): every block runs twice with the same weights. The content stream h
attends to the positions at or before it in the factorization order (itself included); the query stream g, which
starts from one learned vector, attends to the positions strictly before it and never to its own content. Both read
keys and values from the content stream. The order lives in ``StackInputs.mask`` (``[B, L, L]``, True: i may see j;
the data's ``perm_mask`` is its negation, the reference code's convention) and the predicted positions in
``StackInputs.output_positions``; the query stream exists only there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from plm_lightning.nn.attention import take_rows
from plm_lightning.nn.block import TransformerBlock
from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.dropout import Dropout
from plm_lightning.nn.embeddings import Embeddings
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.legacy_keys import drop_on_load
from plm_lightning.nn.stack_inputs import NO_INPUTS, StackInputs, check_inputs
from plm_lightning.nn.xl_relative import XLRelative, relative_index, relative_sinusoids


@dataclass
class XLOutput:
    last_hidden_state: Tensor
    """Content stream ``[B, L, H]``."""
    query_state: Tensor | None
    """Query stream ``[B, N, H]`` at ``target_positions`` (None without targets)."""
    memory: list[Tensor] | None
    """Per layer, the memory for the next segment ``[B, <= mem_len, H]`` (None when ``mem_len`` is 0)."""
    layer_outputs: tuple[Tensor, ...]
    """The embedding output and every layer's content stream."""

    @property
    def hidden_states(self) -> tuple[Tensor, ...]:
        return self.layer_outputs


class XLStack(nn.Module):
    """Token embeddings -> blocks of relative attention; ``causal`` (Transformer-XL) or bidirectional (XLNet)."""

    def __init__(self, cfg: BackboneConfig, causal: bool = False) -> None:
        super().__init__()
        if cfg.position_embedding != "xl_relative":
            raise ValueError("XLStack needs position_embedding='xl_relative'")
        self.cfg, self.causal = cfg, causal
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.num_layers))
        # XLNet's mask_emb, g^(0): the query stream's start, none in Transformer-XL (a parameter no loss reaches
        # would stop DDP); a causal stack's older checkpoints that hold one load without it
        self.query_embedding = None if causal else nn.Parameter(torch.zeros(cfg.hidden_size))
        if causal:
            drop_on_load(self, "query_embedding")
        self.dropout = Dropout(cfg.dropout)

    def blocks(self) -> list[nn.Module]:
        return list(self.layers)

    def relative(self, length: int, key_length: int, batch: int, token_type_ids: Tensor | None,
                 device: torch.device) -> XLRelative:
        cfg, bidirectional = self.cfg, not self.causal
        table = relative_sinusoids(length, key_length, cfg.hidden_size, bidirectional, cfg.clamp_len, device)
        if cfg.bidirectional_data:  # the last batch // 2 rows read right to left
            back = relative_sinusoids(length, key_length, cfg.hidden_size, bidirectional, cfg.clamp_len, device,
                                      reverse=True)
            table = torch.cat([table.expand(batch - batch // 2, -1, -1), back.expand(batch // 2, -1, -1)])
        different = None
        if cfg.relative_segments and token_type_ids is not None:
            memory_types = token_type_ids.new_zeros(batch, key_length - length)
            keys = torch.cat([memory_types, token_type_ids], dim=1)
            different = token_type_ids[:, :, None] != keys[:, None, :]
        return XLRelative(self.dropout(table), relative_index(length, key_length, table.shape[-2], device), different)

    def masks(self, attention_mask: Tensor | None, visible: Tensor | None, length: int, memory_length: int,
              device: torch.device) -> tuple[Tensor | None, Tensor | None]:
        """(content mask, query mask), each ``[B|1, 1, L, M + L]`` boolean (True = may attend) or None (all);
        ``visible`` ``[B, L, L]``: the factorization order's (every memory position is visible)."""
        allowed = None
        if attention_mask is not None:
            real = torch.cat([attention_mask.new_ones(attention_mask.shape[0], memory_length), attention_mask], 1)
            allowed = real.bool()[:, None, :].expand(-1, length, -1)
        if self.causal:
            i = torch.arange(length, device=device)[:, None]
            future = torch.arange(memory_length + length, device=device)[None, :] > memory_length + i
            allowed = ~future[None] if allowed is None else allowed & ~future
        if visible is not None:
            visible = torch.nn.functional.pad(visible.bool(), (memory_length, 0), value=True)
            allowed = visible if allowed is None else allowed & visible
        if allowed is None:
            return None, None
        own = torch.zeros(length, memory_length + length, dtype=torch.bool, device=device)
        own[torch.arange(length, device=device), memory_length + torch.arange(length, device=device)] = True
        return (allowed | own)[:, None], allowed[:, None]

    def input_keys(self) -> tuple[str, ...]:
        """The id inputs of ``StackInputs.ids`` this stack reads: segments, through XLNet's relative segment
        encoding (Yang et al. 2019, sec. 2.5), when it has one."""
        return ("token_type_ids",) if self.cfg.relative_segments else ()

    def forward(self, input_ids: Tensor, inputs: StackInputs = NO_INPUTS) -> XLOutput:
        """``inputs.memory``: the previous call's ``XLOutput.memory`` (one ``[B, M, H]`` per layer), attended to and
        not trained through; ``inputs.memory_length`` overrides the config's length of the memory returned
        (Transformer-XL evaluates with a longer one than it trains with). ``inputs.mask`` ``[B, L, L]`` (True: i may
        see j) and ``inputs.output_positions`` ``[B, N]``: XLNet's factorization order and predicted positions,
        where the query stream runs. ``inputs.ids["token_type_ids"]``: the segments of relative segment encoding."""
        check_inputs(inputs)
        batch, length = input_ids.shape
        attention_mask, visible, target_positions = inputs.attention_mask, inputs.mask, inputs.output_positions
        memory, mem_len = inputs.memory, inputs.memory_length
        token_type_ids = inputs.ids.get("token_type_ids")
        if target_positions is not None and visible is None:
            raise ValueError("output_positions (XLNet's query stream) need the mask of their factorization order")
        memory_length = memory[0].shape[1] if memory else 0
        key_length = memory_length + length
        if attention_mask is not None and bool(attention_mask.all()):
            attention_mask = None
        content_mask, query_mask = self.masks(attention_mask, visible, length, memory_length, input_ids.device)
        relative = self.relative(length, key_length, batch, token_type_ids, input_ids.device)
        x = self.embeddings(input_ids)
        g = rows = both_masks = None
        if target_positions is not None:  # both streams in one call per block: queries [h; g], one mask row each
            g = self.dropout(self.query_embedding.to(x.dtype).expand(batch, target_positions.shape[1], -1))
            rows = torch.cat([torch.arange(length, device=x.device).expand(batch, -1), target_positions], 1)
            if query_mask is not None:
                query_rows = take_rows(query_mask[:, 0].expand(batch, -1, -1), target_positions)
                both_masks = torch.cat([content_mask.expand(batch, -1, -1, -1), query_rows[:, None]], 2)
        hidden, new_memory = [x], []
        mem_len = self.cfg.mem_len if mem_len is None else mem_len
        for i, block in enumerate(self.layers):
            past = memory[i] if memory else None
            if mem_len > 0:
                new_memory.append((x if past is None else torch.cat([past.to(x.dtype), x], 1))[:, -mem_len:].detach())
            if g is None:
                x = block(x, LayerAttention(mask=content_mask, relative=relative, memory=past))
            else:
                both = block(x, LayerAttention(mask=both_masks, relative=relative, query_index=rows, memory=past),
                             query=torch.cat([x, g], 1))
                x, g = both[:, :length], both[:, length:]
            hidden.append(x)
        return XLOutput(self.dropout(x), None if g is None else self.dropout(g), new_memory if mem_len > 0 else None,
                        tuple(hidden))
