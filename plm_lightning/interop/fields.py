"""Every field of the transformers config classes that ``import`` reads, classified, so none is silently ignored.

A field is

- :class:`Honoured`: read into our :class:`~plm_lightning.nn.config.BackboneConfig` (or the objective's
  hyper-parameters) and computed as transformers computes it. ``tests/test_interop_fields.py`` runs a parity check
  with a non-default value of each: logits to 1e-4, or, for what does not show in eval logits (dropout rates, the
  initialiser), the value carried into the config attribute named by ``carried``;
- :class:`Fixed`: the model we build computes what these values mean, and only those; any other value is refused at
  import with one line naming the field and its value (:func:`refuse_unsupported`);
- :class:`Inert`: it cannot change what the imported model computes (a task head's setting, a generation default,
  what the forward returns).

The tables cover every field of each config class (the test enumerates them from the class, so a field a later
transformers release adds fails it until it is classified) and the ``LEGACY`` keys older releases wrote and read.
Other keys of a ``config.json`` are not read by transformers either, and are ignored here as there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plm_lightning.errors import ConfigError


@dataclass(frozen=True)
class Honoured:
    """Read and computed as transformers does; ``carried``: the config attribute a value lands in when it does not
    show in eval logits."""

    carried: str | None = None


@dataclass(frozen=True)
class Fixed:
    """Only these values are computed; others are refused."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Inert:
    """Does not change what the imported model computes, for the reason given."""

    why: str


Rule = Honoured | Fixed | Inert

_OUTPUTS = Inert("what the forward returns, not what it computes")
_TASK = Inert("a task head's setting; import reads the pretraining model")
_GENERATION = Inert("a generation or cache default, not part of the forward")
_TOKEN = Inert("a special token's id, which the imported tokenizer carries; no weight or position depends on it")
_STORAGE = Inert("how the file was written (release, path, storage dtype); the weights are read as stored")
_CHUNKS = Inert("the feed-forward run in chunks of positions: the same numbers")
_INIT = Inert("how fresh weights are drawn; import reads every weight")
_KERNEL = Inert("which attention kernel transformers runs; ours picks its own, same numbers")

COMMON: dict[str, Rule] = {
    "transformers_version": _STORAGE, "_name_or_path": _STORAGE, "dtype": _STORAGE,
    "architectures": Honoured(),  # picks the head layout (pre-training, MLM, LM head)
    "output_hidden_states": _OUTPUTS, "output_attentions": _OUTPUTS, "return_dict": _OUTPUTS,
    "chunk_size_feed_forward": _CHUNKS, "id2label": _TASK, "label2id": _TASK, "problem_type": _TASK,
}
"""PretrainedConfig's own fields, in every table; ``model_type`` is the key of the table itself."""

LEGACY: dict[str, Rule] = {
    "torch_dtype": _STORAGE, "gradient_checkpointing": Inert("recomputes activations in training: same numbers"),
    "_attn_implementation": _KERNEL, "pruned_heads": Fixed(({},)), "tie_encoder_decoder": Fixed((False,)),
    "torchscript": Inert("traces the model; the weights and the forward are the same"),
    "use_return_dict": _OUTPUTS,
}
"""Keys older transformers releases wrote and read, in every table."""

_ENCODER: dict[str, Rule] = {
    "vocab_size": Honoured(), "hidden_size": Honoured(), "num_hidden_layers": Honoured(),
    "num_attention_heads": Honoured(), "intermediate_size": Honoured(), "hidden_act": Honoured(),
    "hidden_dropout_prob": Honoured("dropout"), "attention_probs_dropout_prob": Honoured("attention_dropout"),
    "max_position_embeddings": Honoured(), "type_vocab_size": Honoured(), "initializer_range": Honoured(
        "initializer_range"), "layer_norm_eps": Honoured(), "pad_token_id": Honoured("pad_token_id"),
    "bos_token_id": _TOKEN, "eos_token_id": _TOKEN, "tie_word_embeddings": Fixed((True,)),
    "is_encoder_decoder": Fixed((False,)), "position_embedding_type": Fixed(("absolute",)),
}
_DECODER_SWITCHES: dict[str, Rule] = {
    "use_cache": _GENERATION, "classifier_dropout": _TASK, "is_decoder": Fixed((False,)),
    "add_cross_attention": Fixed((False,)), "cross_attention_hidden_size": Fixed((None,)),
}
_SUMMARY: dict[str, Rule] = {k: _TASK for k in ("summary_type", "summary_use_proj", "summary_activation",
                                                 "summary_last_dropout", "summary_first_dropout",
                                                 "summary_proj_to_labels")}

FIELDS: dict[str, dict[str, Rule]] = {
    "bert": {**_ENCODER, **_DECODER_SWITCHES},
    "roberta": {**_ENCODER, **_DECODER_SWITCHES},
    "electra": {**_ENCODER, **_DECODER_SWITCHES, **_SUMMARY, "embedding_size": Honoured()},
    "albert": {**_ENCODER, "embedding_size": Honoured(), "num_hidden_groups": Fixed((1,)),
               "inner_group_num": Fixed((1,)), "classifier_dropout_prob": _TASK},
    "deberta-v2": {
        **_ENCODER, "layer_norm_eps": Honoured(), "relative_attention": Fixed((True,)),
        "max_relative_positions": Honoured(), "position_biased_input": Honoured(), "pos_att_type": Fixed(
            (["p2c", "c2p"], ["c2p", "p2c"], "p2c|c2p", "c2p|p2c")), "position_buckets": Honoured(),
        "share_att_key": Honoured(), "norm_rel_ebd": Honoured(), "conv_kernel_size": Honoured(),
        "conv_act": Honoured(), "conv_groups": Fixed((1,)), "legacy": Honoured(), "embedding_size": Fixed((None,)),
        "attention_head_size": Fixed((None,)), "pooler_dropout": _TASK, "pooler_hidden_act": _TASK,
        "pooler_hidden_size": _TASK, "cls_dropout": _TASK},
    "modernbert": {
        "vocab_size": Honoured(), "hidden_size": Honoured(), "intermediate_size": Honoured(),
        "num_hidden_layers": Honoured(), "num_attention_heads": Honoured(), "hidden_activation": Fixed(("gelu",)),
        "max_position_embeddings": Honoured(), "initializer_range": Honoured("initializer_range"),
        "initializer_cutoff_factor": _INIT, "norm_eps": Honoured(), "norm_bias": Honoured(),
        "attention_bias": Honoured(), "mlp_bias": Honoured(), "classifier_bias": Honoured(),
        "decoder_bias": Fixed((True,)), "pad_token_id": Honoured("pad_token_id"), "eos_token_id": _TOKEN,
        "bos_token_id": _TOKEN, "cls_token_id": _TOKEN, "sep_token_id": _TOKEN,
        "attention_dropout": Honoured("attention_dropout"), "embedding_dropout": Honoured("dropout"),
        "mlp_dropout": Fixed((0.0,)), "layer_types": Honoured(), "rope_parameters": Honoured(),
        "global_rope_theta": Honoured(), "local_rope_theta": Honoured(), "global_attn_every_n_layers": Honoured(),
        "local_attention": Honoured(), "classifier_pooling": _TASK, "classifier_dropout": _TASK,
        "classifier_activation": Fixed(("gelu",)), "deterministic_flash_attn": _KERNEL,
        "sparse_prediction": Inert("which positions get logits in training; the logits are the same"),
        "sparse_pred_ignore_index": Inert("the label that marks positions without loss"),
        "tie_word_embeddings": Fixed((True,)), "is_encoder_decoder": Fixed((False,)), "head_dim": Fixed((None,)),
        "reference_compile": _KERNEL, "repad_logits_with_grad": _OUTPUTS},
    "gpt2": {
        "vocab_size": Honoured(), "n_positions": Honoured(), "n_embd": Honoured(), "n_layer": Honoured(),
        "n_head": Honoured(), "n_inner": Honoured(), "activation_function": Honoured(),
        "resid_pdrop": Honoured("dropout"), "embd_pdrop": Honoured("dropout"),
        "attn_pdrop": Honoured("attention_dropout"), "layer_norm_epsilon": Honoured(),
        "initializer_range": Honoured("initializer_range"), **_SUMMARY, "scale_attn_weights": Honoured(),
        "scale_attn_by_inverse_layer_idx": Honoured(), "reorder_and_upcast_attn": Honoured(),
        "use_cache": _GENERATION, "bos_token_id": _TOKEN, "eos_token_id": _TOKEN,
        "pad_token_id": _TOKEN, "add_cross_attention": Fixed((False,)), "tie_word_embeddings": Fixed((True,)),
        "is_encoder_decoder": Fixed((False,)), "classifier_dropout": _TASK},
    "t5": {
        "vocab_size": Honoured(), "d_model": Honoured(), "d_kv": Honoured(), "d_ff": Honoured(),
        "num_layers": Honoured(), "num_decoder_layers": Honoured(), "num_heads": Honoured(),
        "relative_attention_num_buckets": Honoured(), "relative_attention_max_distance": Honoured(),
        "dropout_rate": Honoured("dropout"), "layer_norm_epsilon": Honoured(),
        "initializer_factor": Honoured("initializer_range"), "feed_forward_proj": Honoured(),
        "dense_act_fn": Inert("T5Config derives it from feed_forward_proj"),
        "is_gated_act": Inert("T5Config derives it from feed_forward_proj"), "use_cache": _GENERATION,
        "pad_token_id": Honoured("pad_token_id"), "eos_token_id": _TOKEN, "bos_token_id": _TOKEN,
        "decoder_start_token_id": Honoured(), "classifier_dropout": _TASK, "is_decoder": Fixed((False,)),
        "is_encoder_decoder": Fixed((True,)), "scale_decoder_outputs": Honoured(), "tie_word_embeddings": Honoured()},
    "bart": {
        "vocab_size": Honoured(), "max_position_embeddings": Honoured(), "d_model": Honoured(),
        "encoder_layers": Honoured(), "encoder_ffn_dim": Honoured(), "encoder_attention_heads": Honoured(),
        "decoder_layers": Honoured(), "decoder_ffn_dim": Honoured(), "decoder_attention_heads": Honoured(),
        "encoder_layerdrop": Fixed((0.0,)), "decoder_layerdrop": Fixed((0.0,)), "activation_function": Honoured(),
        "dropout": Honoured("dropout"), "attention_dropout": Honoured("attention_dropout"),
        "activation_dropout": Honoured("ffn_dropout"), "init_std": Honoured("initializer_range"),
        "classifier_dropout": _TASK, "scale_embedding": Honoured(), "use_cache": _GENERATION,
        "pad_token_id": Honoured("pad_token_id"), "bos_token_id": _TOKEN, "eos_token_id": _TOKEN,
        "decoder_start_token_id": Honoured(), "forced_eos_token_id": _GENERATION,
        "forced_bos_token_id": _GENERATION, "is_decoder": Fixed((False,)), "is_encoder_decoder": Fixed((True,)),
        "tie_word_embeddings": Fixed((True,)), "num_hidden_layers": Inert("an alias of encoder_layers"),
        "normalize_before": Fixed((False,)), "add_final_layer_norm": Fixed((False,)),
        "normalize_embedding": Fixed((True,)), "static_position_embeddings": Fixed((False,)),
        "add_bias_logits": Fixed((False,)), "extra_pos_embeddings": Fixed((2,))},
    "xlnet": {
        "vocab_size": Honoured(), "d_model": Honoured(), "n_layer": Honoured(), "n_head": Honoured(),
        "d_inner": Honoured(), "d_head": Honoured(), "ff_activation": Honoured(), "attn_type": Fixed(("bi",)),
        "initializer_range": Honoured("initializer_range"), "layer_norm_eps": Honoured(),
        "dropout": Honoured("dropout"), "mem_len": Honoured("mem_len"),
        "reuse_len": Fixed((None, 0)), "use_mems_eval": _OUTPUTS, "use_mems_train": _OUTPUTS,
        "bi_data": Honoured("bidirectional_data"), "clamp_len": Honoured(), "same_length": Fixed((False,)),
        **_SUMMARY, "start_n_top": _TASK, "end_n_top": _TASK, "pad_token_id": Honoured("pad_token_id"),
        "bos_token_id": _TOKEN, "eos_token_id": _TOKEN, "tie_word_embeddings": Fixed((True,)),
        "untie_r": Fixed((True,)), "is_encoder_decoder": Fixed((False,))},
}
FIELDS["mt5"] = FIELDS["t5"]
for _table in FIELDS.values():
    for _key, _rule in {**COMMON, **LEGACY}.items():
        _table.setdefault(_key, _rule)


def refuse_unsupported(config: dict[str, Any]) -> None:
    """One :class:`ConfigError` line for the first field of ``config`` whose value the imported model would not
    compute (a :class:`Fixed` field off its values)."""
    model_type = config.get("model_type")
    table = FIELDS.get(model_type)
    if table is None:
        return  # config_from_hf names the supported model types
    for key, value in config.items():
        rule = table.get(key)
        if isinstance(rule, Fixed) and value not in rule.values:
            allowed = " or ".join(repr(v) for v in rule.values)
            raise ConfigError(f"import: {model_type} config field {key}={value!r} is not supported; plm_lightning "
                              f"computes {key}={allowed} only")
