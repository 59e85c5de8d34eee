"""Fine-tuned heads <-> the transformers task classes (``BertForSequenceClassification``, ``BertForTokenClassification``,
``BertForQuestionAnswering``, ``BertForMultipleChoice``, their RoBERTa/ELECTRA forms, ``GPT2ForSequenceClassification``):
``export`` of a fine-tuned checkpoint writes one, and ``--model.init_from`` of one brings its head along. The backbone
goes through ``interop.hf`` unchanged; this module only names the head tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.nn.config import BackboneConfig

TASK_SUFFIX = {"SequenceClassifier": "ForSequenceClassification", "TokenClassifier": "ForTokenClassification",
               "SpanExtractor": "ForQuestionAnswering", "MultipleChoice": "ForMultipleChoice"}
"""Our head class -> the transformers class suffix."""
CLASS_PREFIX = {"bert": "Bert", "roberta": "Roberta", "electra": "Electra", "gpt2": "GPT2"}


def _wb(ours: str, hf: str, bias: bool = True) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{hf}.weight")] + ([(f"{ours}.bias", f"{hf}.bias")] if bias else [])


def head_pairs(head: str, family: str | None) -> list[tuple[str, str]]:
    """(ours, transformers) names of ``head``'s tensors on a ``family`` backbone; a ConfigError where transformers
    has no class that computes the same function."""
    pooled = {"bert": _wb("pooler.dense", "bert.pooler.dense") + _wb("classifier", "classifier"),
              # RobertaClassificationHead: dense + tanh on <s>, then out_proj: our pooler + classifier
              "roberta": _wb("pooler.dense", "classifier.dense") + _wb("classifier", "classifier.out_proj"),
              "gpt2": _wb("classifier", "score", bias=False)}
    per_token = {f: _wb("classifier", "classifier") for f in ("bert", "roberta", "electra")}
    spans = {f: _wb("qa_outputs", "qa_outputs") for f in ("bert", "roberta", "electra")}
    choice = {"bert": _wb("pooler.dense", "bert.pooler.dense") + _wb("classifier", "classifier"),
              "roberta": _wb("pooler.dense", "roberta.pooler.dense") + _wb("classifier", "classifier")}
    table = {"SequenceClassifier": pooled, "TokenClassifier": per_token, "SpanExtractor": spans, "MultipleChoice": choice}
    pairs = table[head].get(family or "")
    if pairs is None:
        have = ", ".join(CLASS_PREFIX[f] + TASK_SUFFIX[head] for f in table[head])
        raise ConfigError(f"export: a {head} on a {family or 'non-exportable'} backbone has no transformers class "
                          f"(there are {have})")
    return pairs


def architecture_of(head: str, family: str | None) -> str:
    head_pairs(head, family)
    return CLASS_PREFIX[family] + TASK_SUFFIX[head]  # type: ignore[index]


def finetuned_to_hf(checkpoint: dict[str, Any], out_dir: str | Path) -> str:
    """Write a fine-tuned checkpoint of ours as a transformers task model directory; returns the architecture."""
    from plm_lightning.checkpoint_format import CHECKPOINT_KEY
    from plm_lightning.interop.hf import hf_config, to_hf
    from plm_lightning.interop.hf_files import safetensors_module, tokenizer_from_meta

    meta = checkpoint[CHECKPOINT_KEY]
    head, family, labels = meta["objective"], meta.get("family"), meta.get("labels") or []
    hparams = checkpoint.get("hyper_parameters", {})
    if (hparams.get("transfer") or {}).get("adapter_size"):
        raise ConfigError("export: a model fine-tuned with adapters has no transformers class (the adapters would be "
                          "lost); keep the Lightning checkpoint")
    if meta.get("bidirectional_decoder"):
        raise ConfigError(f"export: this {family} was fine-tuned reading its input bidirectionally (pretrained with "
                          "data.bidirectional_fraction > 0); its transformers classes attend causally, so keep the "
                          "Lightning checkpoint")
    if hparams.get("pooling") == "concat":
        raise ConfigError("export: concat pooling (ULMFiT) has no transformers class; fine-tune with pooling first/last")
    pairs = head_pairs(head, family)
    cfg = BackboneConfig(**meta["backbone"])
    state = checkpoint["state_dict"]
    backbone = {k: v for k, v in state.items() if k.startswith("backbone.")}
    if family == "gpt2":  # the LM head is not part of a classifier; GPT-2's is tied to the embeddings anyway
        backbone["lm_head.weight"] = backbone["backbone.embeddings.token.weight"]
    tensors = {k: v for k, v in to_hf(backbone, cfg, family).items() if k != "lm_head.weight" and not k.startswith("cls.")}
    tensors.update({hf: state[ours].clone() for ours, hf in pairs})
    tokenizer = tokenizer_from_meta(meta)
    config = hf_config(cfg, family, tokenizer.ids if tokenizer else {})
    config["architectures"] = [architecture_of(head, family)]
    num_labels = meta.get("num_labels") or max(1, len(labels))
    if head in ("SequenceClassifier", "TokenClassifier"):
        names = labels or [f"LABEL_{i}" for i in range(num_labels)]
        config.update(id2label={str(i): str(n) for i, n in enumerate(names)},
                      label2id={str(n): i for i, n in enumerate(names)})
        if num_labels == 1:
            config["problem_type"] = "regression"
    if family == "gpt2":
        config["pad_token_id"] = None  # GPT-2 pads with its end-of-text token, which also ends every example here
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    safetensors_module().save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
                             metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        tokenizer.save(out)
    return config["architectures"][0]


def load_hf_head(module: nn.Module, head: str, family: str | None, hf_dir: str | Path) -> bool:
    """Copy the head of a transformers ``*For<Task>`` directory into ``module`` when its class is ``head``'s task;
    False (the head stays fresh) for any other class. A label count that differs is a ConfigError."""
    from plm_lightning.interop.hf_files import read_hf_weights

    directory = Path(hf_dir)
    config = json.loads((directory / "config.json").read_text())
    if not any(a.endswith(TASK_SUFFIX[head]) for a in config.get("architectures") or []):
        return False
    weights: dict[str, Tensor] = read_hf_weights(directory)
    own = module.state_dict()
    for ours, hf in head_pairs(head, family):
        if hf not in weights:
            raise ConfigError(f"model.init_from: '{hf_dir}' has no tensor {hf!r} for its {TASK_SUFFIX[head]} head")
        if weights[hf].shape != own[ours].shape:
            raise ConfigError(f"model.init_from: the head of '{hf_dir}' has shape {tuple(weights[hf].shape)} for {hf}, "
                              f"this model {tuple(own[ours].shape)}; set model.num_labels to "
                              f"{len(config.get('id2label') or {}) or weights[hf].shape[0]}")
        with torch.no_grad():
            own[ours].copy_(weights[hf])
    return True
