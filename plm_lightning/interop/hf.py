"""Hugging Face `transformers` layouts <-> our state dicts, kept beside the model, never inside it (torchtitan's
state_dict_adapter split). Families: BERT (`BertForPreTraining`, `BertForMaskedLM`), RoBERTa (`RobertaForMaskedLM`)
and GPT-2 (`GPT2LMHeadModel`). Pure tensor mappings: `transformers` itself is not needed to convert.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.nn.config import BackboneConfig

_ENCODER_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")  # rows of our qkv_proj
_ENCODER_LAYER = {  # ours -> HF, relative to one layer
    "self_attn.o_proj": "attention.output.dense",
    "self_attn_norm": "attention.output.LayerNorm",
    "ffn.fc_in": "intermediate.dense",
    "ffn.fc_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
_GPT2_LAYER = {"self_attn_norm": "ln_1", "self_attn.qkv_proj": "attn.c_attn", "self_attn.o_proj": "attn.c_proj",
               "ffn_norm": "ln_2", "ffn.fc_in": "mlp.c_fc", "ffn.fc_out": "mlp.c_proj"}
ARCHITECTURES = {"bert": "BertForMaskedLM", "bert-nsp": "BertForPreTraining", "roberta": "RobertaForMaskedLM",
                 "gpt2": "GPT2LMHeadModel"}


def _wb(ours: str, hf: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{hf}.weight"), (f"{ours}.bias", f"{hf}.bias")]


def _encoder_pairs(cfg: BackboneConfig, family: str, nsp: bool) -> list[tuple[str, str]]:
    p = "bert" if family == "bert" else "roberta"
    pairs = [("backbone.embeddings.token.weight", f"{p}.embeddings.word_embeddings.weight"),
             ("backbone.embeddings.segment.weight", f"{p}.embeddings.token_type_embeddings.weight"),
             *_wb("backbone.embeddings.norm", f"{p}.embeddings.LayerNorm")]
    for i in range(cfg.num_layers):
        for ours, hf in _ENCODER_LAYER.items():
            pairs += _wb(f"backbone.layers.{i}.{ours}", f"{p}.encoder.layer.{i}.{hf}")
    if family == "bert":
        pairs += [*_wb("lm_head.dense", "cls.predictions.transform.dense"),
                  *_wb("lm_head.norm", "cls.predictions.transform.LayerNorm"),
                  ("lm_head.bias", "cls.predictions.bias"), ("lm_head.bias", "cls.predictions.decoder.bias"),
                  ("lm_head.weight", "cls.predictions.decoder.weight")]
        if nsp:
            pairs += [*_wb("sentence_head.pooler.dense", "bert.pooler.dense"),
                      *_wb("sentence_head.classifier", "cls.seq_relationship")]
    else:
        pairs += [*_wb("lm_head.dense", "lm_head.dense"), *_wb("lm_head.norm", "lm_head.layer_norm"),
                  ("lm_head.bias", "lm_head.bias"), ("lm_head.bias", "lm_head.decoder.bias"),
                  ("lm_head.weight", "lm_head.decoder.weight")]
    return pairs


def _gpt2_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    pairs = [("backbone.embeddings.token.weight", "transformer.wte.weight"),
             ("backbone.embeddings.position.weight", "transformer.wpe.weight"),
             *_wb("backbone.final_norm", "transformer.ln_f"), ("lm_head.weight", "lm_head.weight")]
    for i in range(cfg.num_layers):
        for ours, hf in _GPT2_LAYER.items():
            pairs += _wb(f"backbone.layers.{i}.{ours}", f"transformer.h.{i}.{hf}")
    return pairs


def _is_conv1d(hf_key: str) -> bool:
    return hf_key.endswith(".weight") and any(s in hf_key for s in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))


def family_of(state: dict[str, Tensor], cfg: BackboneConfig, objective: str, tokenizer_kind: str | None,
              sentence_prediction: str = "none") -> str:
    """Which transformers architecture a checkpoint of ours exports to, or a ConfigError saying why none fits."""
    if objective == "CausalLM":
        wanted = dict(norm_position="pre", norm="layernorm", activation="gelu_new", position_embedding="learned",
                      type_vocab_size=0, bias=True, embedding_size=None, layer_sharing="none")
        bad = [k for k, v in wanted.items() if getattr(cfg, k) != v]
        if bad:
            raise ConfigError(f"export: this CausalLM differs from GPT-2 in {bad}; GPT2LMHeadModel cannot hold it")
        return "gpt2"
    if objective != "MaskedLM":
        raise ConfigError(f"export: no transformers counterpart is wired for objective {objective!r}")
    wanted = dict(norm_position="post", norm="layernorm", position_embedding="learned", bias=True,
                  embedding_size=None, layer_sharing="none")
    bad = [k for k, v in wanted.items() if getattr(cfg, k) != v]
    if cfg.activation not in ("gelu", "relu", "gelu_new"):
        bad.append("activation")
    if bad:
        raise ConfigError(f"export: this MaskedLM differs from BERT/RoBERTa in {bad}; no transformers class holds it")
    if sentence_prediction == "sop":
        raise ConfigError("export: ALBERT's SOP head (AlbertForPreTraining) is not wired yet; export covers BERT, "
                          "RoBERTa and GPT-2")
    if sentence_prediction == "nsp":
        return "bert-nsp"
    return "roberta" if tokenizer_kind == "bpe" or cfg.type_vocab_size == 1 else "bert"


def to_hf(state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """Our state dict (a LightningModule's) to the transformers layout of ``family``."""
    out: dict[str, Tensor] = {}
    if family == "gpt2":
        for ours, hf in _gpt2_pairs(cfg):
            t = state[ours]
            out[hf] = t.t().contiguous() if _is_conv1d(hf) else t.clone()
        return out
    base = "bert" if family.startswith("bert") else "roberta"
    for ours, hf in _encoder_pairs(cfg, "bert" if base == "bert" else "roberta", family == "bert-nsp"):
        if ours in state:
            out[hf] = state[ours].clone()
    for i in range(cfg.num_layers):
        for kind in ("weight", "bias"):
            fused = state[f"backbone.layers.{i}.self_attn.qkv_proj.{kind}"]
            for name, part in zip(_ENCODER_QKV, fused.chunk(3, dim=0)):
                out[f"{base}.encoder.layer.{i}.{name}.{kind}"] = part.clone()
    positions = state["backbone.embeddings.position.weight"][cfg.position_offset:]
    if base == "roberta":  # RoBERTa counts positions from padding_idx + 1
        offset = cfg.pad_token_id + 1
        table = torch.zeros(offset + positions.shape[0], positions.shape[1], dtype=positions.dtype)
        table[offset:] = positions
        positions = table
    out[f"{base}.embeddings.position_embeddings.weight"] = positions.clone()
    if base == "roberta" and f"{base}.embeddings.token_type_embeddings.weight" not in out:
        out[f"{base}.embeddings.token_type_embeddings.weight"] = torch.zeros(1, cfg.hidden_size)
    return out


def from_hf(hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """A transformers state dict of ``family`` to our layout (``cfg`` from :func:`config_from_hf`)."""
    out: dict[str, Tensor] = {}
    if family == "gpt2":
        for ours, key in _gpt2_pairs(cfg):
            if key == "lm_head.weight" and key not in hf:
                key = "transformer.wte.weight"  # tied, often not saved
            t = hf[key]
            out[ours] = t.t().contiguous() if _is_conv1d(key) else t.clone()
        return out
    base = "bert" if family.startswith("bert") else "roberta"
    for ours, key in _encoder_pairs(cfg, base, family == "bert-nsp"):
        if key in hf:
            out[ours] = hf[key].clone()
        elif key.endswith("decoder.weight"):
            out[ours] = hf[f"{base}.embeddings.word_embeddings.weight"].clone()
    for i in range(cfg.num_layers):
        for kind in ("weight", "bias"):
            parts = [hf[f"{base}.encoder.layer.{i}.{name}.{kind}"] for name in _ENCODER_QKV]
            out[f"backbone.layers.{i}.self_attn.qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    out["backbone.embeddings.position.weight"] = hf[f"{base}.embeddings.position_embeddings.weight"].clone()
    return out


def hf_config(cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
    """The ``config.json`` of the exported model."""
    arch = ARCHITECTURES[family]
    if family == "gpt2":
        eos = special_ids.get("eos", cfg.vocab_size - 1)
        return {"model_type": "gpt2", "architectures": [arch], "vocab_size": cfg.vocab_size,
                "n_positions": cfg.max_position_embeddings, "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers,
                "n_head": cfg.num_heads, "n_inner": cfg.intermediate_size, "activation_function": "gelu_new",
                "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.attention_dropout,
                "layer_norm_epsilon": cfg.norm_eps, "initializer_range": cfg.initializer_range,
                "bos_token_id": special_ids.get("bos", eos), "eos_token_id": eos, "tie_word_embeddings": True}
    common = {"architectures": [arch], "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
              "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
              "intermediate_size": cfg.intermediate_size, "hidden_act": cfg.activation,
              "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
              "type_vocab_size": max(1, cfg.type_vocab_size), "initializer_range": cfg.initializer_range,
              "layer_norm_eps": cfg.norm_eps, "pad_token_id": cfg.pad_token_id, "tie_word_embeddings": True}
    usable = cfg.max_position_embeddings - cfg.position_offset
    if family.startswith("bert"):
        return {"model_type": "bert", "max_position_embeddings": usable, **common}
    return {"model_type": "roberta", "max_position_embeddings": usable + cfg.pad_token_id + 1,
            "bos_token_id": special_ids.get("cls", 0), "eos_token_id": special_ids.get("sep", 2), **common}


def config_from_hf(config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
    """(family, our BackboneConfig, our objective class name) of a transformers ``config.json``."""
    model_type = config.get("model_type")
    if model_type == "gpt2":
        h = config["n_embd"]
        cfg = BackboneConfig(vocab_size=config["vocab_size"], hidden_size=h, num_layers=config["n_layer"],
                             num_heads=config["n_head"], intermediate_size=config.get("n_inner") or 4 * h,
                             max_position_embeddings=config["n_positions"], type_vocab_size=0,
                             norm_eps=config.get("layer_norm_epsilon", 1e-5), norm_position="pre",
                             embedding_norm=False, activation="gelu_new", scale_residual_init=True,
                             dropout=config.get("resid_pdrop", 0.1), attention_dropout=config.get("attn_pdrop", 0.1),
                             initializer_range=config.get("initializer_range", 0.02),
                             pad_token_id=config.get("eos_token_id") or 0)
        return "gpt2", cfg, "CausalLM"
    if model_type not in ("bert", "roberta"):
        raise ConfigError(f"import: model_type {model_type!r} is not supported; supported: bert, roberta, gpt2")
    pad = config.get("pad_token_id", 0 if model_type == "bert" else 1) or 0
    cfg = BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], intermediate_size=config["intermediate_size"],
        max_position_embeddings=config["max_position_embeddings"], type_vocab_size=config.get("type_vocab_size", 2),
        activation=config.get("hidden_act", "gelu"), norm_eps=config.get("layer_norm_eps", 1e-12),
        dropout=config.get("hidden_dropout_prob", 0.1), attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer_range=config.get("initializer_range", 0.02), pad_token_id=pad,
        position_offset=pad + 1 if model_type == "roberta" else 0,
    )
    archs = config.get("architectures") or []
    family = "bert-nsp" if "BertForPreTraining" in archs else model_type
    return family, cfg, "MaskedLM"
