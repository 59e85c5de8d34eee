"""Everything one forward pass of a Transformer stack reads besides its token ids, as one per-batch value.

``TransformerStack.forward(input_ids, inputs)`` takes a :class:`StackInputs`; the stack turns it into an
:class:`~plm_lightning.nn.attention_plan.AttentionPlan` (each block's :class:`LayerAttention`) and the embeddings'
inputs. No field belongs to one objective: the per-token id inputs that some objectives add (BERT's segments,
ERNIE 2.0's task types, GLM's intra-span positions, or a new objective's own) travel in ``ids``, keyed by their
batch key, and the embedding table registered for that key reads them (``Embeddings.add_input``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor


@dataclass(frozen=True)
class StackInputs:
    """One batch's inputs to a stack beyond the token ids; unset fields mean: no padding, one document per row,
    positions 0.., the stack's own mask shape, every position computed, no encoder, no cache."""

    attention_mask: Tensor | None = None
    """``[B, L]``, 1 = a real token."""
    document_ids: Tensor | None = None
    """``[B, L]``: the documents packed into each row (a token sees only its own document's)."""
    position_ids: Tensor | None = None
    """``[B, L]`` 0-based positions (XLM's TLM restarts them per language; decoding continues after the cache)."""
    ids: Mapping[str, Tensor] = field(default_factory=dict)
    """Per-token (``[B, L]``) or per-row (``[B]``) ids for the embedding tables, by batch key (``token_type_ids``,
    ``task_type_ids``, ``block_position_ids``, ...); a key without a table is an error."""
    mask: Tensor | None = None
    """A further boolean mask, True = may attend, broadcastable to ``[B, 1, L, L]`` (prefix-LM, UniLM); ``[B, L, L]``
    for ``XLStack`` (XLNet's factorization order)."""
    causal: bool | None = None
    """Overrides the stack's default mask shape (None: the stack's own)."""
    output_positions: Tensor | None = None
    """``[B, K]``: the last block computes its output only at these positions (they still attend to every one)."""
    num_blocks: int | None = None
    """Run only the first blocks (DeBERTa's Enhanced Mask Decoder re-runs the last one itself)."""
    encoder_out: Tensor | None = None
    """Cross-attention keys and values: the encoder's last hidden state ``[B, N, H]``."""
    encoder_attention_mask: Tensor | None = None
    """``[B, N]``: the encoder positions cross-attention may read."""
    cache: list[Any] | None = None
    """Incremental decoding: one ``LayerCache`` per block; ``input_ids`` are the tokens after the cached ones."""
    token_embeds: Tensor | None = None
    """``[B, L, E]``: the token table's rows for ``input_ids``, looked up by the caller."""
    memory: list[Tensor] | None = None
    """Transformer-XL / XLNet (``XLStack``): the previous segment's hidden states, one ``[B, M, H]`` per layer."""
    memory_length: int | None = None
    """``XLStack``: the length of the memory returned (None: the config's ``mem_len``)."""

    def but(self, **changes: Any) -> StackInputs:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)


NO_INPUTS = StackInputs()
"""Token ids alone: no padding, the stack's own mask shape."""


def check_inputs(inputs: object) -> None:
    """A stack's second argument is one :class:`StackInputs` (not an attention mask: the positional
    ``stack(ids, mask, types)`` of earlier versions)."""
    if not isinstance(inputs, StackInputs):
        raise TypeError(f"a stack takes (input_ids, StackInputs), got {type(inputs).__name__} as its second argument: "
                        "pass StackInputs(attention_mask=...)")


def batch_inputs(batch: Mapping[str, Any], id_keys: tuple[str, ...], **fields: Any) -> StackInputs:
    """:class:`StackInputs` from a collated batch: its ``attention_mask``, ``document_ids`` and ``position_ids``,
    the ``id_keys`` it has (the keys the stack's embeddings read), and ``fields``."""
    ids = {key: batch[key] for key in id_keys if batch.get(key) is not None}
    return StackInputs(attention_mask=batch.get("attention_mask"), document_ids=batch.get("document_ids"),
                       position_ids=batch.get("position_ids"), ids=ids, **fields)


def text_inputs(stack: Any, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> StackInputs:
    """A batch of text for ``stack``: its padding and, where the stack reads segments (``stack.input_keys()``), its
    token types; a stack without segment embeddings (GPT-2, T5) has nothing to read them with."""
    return batch_inputs({"attention_mask": attention_mask, "token_type_ids": token_type_ids}, stack.input_keys())
