"""The checks every objective makes of its data's contract (:mod:`plm_lightning.data_contract`) before it builds:
the tokenizer has the special tokens the objective needs and fits the vocabulary (which follows it when
``model.vocab_size`` is null), the token types fit the segment table, the longest input fits the positions."""

from __future__ import annotations

from typing import Any

from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import BackboneConfig


def config_for_data(cfg: BackboneConfig, data: DataContract, built: bool, follow_vocabulary: bool,
                    required_special_tokens: tuple[str, ...], owner: str, backbone: Any) -> BackboneConfig:
    """``cfg`` checked against ``data`` (and, on a model not built yet, sized by it: the vocabulary when
    ``follow_vocabulary``, the token types). ``owner`` names the model, ``backbone`` its preset, in errors."""
    tokenizer = data.tokenizer
    if tokenizer is not None:
        tokenizer.require(required_special_tokens, f"model {owner}")
        if follow_vocabulary and not built:
            cfg = cfg.replace(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.ids.get("pad", cfg.pad_token_id))
        if tokenizer.vocab_size > cfg.vocab_size:
            raise ConfigError(f"tokenizer '{tokenizer.name}' has {tokenizer.vocab_size} tokens but model.vocab_size="
                              f"{cfg.vocab_size}; raise model.vocab_size or set it to null to follow the tokenizer")
    types = data.token_type_vocab
    if types is not None and not built:
        cfg = cfg.replace(type_vocab_size=types)
    elif types is not None and cfg.type_vocab_size < types:
        raise ConfigError(f"the data has {types} token types (languages) but the model embeds "
                          f"{cfg.type_vocab_size}; set model.backbone_overrides.type_vocab_size={types}")
    longest, limit = data.longest_input, cfg.max_position_embeddings - cfg.position_offset
    if longest is not None and cfg.position_embedding in ("learned", "sinusoidal") and longest > limit:
        grown = f" (inputs of up to {longest} tokens after noise)" if longest != data.seq_len else ""
        raise ConfigError(f"data.seq_len={data.seq_len}{grown} exceeds the model's {limit} positions (model.backbone="
                          f"{backbone!r}); lower data.seq_len or raise max_position_embeddings in "
                          "model.backbone_overrides")
    return cfg
