"""Hugging Face `transformers` layouts <-> our state dicts, kept beside the model, never inside it (torchtitan's
state_dict_adapter split). Families: BERT (`BertForPreTraining`, `BertForMaskedLM`), RoBERTa (`RobertaForMaskedLM`),
ALBERT (`AlbertForPreTraining`, `AlbertForMaskedLM`), ELECTRA (`ElectraForPreTraining` discriminator,
`ElectraForMaskedLM` generator), DeBERTa-v2/v3 (`DebertaV2ForMaskedLM`), ModernBERT
(`ModernBertForMaskedLM`), GPT-2 (`GPT2LMHeadModel`), T5 / mT5 (`T5ForConditionalGeneration`, ``interop.t5``),
BART (`BartForConditionalGeneration`, ``interop.bart``) and XLNet (`XLNetLMHeadModel`, ``interop.xlnet``).
Pure tensor mappings: `transformers` itself is not needed to convert.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FamilyAdapter
from plm_lightning.interop.bart import BARTAdapter
from plm_lightning.interop.encoders import EncoderAdapter
from plm_lightning.interop.fields import refuse_unsupported
from plm_lightning.interop.gpt2 import GPT2_ACTIVATIONS, GPT2Adapter
from plm_lightning.interop.modernbert import ModernBERTAdapter
from plm_lightning.interop.t5 import FEED_FORWARD, T5Adapter
from plm_lightning.interop.xlnet import XLNetAdapter
from plm_lightning.nn.config import BackboneConfig

ADAPTERS: tuple[FamilyAdapter, ...] = (EncoderAdapter(), ModernBERTAdapter(), GPT2Adapter(), T5Adapter(), BARTAdapter(),
                                       XLNetAdapter())
"""One adapter per transformers family (``interop.adapter.FamilyAdapter``); ``to_hf``, ``from_hf``, ``hf_config``
and ``config_from_hf`` below only pick one."""
BY_FAMILY = {family: adapter for adapter in ADAPTERS for family in adapter.families}
BY_MODEL_TYPE = {model_type: adapter for adapter in ADAPTERS for model_type in adapter.model_types}

SWITCHES = dict(scale_attention_by_head_dim=True, scale_attention_by_layer=False, upcast_attention=False,
                embedding_scale=False, positions_from_padding=False, position_biased_input=False)
"""Switches most transformers families cannot express: off (their default) unless a family allows them."""
PARTS = ("attention", "ffn", "norm", "head")
"""The per-part bias switches (``BackboneConfig.attention_bias`` ...): only ModernBERT sets them apart."""


def head_activation(cfg: BackboneConfig) -> str:
    """The activation our LM head's transform applies (see :class:`~plm_lightning.nn.heads.LMHead`)."""
    act = cfg.head_activation or cfg.activation
    return act if act in ("gelu", "gelu_new", "relu", "silu") else "gelu"


def differences(cfg: BackboneConfig, wanted: dict[str, Any], activations: tuple[str, ...] | None = None,
                allows: tuple[str, ...] = ()) -> list[str]:
    """The config fields that keep ``cfg`` out of a transformers architecture: each ``wanted`` value it lacks, each
    of :data:`SWITCHES` not in ``allows`` that is on, and ``activation`` when it is not one of ``activations``."""
    wanted = {**{k: v for k, v in SWITCHES.items() if k not in allows}, **wanted}
    bad = [k for k, v in wanted.items() if getattr(cfg, k) != v]
    if "part_biases" not in allows:  # one bias switch for the whole model
        bad += [f"{part}_bias" for part in PARTS if getattr(cfg, f"{part}_bias") not in (None, cfg.bias)]
    return bad + (["activation"] if activations is not None and cfg.activation not in activations else [])


BASE_FAMILY = {"bert-nsp": "bert", "albert-sop": "albert", "deberta-v2-encoder": "deberta-v2"}
"""A layout with a pre-training head -> the family of its bare model."""


def family_of(cfg: BackboneConfig, objective: str, sentence_prediction: str = "none", part: str = "discriminator",
              recorded: str | None = None) -> str:
    """Which transformers architecture a model of ours exports to, or a ConfigError saying why none fits.

    The answer follows from what the model computes (its config, objective and heads), never from its tokenizer.
    ``recorded``: the family its checkpoint records (imported, or decided when it was first saved); it picks
    between layouts that compute the same (a BERT-shaped ELECTRA generator, DeBERTa's two MLM heads), and a model
    that no longer fits it is refused rather than written as another family."""
    family = _family_of(cfg, objective, sentence_prediction, part, recorded)
    if recorded is not None and _base(family) != _base(recorded):
        raise ConfigError(f"export: the checkpoint records family {recorded!r}, but its model now fits {family!r} "
                          "(its backbone or heads changed since); refusing to write another family")
    return family


def _base(family: str) -> str:
    base = BASE_FAMILY.get(family, family)
    return {"electra-generator": "electra", "deberta-v2-lm": "deberta-v2", "mt5": "t5"}.get(base, base)


def _family_of(cfg: BackboneConfig, objective: str, sentence_prediction: str, part: str,
               recorded: str | None) -> str:
    if objective == "CausalLM":
        wanted = dict(norm_position="pre", norm="layernorm", position_embedding="learned",
                      type_vocab_size=0, bias=True, embedding_size=None, layer_sharing="none")
        bad = differences(cfg, wanted, tuple(GPT2_ACTIVATIONS),
                          ("scale_attention_by_head_dim", "scale_attention_by_layer", "upcast_attention"))
        if bad:
            raise ConfigError(f"export: this CausalLM differs from GPT-2 in {bad}; GPT2LMHeadModel cannot hold it")
        return "gpt2"
    if objective == "PermutationLM":
        wanted = dict(norm="layernorm", norm_position="post", relative_segments=True, type_vocab_size=0,
                      embedding_norm=False, embedding_size=None, layer_sharing="none", tie_word_embeddings=True)
        bad = differences(cfg, wanted, ("gelu", "relu", "gelu_new"))
        if bad:
            raise ConfigError(f"export: this PermutationLM differs from XLNet in {bad}; XLNetLMHeadModel cannot hold it")
        return "xlnet"
    if objective == "Seq2SeqLM" and cfg.position_embedding == "learned":
        wanted = dict(norm="layernorm", norm_position="post", bias=True, embedding_norm=True, type_vocab_size=0,
                      embedding_size=None, layer_sharing="none", position_offset=2, tie_word_embeddings=True,
                      tied_output_scaling=False, task_type_vocab_size=0)
        bad = differences(cfg, wanted, ("gelu", "relu", "gelu_new"), ("embedding_scale",))
        if bad:
            raise ConfigError(f"export: this Seq2SeqLM differs from BART in {bad}; BartForConditionalGeneration "
                              "cannot hold it")
        return "bart"
    if objective == "Seq2SeqLM":
        wanted = dict(position_embedding="t5_relative", norm="rmsnorm", norm_position="pre", bias=False,
                      embedding_norm=False, type_vocab_size=0, embedding_size=None, layer_sharing="none")
        bad = differences(cfg, wanted, tuple(FEED_FORWARD))
        if bad:
            raise ConfigError(f"export: this Seq2SeqLM differs from T5 in {bad}; T5ForConditionalGeneration cannot "
                              "hold it")
        return "mt5" if recorded == "mt5" else "t5"
    if objective not in ("MaskedLM", "ELECTRA"):
        raise ConfigError(f"export: no transformers counterpart is wired for objective {objective!r}")
    if objective == "MaskedLM" and cfg.position_embedding == "rope":
        wanted = dict(norm_position="pre", norm="layernorm", activation="geglu", type_vocab_size=0, embedding_norm=True,
                      embedding_size=None, layer_sharing="none", first_attention_norm=False)
        bad = differences(cfg, wanted, allows=("part_biases",))
        if bad or sentence_prediction != "none":
            raise ConfigError(f"export: a RoPE MaskedLM exports as ModernBertForMaskedLM, which it differs from in "
                              f"{bad or ['sentence_prediction']}")
        return "modernbert"
    if cfg.position_embedding == "disentangled":
        bad = differences(cfg, {}, ("gelu", "relu", "gelu_new", "silu"), ("position_biased_input",))
        if bad or head_activation(cfg) != cfg.activation:
            raise ConfigError(f"export: this {objective} differs from DeBERTa-v2 in {bad or ['head_activation']}")
    if cfg.position_embedding == "disentangled" and objective == "ELECTRA":  # DeBERTaV3
        return "deberta-v2-encoder" if part == "discriminator" else "deberta-v2"
    if cfg.position_embedding == "disentangled":
        if objective != "MaskedLM" or sentence_prediction != "none" or cfg.embedding_size not in (None, cfg.hidden_size) \
                or cfg.layer_sharing != "none" or cfg.norm_position != "post":
            raise ConfigError("export: a disentangled-attention model exports as DebertaV2ForMaskedLM: an MLM-only "
                              "post-norm encoder without factorized embeddings or shared layers")
        return "deberta-v2-lm" if recorded == "deberta-v2-lm" else "deberta-v2"
    bad = differences(cfg, dict(norm_position="post", norm="layernorm", position_embedding="learned", bias=True),
                      ("gelu", "relu", "gelu_new", "silu"), ("positions_from_padding",))
    if bad:
        raise ConfigError(f"export: this {objective} differs from BERT/RoBERTa/ALBERT/ELECTRA in {bad}; no "
                          "transformers class holds it")
    if objective == "ELECTRA":
        if cfg.layer_sharing != "none" or cfg.positions_from_padding:
            raise ConfigError("export: ELECTRA with shared layers or RoBERTa's positions has no transformers "
                              "counterpart")
        if part == "discriminator":
            return "electra"
    if cfg.layer_sharing == "all":
        if head_activation(cfg) != cfg.activation or cfg.positions_from_padding:
            raise ConfigError("export: ALBERT's prediction head applies hidden_act and numbers positions from the "
                              "row's start; this model does not")
        if sentence_prediction == "nsp":
            raise ConfigError("export: ALBERT layouts hold SOP or no sentence head, not NSP")
        return "albert-sop" if sentence_prediction == "sop" else "albert"
    if cfg.layer_sharing != "none":
        raise ConfigError(f"export: layer_sharing={cfg.layer_sharing} (shared attention or FFN only) has no "
                          "transformers counterpart; ALBERT shares all layers")
    if objective == "ELECTRA" or cfg.embedding_size not in (None, cfg.hidden_size) or recorded == "electra-generator":
        if sentence_prediction != "none" or head_activation(cfg) != "gelu" or cfg.positions_from_padding:
            raise ConfigError("export: a factorized MaskedLM exports as ElectraForMaskedLM, which has no sentence "
                              "head, a gelu head and positions from the start of the row")
        return "electra-generator"
    if sentence_prediction == "sop":
        raise ConfigError("export: SOP without shared layers has no transformers class (AlbertForPreTraining "
                          "shares all layers)")
    return encoder_family(cfg, sentence_prediction)


def encoder_family(cfg: BackboneConfig, sentence_prediction: str = "none") -> str:
    """BERT or RoBERTa for an unfactorized, unshared post-norm encoder: RoBERTa numbers positions from the first
    real token and its head applies gelu; BERT numbers them from the row's start and its head follows hidden_act."""
    if cfg.positions_from_padding:
        if sentence_prediction != "none" or head_activation(cfg) != "gelu":
            raise ConfigError("export: RobertaForMaskedLM has no sentence head and a gelu prediction head; this model "
                              f"has sentence_prediction={sentence_prediction}, head activation {head_activation(cfg)}")
        return "roberta"
    if head_activation(cfg) != cfg.activation:
        raise ConfigError(f"export: BERT's prediction head applies hidden_act ({cfg.activation}); this model's "
                          f"applies {head_activation(cfg)}")
    return "bert-nsp" if sentence_prediction == "nsp" else "bert"


def adapter_for(family: str) -> FamilyAdapter:
    if family not in BY_FAMILY:
        raise ConfigError(f"interop: no transformers family {family!r}; known: {', '.join(BY_FAMILY)}")
    return BY_FAMILY[family]


def to_hf(state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """Our state dict (a LightningModule's, with the exported stack under ``backbone.``) to ``family``'s layout."""
    return adapter_for(family).to_hf(state, cfg, family)


def from_hf(hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """A transformers state dict of ``family`` to our layout (``cfg`` from :func:`config_from_hf`)."""
    return adapter_for(family).from_hf(hf, cfg, family)


def hf_config(cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
    """The ``config.json`` of the exported model."""
    return adapter_for(family).hf_config(cfg, family, special_ids)


def config_from_hf(config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
    """(family, our BackboneConfig, our objective class name) of a transformers ``config.json``."""
    model_type = config.get("model_type")
    refuse_unsupported(config)
    if model_type not in BY_MODEL_TYPE:
        raise ConfigError(f"import: model_type {model_type!r} is not supported; supported: {', '.join(BY_MODEL_TYPE)}")
    return BY_MODEL_TYPE[model_type].from_config(config)
