"""``export CKPT OUT_DIR``: a plm_lightning checkpoint as a transformers directory (files on disk, no hub access).
The files of both sides are read in ``interop.hf_files``; ``import`` is ``objectives.loading`` (it builds a model).
The readers below are re-exported from there."""

from __future__ import annotations

import json
from pathlib import Path

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.errors import ConfigError
from plm_lightning.interop.electra import electra_export_view
from plm_lightning.interop.hf import family_of, hf_config, to_hf
from plm_lightning.interop.hf_files import (  # noqa: F401 (re-exported)
    SPECIAL_TOKEN_FIELDS,
    is_hf_directory,
    load_checkpoint,
    read_hf_weights,
    safetensors_module,
    tokenizer_from_meta,
)
from plm_lightning.interop.task_heads import TASK_SUFFIX, finetuned_to_hf
from plm_lightning.nn.config import BackboneConfig

TASK_SUFFIX_VALUES = tuple(TASK_SUFFIX.values())


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, part: str = "discriminator",
                      license: str | None = None) -> str:
    """Write a transformers directory (config.json, model.safetensors, tokenizer files, and a ``README.md`` model
    card: ``interop.model_card``, ``license`` its license field); returns the architecture.

    ``part`` picks ELECTRA's discriminator (``ElectraForPreTraining``, the model for downstream use) or generator
    (``ElectraForMaskedLM``); other objectives have one part.
    """
    if part not in ("discriminator", "generator"):
        raise ConfigError(f"export: --part={part!r} is not one of discriminator, generator")
    ckpt = load_checkpoint(ckpt_path)
    meta = ckpt[CHECKPOINT_KEY]
    if meta["objective"] == "TextToText":  # a fine-tuned encoder-decoder is still the pretrained model class
        meta = {**meta, "objective": "Seq2SeqLM"}
        ckpt = {**ckpt, "state_dict": {k[len("model."):]: v for k, v in ckpt["state_dict"].items()
                                       if k.startswith("model.")}, "hyper_parameters": {}}
    cfg = BackboneConfig(**meta["backbone"])
    state = ckpt["state_dict"]
    hparams = ckpt.get("hyper_parameters", {})
    if meta["objective"] in TASK_SUFFIX:  # a fine-tuned head: a transformers task model
        return finetuned_to_hf(ckpt, out_dir)
    if meta["objective"] == "ELECTRA":
        state, cfg = electra_export_view(state, hparams, cfg, part)
    elif part != "discriminator":
        raise ConfigError(f"export: --part generator is for ELECTRA checkpoints; '{ckpt_path}' holds a "
                          f"{meta['objective']}")
    tokenizer = tokenizer_from_meta(meta)
    sentence = hparams.get("sentence_prediction", "none")
    family = family_of(cfg, meta["objective"], sentence, part, meta.get("family"))
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"export: cannot write to '{out}': {err.strerror} ('{err.filename}')") from err
    tensors = to_hf(state, cfg, family)
    safetensors_module().save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = hf_config(cfg, family, tokenizer.ids if tokenizer else {})
    config.update({k: v for k, v in meta.get("special_token_ids", {}).items() if k in config})  # as imported
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        tokenizer.save(out)
    from plm_lightning.interop.model_card import model_card

    card = model_card(ckpt, Path(ckpt_path), config["architectures"][0], family, license)
    tmp = out / "README.md.tmp"
    tmp.write_text(str(card), encoding="utf-8")
    tmp.replace(out / "README.md")
    return config["architectures"][0]
