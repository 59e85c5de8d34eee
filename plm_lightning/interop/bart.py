"""BART (``BartForConditionalGeneration``) <-> our ``Seq2SeqLM`` with a BART backbone.

transformers keeps q, k, v apart (we fuse them: ``qkv_proj`` in self-attention, ``kv_proj`` in cross-attention),
names the FFN ``fc1``/``fc2`` and the post-norms after the sub-layer they close, and holds an all-zero
``final_logits_bias`` buffer that our LM head does not have (fairseq's BART has no output bias either).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FunctionAdapter
from plm_lightning.nn.config import BackboneConfig

POSITION_OFFSET = 2
"""``BartLearnedPositionalEmbedding`` keeps two rows before position 0 (fairseq's padding convention)."""


def _both(ours: str, hf: str) -> list[tuple[str, str]]:
    """A linear or LayerNorm module's weight and bias."""
    return [(f"{ours}.weight", f"{hf}.weight"), (f"{ours}.bias", f"{hf}.bias")]


def bart_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor renamed one to one (the fused projections are split/joined apart)."""
    pairs = [("backbone.encoder.embeddings.token.weight", "model.shared.weight"),
             ("backbone.encoder.embeddings.token.weight", "model.encoder.embed_tokens.weight"),
             ("backbone.decoder.embeddings.token.weight", "model.decoder.embed_tokens.weight"),
             ("lm_head.weight", "lm_head.weight")]
    for stack in ("encoder", "decoder"):
        ours, hf = f"backbone.{stack}", f"model.{stack}"
        pairs += [(f"{ours}.embeddings.position.weight", f"{hf}.embed_positions.weight"),
                  *_both(f"{ours}.embeddings.norm", f"{hf}.layernorm_embedding")]
        for i in range(cfg.num_layers):
            layer, hf_layer = f"{ours}.layers.{i}", f"{hf}.layers.{i}"
            pairs += [*_both(f"{layer}.self_attn.o_proj", f"{hf_layer}.self_attn.out_proj"),
                      *_both(f"{layer}.self_attn_norm", f"{hf_layer}.self_attn_layer_norm"),
                      *_both(f"{layer}.ffn.fc_in", f"{hf_layer}.fc1"),
                      *_both(f"{layer}.ffn.fc_out", f"{hf_layer}.fc2"),
                      *_both(f"{layer}.ffn_norm", f"{hf_layer}.final_layer_norm")]
            if stack == "decoder":
                pairs += [*_both(f"{layer}.cross_attn.q_proj", f"{hf_layer}.encoder_attn.q_proj"),
                          *_both(f"{layer}.cross_attn.o_proj", f"{hf_layer}.encoder_attn.out_proj"),
                          *_both(f"{layer}.cross_attn_norm", f"{hf_layer}.encoder_attn_layer_norm")]
    return pairs


def _fused(cfg: BackboneConfig) -> list[tuple[str, list[str]]]:
    """(our fused projection, the HF tensors it stacks, in order), weights and biases."""
    out = []
    for i in range(cfg.num_layers):
        for kind in ("weight", "bias"):
            for stack in ("encoder", "decoder"):
                attn = f"model.{stack}.layers.{i}.self_attn"
                out.append((f"backbone.{stack}.layers.{i}.self_attn.qkv_proj.{kind}",
                            [f"{attn}.{n}_proj.{kind}" for n in "qkv"]))
            cross = f"model.decoder.layers.{i}.encoder_attn"
            out.append((f"backbone.decoder.layers.{i}.cross_attn.kv_proj.{kind}",
                        [f"{cross}.{n}_proj.{kind}" for n in "kv"]))
    return out


def bart_to_hf(state: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    out = {hf: state[ours].clone() for ours, hf in bart_pairs(cfg) if ours in state}
    out["lm_head.weight"] = state["backbone.encoder.embeddings.token.weight"].clone()
    out["final_logits_bias"] = torch.zeros(1, cfg.vocab_size)
    for ours, parts in _fused(cfg):
        for name, part in zip(parts, state[ours].chunk(len(parts), dim=0)):
            out[name] = part.clone()
    return out


def bart_from_hf(hf: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    bias = hf.get("final_logits_bias")
    if bias is not None and bool(bias.abs().max() > 0):
        raise ConfigError("import: this BART has a non-zero final_logits_bias, which our tied LM head (like fairseq's "
                          "BART) does not hold")
    out = {}
    for ours, key in bart_pairs(cfg):
        if key in hf:
            out[ours] = hf[key].clone()
        elif key.endswith("embed_tokens.weight") or key == "lm_head.weight" or key == "model.shared.weight":
            out[ours] = next(hf[k] for k in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                                             "lm_head.weight") if k in hf).clone()  # tied, often saved once
        else:
            raise ConfigError(f"import: the BART weights have no {key!r}")
    for ours, parts in _fused(cfg):
        out[ours] = torch.cat([hf[name] for name in parts], dim=0)
    return out


def bart_config(cfg: BackboneConfig, special_ids: dict[str, int]) -> dict[str, Any]:
    eos = special_ids.get("eos", 2)
    return {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "vocab_size": cfg.vocab_size,
            "d_model": cfg.hidden_size, "encoder_layers": cfg.num_layers, "decoder_layers": cfg.num_layers,
            "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
            "encoder_ffn_dim": cfg.intermediate_size, "decoder_ffn_dim": cfg.intermediate_size,
            "max_position_embeddings": cfg.max_position_embeddings - POSITION_OFFSET,
            "activation_function": cfg.activation, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
            "activation_dropout": cfg.ffn_dropout, "init_std": cfg.initializer_range, "scale_embedding": cfg.embedding_scale,
            "is_encoder_decoder": True, "tie_word_embeddings": True, "pad_token_id": special_ids.get("pad", 1),
            "bos_token_id": special_ids.get("bos", 0), "eos_token_id": eos, "decoder_start_token_id": eos,
            "forced_eos_token_id": eos}


def bart_from_config(config: dict[str, Any]) -> BackboneConfig:
    layers, heads, ffn = (config.get("encoder_layers", 12), config.get("encoder_attention_heads", 16),
                          config.get("encoder_ffn_dim", 4096))
    if (config.get("decoder_layers", layers), config.get("decoder_attention_heads", heads),
            config.get("decoder_ffn_dim", ffn)) != (layers, heads, ffn):
        raise ConfigError("import: BART with different encoder and decoder shapes is not supported")
    activation = config.get("activation_function", "gelu")
    if activation not in ("gelu", "relu", "gelu_new"):
        raise ConfigError(f"import: bart config field activation_function={activation!r} is not supported; use one "
                          "of gelu, relu, gelu_new")
    eos = config.get("eos_token_id", 2)
    if config.get("decoder_start_token_id", eos) not in (None, eos):
        raise ConfigError(f"import: bart config field decoder_start_token_id={config['decoder_start_token_id']!r} "
                          f"is not supported; plm_lightning starts BART's decoder with </s> ({eos})")
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["d_model"], num_layers=layers, num_heads=heads,
        intermediate_size=ffn, max_position_embeddings=config.get("max_position_embeddings", 1024) + POSITION_OFFSET,
        position_offset=POSITION_OFFSET, type_vocab_size=0, norm_eps=1e-5, norm_position="post", embedding_norm=True,
        activation=activation, embedding_scale=bool(config.get("scale_embedding", False)),
        dropout=config.get("dropout", 0.1), attention_dropout=config.get("attention_dropout", 0.0),
        ffn_dropout=config.get("activation_dropout", 0.0), initializer_range=config.get("init_std", 0.02),
        pad_token_id=config.get("pad_token_id", 1))


class BARTAdapter(FunctionAdapter):
    """BART (``BartForConditionalGeneration``)."""

    families = model_types = ("bart",)
    objective = "Seq2SeqLM"
    state_to_hf, state_from_hf = staticmethod(bart_to_hf), staticmethod(bart_from_hf)
    config_to_hf, config_from_hf = staticmethod(bart_config), staticmethod(bart_from_config)
