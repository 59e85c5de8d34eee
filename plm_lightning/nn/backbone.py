"""Transformer stacks shared by every objective: `Encoder`, `Decoder` and `EncoderDecoder`.

A stack is embeddings -> N blocks (or one block applied N times, ALBERT) -> final norm for pre-norm models.
The attention-mask shape is an argument, not a subclass: the same weights serve MLM, CLM and prefix-LM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from plm_lightning.nn.attention_plan import plan_attention
from plm_lightning.nn.block import TransformerBlock
from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.disentangled import ConvLayer, relative_positions
from plm_lightning.nn.embeddings import Embeddings
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.masks import combine, padding_mask
from plm_lightning.nn.norms import make_norm
from plm_lightning.nn.positions import RelativePositionBias, RotaryEmbedding
from plm_lightning.nn.stack_inputs import NO_INPUTS, StackInputs, check_inputs
from plm_lightning.nn.unpad import Unpadding


@dataclass
class BackboneOutput:
    last_hidden_state: Tensor
    layer_outputs: tuple[Tensor, ...]
    """Embedding output followed by every layer's output as computed (``[1, T, H]`` where the stack ran unpadded)."""
    unpadding: Unpadding | None = None
    unpadded: tuple[bool, ...] = ()

    @property
    def hidden_states(self) -> tuple[Tensor, ...]:
        """Embedding output followed by every layer's output (the last one after the final norm, if any), each
        ``[B, L, H]``: outputs of unpadded layers are padded back here, on demand, not in the forward pass."""
        if self.unpadding is None:
            return self.layer_outputs
        return tuple(self.unpadding.pad(h) if u else h for h, u in zip(self.layer_outputs, self.unpadded))


class TransformerStack(nn.Module):
    """Embeddings and blocks; ``causal`` sets the default mask shape, ``cross_attention`` adds encoder attention."""

    def __init__(self, cfg: BackboneConfig, causal: bool = False, cross_attention: bool = False,
                 embeddings: Embeddings | None = None) -> None:
        super().__init__()
        self.cfg, self.causal = cfg, causal
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        num_blocks = 1 if cfg.layer_sharing == "all" else cfg.num_layers
        self.layers = nn.ModuleList(TransformerBlock(cfg, cross_attention, attention_norm=cfg.first_attention_norm or i > 0,
                                                     layer_index=i) for i in range(num_blocks))
        if cfg.layer_sharing in ("attention", "ffn"):  # one sub-layer module object in every block
            name = "self_attn" if cfg.layer_sharing == "attention" else "ffn"
            for block in self.layers[1:]:
                setattr(block, name, getattr(self.layers[0], name))
        self.final_norm = make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm")) if cfg.is_pre_norm else None
        rope = cfg.position_embedding == "rope"
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta) if rope else None
        local_theta = cfg.local_rope_theta if cfg.local_rope_theta is not None else cfg.rope_theta
        self.local_rotary = (RotaryEmbedding(cfg.head_dim, local_theta)
                             if rope and cfg.local_attention_window is not None and local_theta != cfg.rope_theta
                             else None)
        self.relative_embeddings = self.relative_norm = self.conv = None
        if cfg.position_embedding == "disentangled":  # DeBERTa: one relative table for every layer
            span = cfg.relative_position_buckets if cfg.relative_position_buckets > 0 else cfg.max_relative_positions
            self.relative_embeddings = nn.Embedding(2 * span, cfg.hidden_size)
            if cfg.relative_embedding_norm:
                self.relative_norm = make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm"))
            if cfg.conv_kernel_size > 0:
                self.conv = ConvLayer(cfg.hidden_size, cfg.conv_kernel_size,
                                      make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm")), cfg.dropout,
                                      cfg.conv_activation)
        self.relative_bias = (
            RelativePositionBias(cfg.num_heads, cfg.relative_attention_num_buckets,
                                 cfg.relative_attention_max_distance, bidirectional=not causal)
            if cfg.position_embedding == "t5_relative" else None
        )

    def blocks(self) -> list[nn.Module]:
        """The blocks in application order (the same module repeated when layers are shared)."""
        return [self.layers[0 if self.cfg.layer_sharing == "all" else i] for i in range(self.cfg.num_layers)]

    def input_keys(self) -> tuple[str, ...]:
        """The id inputs of ``StackInputs.ids`` this stack reads: its embeddings' tables."""
        return self.embeddings.input_keys()

    def forward(self, input_ids: Tensor, inputs: StackInputs = NO_INPUTS) -> BackboneOutput:
        """The stack on ``input_ids`` ``[B, L]`` with the batch's :class:`StackInputs` (padding, packed documents,
        positions, the embeddings' id inputs, a further mask, the mask shape, sparse last-layer positions, the
        encoder, the cache): read once into an :class:`AttentionPlan`, of which block ``i`` receives its share.

        On xformers, padding and packed documents are attended block-diagonally over one flat stream of the real
        tokens (``plm_lightning.nn.varlen``): no dense mask is built and no FLOP is spent on padding or across
        documents. Elsewhere they are dense masks. With ``inputs.output_positions`` ``[B, K]`` the last block
        computes its output only at these positions, so ``last_hidden_state`` is ``[B, K, H]``: exact for a loss
        that reads only those positions (MLM: the masked ones, + [CLS] for NSP/SOP), and it skips ~85% of the last
        layer's queries, output projection and feed-forward.
        """
        check_inputs(inputs)
        blocks = self.blocks()[:inputs.num_blocks]
        plan = plan_attention(self, input_ids, len(blocks), inputs,
                              self.causal if inputs.causal is None else inputs.causal)
        embedded = self.embeddings(input_ids, inputs.ids, plan.position_ids, inputs.token_embeds)
        x, hidden, unpadded = embedded, [embedded], [False]
        for i, block in enumerate(blocks):
            x = block(plan.enter(i, x), plan.layer(i))
            if i == 0 and self.conv is not None:
                x = self.conv(embedded, x, inputs.attention_mask)
            hidden.append(x)
            unpadded.append(plan.unpadded(i))
        if self.final_norm is not None:
            x = self.final_norm(x)
        if unpadded[-1]:
            x = plan.unpadding.pad(x)
        if self.final_norm is not None or unpadded[-1]:
            hidden[-1], unpadded[-1] = x, False
        return BackboneOutput(x, tuple(hidden), plan.unpadding if any(unpadded) else None, tuple(unpadded))

    def enhanced_mask_decoder(self, hidden: Tensor, query: Tensor, inputs: StackInputs = NO_INPUTS,
                              query_index: Tensor | None = None, steps: int = 2) -> Tensor:
        """DeBERTa's Enhanced Mask Decoder (He et al. 2021, sec. 3.2; the reference code's ``emd_context_layer``):
        the last block applied ``steps`` times (shared weights) with keys and values from ``hidden`` (the output of
        the layer before it) and a query stream that starts as ``query`` = absolute position embeddings + ``hidden``,
        so absolute positions enter only right before the MLM prediction. ``inputs``: the batch's padding
        (``attention_mask``) and further ``mask`` (packed documents). ``query_index`` ``[B, K]``: ``query`` holds only
        these positions' rows."""
        check_inputs(inputs)
        attention_mask = inputs.attention_mask
        if attention_mask is not None and bool(attention_mask.all()):
            attention_mask = None
        attention = LayerAttention(combine(padding_mask(attention_mask) if attention_mask is not None else None,
                                           inputs.mask),
                                   relative=self.relative_inputs(hidden.shape[1], hidden.device), query_index=query_index)
        block = self.blocks()[-1]
        for _ in range(steps):
            query = block(hidden, attention, query=query)
        return query

    def relative_inputs(self, length: int, device: torch.device) -> tuple[Tensor, Tensor] | None:
        """DeBERTa's (normed relative embedding table, ``[L, L]`` relative positions), or None."""
        if self.relative_embeddings is None:
            return None
        table = self.relative_embeddings.weight
        if self.relative_norm is not None:
            table = self.relative_norm(table)
        positions = relative_positions(length, self.cfg.relative_position_buckets, self.cfg.max_relative_positions,
                                       device)
        return table, positions


class Encoder(TransformerStack):
    """Bidirectional stack (BERT, RoBERTa, ALBERT, ELECTRA ...)."""

    def __init__(self, cfg: BackboneConfig, embeddings: Embeddings | None = None) -> None:
        super().__init__(cfg, causal=False, embeddings=embeddings)


class Decoder(TransformerStack):
    """Causal stack (GPT, GPT-2); with ``cross_attention`` the decoder of an encoder-decoder model."""

    def __init__(self, cfg: BackboneConfig, cross_attention: bool = False, embeddings: Embeddings | None = None):
        super().__init__(cfg, causal=True, cross_attention=cross_attention, embeddings=embeddings)


class EncoderDecoder(nn.Module):
    """Encoder + cross-attending decoder sharing one token embedding (Vaswani et al. 2017; BART; T5)."""

    def __init__(self, cfg: BackboneConfig, decoder_cfg: BackboneConfig | None = None) -> None:
        super().__init__()
        self.encoder = Encoder(cfg)
        decoder_cfg = decoder_cfg or cfg
        dec_embeddings = Embeddings(decoder_cfg)
        dec_embeddings.token = self.encoder.embeddings.token
        self.decoder = Decoder(decoder_cfg, cross_attention=True, embeddings=dec_embeddings)

    def forward(self, input_ids: Tensor, decoder_input_ids: Tensor, inputs: StackInputs = NO_INPUTS,
                decoder_inputs: StackInputs = NO_INPUTS) -> tuple[BackboneOutput, BackboneOutput]:
        """The encoder over ``input_ids`` with its ``inputs``, then the decoder over ``decoder_input_ids`` with its
        own, cross-attending to the encoder's output. The decoder reads the encoder positions
        ``decoder_inputs.encoder_attention_mask`` allows (MASS hides the encoder's mask tokens), by default the
        encoder's ``attention_mask``."""
        check_inputs(inputs)
        check_inputs(decoder_inputs)
        enc_tokens = dec_tokens = None
        table = self.encoder.embeddings.token
        if self.decoder.embeddings.token is table and torch.is_grad_enabled() and table.weight.requires_grad:
            # One lookup for both stacks: the backward of each lookup writes a dense [V, E] gradient (a zero-fill of
            # the whole table, then the rows), so one lookup is one such buffer a step instead of two.
            flat = table(torch.cat([input_ids.reshape(-1), decoder_input_ids.reshape(-1)]))
            enc_tokens, dec_tokens = flat.split([input_ids.numel(), decoder_input_ids.numel()])
            enc_tokens = enc_tokens.view(*input_ids.shape, -1)
            dec_tokens = dec_tokens.view(*decoder_input_ids.shape, -1)
        enc = self.encoder(input_ids, inputs.but(token_embeds=enc_tokens) if enc_tokens is not None else inputs)
        visible = (decoder_inputs.encoder_attention_mask if decoder_inputs.encoder_attention_mask is not None
                   else inputs.attention_mask)
        dec = self.decoder(decoder_input_ids, decoder_inputs.but(
            encoder_out=enc.last_hidden_state, encoder_attention_mask=visible,
            **({"token_embeds": dec_tokens} if dec_tokens is not None else {})))
        return enc, dec


def init_weights(module: nn.Module, cfg: BackboneConfig) -> None:
    """Normal(0, initializer_range) weights, zero biases, unit norms (BERT, GPT-2); GPT-2 additionally scales the
    residual output projections by 1/sqrt(2 * num_layers) (Radford et al. 2019, sec. 2.3). ``initialization: t5``
    uses T5's scheme instead (:func:`init_t5_weights`)."""
    if cfg.initialization == "t5":
        init_t5_weights(module, cfg)
        return
    std = cfg.initializer_range
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            scaled = cfg.scale_residual_init and (name.endswith("o_proj") or name.endswith("fc_out"))
            nn.init.normal_(m.weight, 0.0, std / math.sqrt(2 * cfg.num_layers) if scaled else std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    for name, p in module.named_parameters():  # Transformer-XL's u, v and XLNet's segment terms and query embedding
        if name.rsplit(".", 1)[-1] in XL_PARAMETERS:
            nn.init.normal_(p, 0.0, std)


XL_PARAMETERS = ("content_bias", "position_bias", "segment_bias", "segment_embed", "query_embedding")


def init_t5_weights(module: nn.Module, cfg: BackboneConfig) -> None:
    """Mesh TensorFlow's initialisation as in T5 (and transformers' ``T5PreTrainedModel._init_weights``, factor =
    ``initializer_range``): embeddings N(0, 1), an untied LM head N(0, d_model^-1/2) (mesh_tensorflow
    transformer.py; transformers draws it N(0, 1), which starts T5.1.1 at a loss of ~19 instead of ~ln V: see
    huggingface/transformers#26441); queries N(0, (d_model d_head)^-1/2), keys and
    values N(0, d_model^-1/2), attention outputs N(0, (heads d_head)^-1/2); FFN inputs N(0, d_model^-1/2), outputs
    N(0, d_ff^-1/2); relative position buckets N(0, d_model^-1/2); norms one."""
    factor, d, f = cfg.initializer_range, cfg.hidden_size, cfg.intermediate_size
    query = factor * (d * cfg.head_dim) ** -0.5
    for name, m in module.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, factor * (d ** -0.5 if "relative" in name else 1.0))
        elif isinstance(m, nn.Linear):
            if leaf == "qkv_proj":
                with torch.no_grad():
                    q, kv = m.weight[:d], m.weight[d:]
                    q.normal_(0.0, query)
                    kv.normal_(0.0, factor * d ** -0.5)
            elif leaf == "q_proj":
                nn.init.normal_(m.weight, 0.0, query)
            elif leaf == "o_proj":
                nn.init.normal_(m.weight, 0.0, factor * d ** -0.5)
            elif leaf == "fc_out":
                nn.init.normal_(m.weight, 0.0, factor * f ** -0.5)
            else:  # kv_proj, fc_in, fc_gate and anything else reading the residual stream
                nn.init.normal_(m.weight, 0.0, factor * d ** -0.5)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif hasattr(m, "weight") and isinstance(getattr(m, "weight", None), nn.Parameter) and "norm" in leaf:
            nn.init.ones_(m.weight)
    head = getattr(module, "lm_head", None)
    if head is not None and not cfg.tie_word_embeddings:  # Mesh TensorFlow's untied output layer: d_model^-1/2
        nn.init.normal_(head.weight, 0.0, factor * d ** -0.5)
