"""``export CKPT OUT_DIR`` and ``import HF_DIR OUT_CKPT``: files on disk, no hub access."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from plm_lightning.errors import ConfigError
from plm_lightning.interop.hf import config_from_hf, family_of, from_hf, hf_config, to_hf
from plm_lightning.nn.config import BackboneConfig
from plm_lightning.objectives.base import CHECKPOINT_KEY


def _safetensors():  # noqa: ANN202
    try:
        import safetensors.torch
    except ImportError as err:
        raise ConfigError("export/import need safetensors: pip install 'plm-lightning[hf]'") from err
    return safetensors.torch


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A plm_lightning checkpoint, loaded with ``weights_only=True``; a ConfigError for anything else."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"checkpoint '{path}' does not exist")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ConfigError(f"checkpoint '{path}' is not a readable PyTorch checkpoint ({err})") from err
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt:
        raise ConfigError(f"checkpoint '{path}' was not written by plm_lightning")
    return ckpt


def _tokenizer_from_meta(meta: dict[str, Any]):  # noqa: ANN202
    from tokenizers import Tokenizer

    from plm_lightning.data.tokenizer import TextTokenizer

    tok = meta.get("tokenizer")
    if tok is None:
        return None
    return TextTokenizer(Tokenizer.from_str(tok["json"]), tok["special"], tok.get("kind", "custom"))


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path) -> str:
    """Write a transformers directory (config.json, model.safetensors, tokenizer files); returns the architecture."""
    ckpt = load_checkpoint(ckpt_path)
    meta = ckpt[CHECKPOINT_KEY]
    cfg = BackboneConfig(**meta["backbone"])
    state = ckpt["state_dict"]
    tokenizer = _tokenizer_from_meta(meta)
    sentence = ckpt.get("hyper_parameters", {}).get("sentence_prediction", "none")
    family = family_of(state, cfg, meta["objective"], tokenizer.kind if tokenizer else None, sentence)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = to_hf(state, cfg, family)
    _safetensors().save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = hf_config(cfg, family, tokenizer.ids if tokenizer else {})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        tokenizer.save(out)
    return config["architectures"][0]


def _read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    st = directory / "model.safetensors"
    if st.is_file():
        return _safetensors().load_file(str(st))
    binary = directory / "pytorch_model.bin"
    if binary.is_file():
        return torch.load(binary, map_location="cpu", weights_only=True)
    raise ConfigError(f"import: '{directory}' has neither model.safetensors nor pytorch_model.bin")


def import_hf(hf_dir: str | Path, out_ckpt: str | Path) -> dict[str, Any]:
    """Convert a transformers BERT/RoBERTa/GPT-2 directory into a plm_lightning checkpoint (weights, backbone and
    tokenizer) that ``--model.init_weights_from`` and ``load_from_checkpoint`` accept."""
    import lightning as L

    from plm_lightning.data.tokenizer import TextTokenizer
    from plm_lightning.objectives import CausalLM, MaskedLM

    directory = Path(hf_dir)
    if not (directory / "config.json").is_file():
        raise ConfigError(f"import: '{hf_dir}' has no config.json; give a Hugging Face model directory")
    family, cfg, objective = config_from_hf(json.loads((directory / "config.json").read_text()))
    ours = from_hf(_read_hf_weights(directory), cfg, family)
    cls = {"MaskedLM": MaskedLM, "CausalLM": CausalLM}[objective]
    hparams: dict[str, Any] = {"backbone": "bert-base", "backbone_overrides": cfg.to_dict()}
    if objective == "MaskedLM":
        hparams["sentence_prediction"] = "nsp" if family == "bert-nsp" else "none"
    module = cls(**hparams, vocab_size=cfg.vocab_size)
    missing, unexpected = module.load_state_dict(ours, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the token embedding
    if missing or unexpected:
        raise ConfigError(f"import: weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    meta: dict[str, Any] = {"objective": objective, "backbone": cfg.to_dict(), "tokens_seen": 0,
                            "loss_tokens_seen": 0, "imported_from": str(directory.resolve())}
    if (directory / "tokenizer.json").is_file():
        tok = TextTokenizer.load(directory)
        meta["tokenizer"] = {"json": tok.tokenizer.to_str(), "special": tok.special, "kind": tok.kind}
    checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": {**dict(module.hparams),
                  "_class_path": f"{cls.__module__}.{cls.__name__}"}, CHECKPOINT_KEY: meta,
                  "pytorch-lightning_version": L.__version__, "epoch": 0, "global_step": 0}
    out = Path(out_ckpt)
    out.parent.mkdir(parents=True, exist_ok=True)
    from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO

    AtomicCheckpointIO().save_checkpoint(checkpoint, out)
    return {"family": family, "objective": objective, "checkpoint": str(out)}
