"""T5 / T5.1.1 / mT5 (``T5ForConditionalGeneration``, ``MT5ForConditionalGeneration``) <-> our ``Seq2SeqLM``.

transformers keeps q, k, v apart (we fuse them: ``qkv_proj`` in self-attention, ``kv_proj`` in cross-attention),
calls the gated FFN's two inputs ``wi_0`` (through the activation) and ``wi_1`` (our ``fc_gate`` and ``fc_in``),
and holds each stack's relative position buckets in its first block.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FamilyAdapter
from plm_lightning.nn.config import BackboneConfig

ARCHITECTURES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration"}
FEED_FORWARD = {"relu": "relu", "gelu_new": "gelu_new", "gelu": "gelu", "silu": "silu", "geglu_tanh": "gated-gelu",
                "swiglu": "gated-silu", "reglu": "gated-relu"}
"""Our activation -> T5's ``feed_forward_proj`` (``gated-gelu`` is T5.1.1's gelu_new gate)."""
GATED = ("geglu_tanh", "swiglu", "reglu")


def _ffn_pairs(cfg: BackboneConfig, ours: str, hf: str) -> list[tuple[str, str]]:
    if cfg.activation in GATED:
        return [(f"{ours}.ffn.fc_gate.weight", f"{hf}.DenseReluDense.wi_0.weight"),
                (f"{ours}.ffn.fc_in.weight", f"{hf}.DenseReluDense.wi_1.weight"),
                (f"{ours}.ffn.fc_out.weight", f"{hf}.DenseReluDense.wo.weight")]
    return [(f"{ours}.ffn.fc_in.weight", f"{hf}.DenseReluDense.wi.weight"),
            (f"{ours}.ffn.fc_out.weight", f"{hf}.DenseReluDense.wo.weight")]


def t5_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor renamed one to one (the fused projections are split/joined apart)."""
    pairs = [("backbone.encoder.embeddings.token.weight", "shared.weight"),
             ("backbone.encoder.embeddings.token.weight", "encoder.embed_tokens.weight"),
             ("backbone.decoder.embeddings.token.weight", "decoder.embed_tokens.weight"),
             ("backbone.encoder.final_norm.weight", "encoder.final_layer_norm.weight"),
             ("backbone.decoder.final_norm.weight", "decoder.final_layer_norm.weight"),
             ("backbone.encoder.relative_bias.embedding.weight",
              "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
             ("backbone.decoder.relative_bias.embedding.weight",
              "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
             ("lm_head.weight", "lm_head.weight")]
    for i in range(cfg.num_layers):
        enc, dec = f"backbone.encoder.layers.{i}", f"backbone.decoder.layers.{i}"
        hf_enc, hf_dec = f"encoder.block.{i}.layer", f"decoder.block.{i}.layer"
        pairs += [(f"{enc}.self_attn.o_proj.weight", f"{hf_enc}.0.SelfAttention.o.weight"),
                  (f"{enc}.self_attn_norm.weight", f"{hf_enc}.0.layer_norm.weight"),
                  (f"{enc}.ffn_norm.weight", f"{hf_enc}.1.layer_norm.weight"), *_ffn_pairs(cfg, enc, f"{hf_enc}.1"),
                  (f"{dec}.self_attn.o_proj.weight", f"{hf_dec}.0.SelfAttention.o.weight"),
                  (f"{dec}.self_attn_norm.weight", f"{hf_dec}.0.layer_norm.weight"),
                  (f"{dec}.cross_attn.q_proj.weight", f"{hf_dec}.1.EncDecAttention.q.weight"),
                  (f"{dec}.cross_attn.o_proj.weight", f"{hf_dec}.1.EncDecAttention.o.weight"),
                  (f"{dec}.cross_attn_norm.weight", f"{hf_dec}.1.layer_norm.weight"),
                  (f"{dec}.ffn_norm.weight", f"{hf_dec}.2.layer_norm.weight"), *_ffn_pairs(cfg, dec, f"{hf_dec}.2")]
    return pairs


def _fused(cfg: BackboneConfig) -> list[tuple[str, list[str]]]:
    """(our fused projection, the HF tensors it stacks, in order)."""
    out = []
    for i in range(cfg.num_layers):
        for stack in ("encoder", "decoder"):
            attn = f"{stack}.block.{i}.layer.0.SelfAttention"
            out.append((f"backbone.{stack}.layers.{i}.self_attn.qkv_proj.weight",
                        [f"{attn}.{n}.weight" for n in "qkv"]))
        cross = f"decoder.block.{i}.layer.1.EncDecAttention"
        out.append((f"backbone.decoder.layers.{i}.cross_attn.kv_proj.weight", [f"{cross}.{n}.weight" for n in "kv"]))
    return out


def t5_to_hf(state: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    """transformers >= 5 ties every T5's LM head to the shared embedding (huggingface/transformers#42815,
    #48154): an untied T5.1.1 head written here loads faithfully in transformers 4 (the Hub checkpoints' format);
    version 5 replaces it with the embedding, so a warning says so."""
    if not cfg.tie_word_embeddings:
        import warnings

        warnings.warn("export: this T5.1.1 has its own LM head; transformers >= 5 ties T5's LM head to the shared "
                      "embedding when loading (huggingface/transformers#48154), so load it with transformers 4 or "
                      "re-import it here", stacklevel=2)
    out = {hf: state[ours].clone() for ours, hf in t5_pairs(cfg) if ours in state}
    if cfg.tie_word_embeddings:
        out["lm_head.weight"] = state["backbone.encoder.embeddings.token.weight"].clone()
    for ours, parts in _fused(cfg):
        for name, part in zip(parts, state[ours].chunk(len(parts), dim=0)):
            out[name] = part.clone()
    return out


def t5_from_hf(hf: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    out = {}
    for ours, key in t5_pairs(cfg):
        if key in hf:
            out[ours] = hf[key].clone()
        elif key.endswith("embed_tokens.weight") or (key == "lm_head.weight" and cfg.tie_word_embeddings):
            out[ours] = hf["shared.weight"].clone()  # tied, often not saved
        else:
            raise ConfigError(f"import: the T5 weights have no {key!r}")
    for ours, parts in _fused(cfg):
        out[ours] = torch.cat([hf[name] for name in parts], dim=0)
    return out


def t5_config(cfg: BackboneConfig, special_ids: dict[str, int], model_type: str = "t5") -> dict[str, Any]:
    pad = special_ids.get("pad", cfg.pad_token_id)
    return {"model_type": model_type, "architectures": [ARCHITECTURES[model_type]], "vocab_size": cfg.vocab_size,
            "d_model": cfg.hidden_size, "d_kv": cfg.head_dim, "d_ff": cfg.intermediate_size,
            "num_layers": cfg.num_layers, "num_decoder_layers": cfg.num_layers, "num_heads": cfg.num_heads,
            "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
            "relative_attention_max_distance": cfg.relative_attention_max_distance, "dropout_rate": cfg.dropout,
            "layer_norm_epsilon": cfg.norm_eps, "initializer_factor": cfg.initializer_range,
            "feed_forward_proj": FEED_FORWARD[cfg.activation],
            # T5 v1.0 = tied + scaled; anything unscaled is written as T5.1.1 (tie_word_embeddings false, its own
            # lm_head tensor): transformers 4 reads that as untied, 5 as tied-unscaled, the same logits when our
            # head is tied. An untied head of ours needs transformers < 5 (see t5_to_hf)
            "tie_word_embeddings": cfg.tie_word_embeddings and cfg.tied_output_scaling, "is_encoder_decoder": True,
            "pad_token_id": pad, "eos_token_id": special_ids.get("eos", 1), "decoder_start_token_id": pad}


def t5_from_config(config: dict[str, Any]) -> BackboneConfig:
    proj = config.get("feed_forward_proj", "relu")
    ours = {v: k for k, v in FEED_FORWARD.items()}
    proj = {"gated-swish": "gated-silu", "swish": "silu", "gated-gelu_new": "gated-gelu"}.get(proj, proj)
    if proj not in ours:
        raise ConfigError(f"import: {config.get('model_type', 't5')} config field feed_forward_proj={proj!r} is not "
                          f"supported; use one of {', '.join(ours)}")
    pad = config.get("pad_token_id", 0) or 0
    if config.get("decoder_start_token_id", pad) not in (None, pad):
        raise ConfigError(f"import: {config.get('model_type', 't5')} config field decoder_start_token_id="
                          f"{config['decoder_start_token_id']!r} is not supported; plm_lightning starts T5's decoder "
                          f"with the padding token ({pad})")
    if config.get("num_decoder_layers") not in (None, config["num_layers"]):
        raise ConfigError("import: T5 with a different number of encoder and decoder layers is not supported")
    d, heads = config["d_model"], config["num_heads"]
    if config.get("d_kv", d // heads) * heads != d:
        raise ConfigError(f"import: T5 with d_kv * num_heads != d_model ({config.get('d_kv')} x {heads} != {d}) is "
                          "not supported")
    tied = config.get("tie_word_embeddings", True)
    # transformers >= 5 always ties T5's LM head and keeps the old flag's other meaning, the d_model^-1/2 scaling,
    # in scale_decoder_outputs (huggingface/transformers#42815); older configs say both with tie_word_embeddings.
    # mT5 is T5.1.1 and never scales
    scaled = config.get("scale_decoder_outputs", tied and config.get("model_type") != "mt5")
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=d, num_layers=config["num_layers"], num_heads=heads,
        intermediate_size=config["d_ff"], type_vocab_size=0, position_embedding="t5_relative", norm="rmsnorm",
        norm_eps=config.get("layer_norm_epsilon", 1e-6), norm_position="pre", embedding_norm=False,
        activation=ours[proj], bias=False,
        dropout=config.get("dropout_rate", 0.1), attention_dropout=config.get("dropout_rate", 0.1),
        ffn_dropout=config.get("dropout_rate", 0.1), tie_word_embeddings=tied, tied_output_scaling=tied and scaled,
        relative_attention_num_buckets=config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=config.get("relative_attention_max_distance", 128),
        initialization="t5", initializer_range=config.get("initializer_factor", 1.0),
        pad_token_id=pad)


class T5Adapter(FamilyAdapter):
    """T5 and mT5 (``T5ForConditionalGeneration``, ``MT5ForConditionalGeneration``)."""

    families = model_types = tuple(ARCHITECTURES)

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        return t5_to_hf(state, cfg)

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        return t5_from_hf(hf, cfg)

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        return t5_config(cfg, special_ids, family)

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        return config["model_type"], t5_from_config(config), "Seq2SeqLM"
