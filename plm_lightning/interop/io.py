"""``export CKPT OUT_DIR`` and ``import HF_DIR OUT_CKPT``: files on disk, no hub access."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.errors import ConfigError
from plm_lightning.interop.hf import config_from_hf, family_of, from_hf, hf_config, to_hf
from plm_lightning.interop.task_heads import TASK_SUFFIX, finetuned_to_hf
from plm_lightning.nn.config import BackboneConfig

TASK_SUFFIX_VALUES = tuple(TASK_SUFFIX.values())
SPECIAL_TOKEN_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id",
                        "decoder_start_token_id", "forced_eos_token_id")
"""The token-id fields an import records, so export writes them back as they were."""


def safetensors_module():  # noqa: ANN202
    try:
        import safetensors.torch
    except ImportError as err:
        raise ConfigError("export/import need safetensors: pip install 'plm-lightning[hf]'") from err
    return safetensors.torch


def _why_unreadable(err: Exception) -> str:
    """One short clause for a failed ``torch.load``: torch's own messages run over many lines."""
    text = str(err)
    if "Unsupported global" in text:
        return "it holds Python objects beyond tensors and plain containers, which are never unpickled here"
    if "Weights only load failed" in text:
        return "its bytes are not a PyTorch pickle"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return first if len(first) <= 160 else first[:157] + "..."


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A plm_lightning checkpoint, loaded with ``weights_only=True``; a ConfigError for anything else."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"checkpoint '{path}' does not exist")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ConfigError(f"checkpoint '{path}' is not a readable PyTorch checkpoint ({_why_unreadable(err)})") from err
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt:
        raise ConfigError(f"checkpoint '{path}' was not written by plm_lightning")
    return ckpt


def tokenizer_from_meta(meta: dict[str, Any]):  # noqa: ANN202
    from tokenizers import Tokenizer

    from plm_lightning.data.tokenizer import TextTokenizer

    tok = meta.get("tokenizer")
    if tok is None:
        return None
    return TextTokenizer(Tokenizer.from_str(tok["json"]), tok["special"], tok.get("kind", "custom"))


def _electra_view(state: dict[str, torch.Tensor], hparams: dict[str, Any], cfg: BackboneConfig,
                  part: str) -> tuple[dict[str, torch.Tensor], BackboneConfig]:
    """The part of an ELECTRA checkpoint that is exported, renamed so its stack sits under ``backbone.``."""
    from plm_lightning.objectives.electra import generator_config

    gen_cfg = generator_config(cfg, hparams.get("generator_size_divisor", 4), hparams.get("generator_num_layers"),
                               hparams.get("generator_num_heads"))
    if part == "generator":
        view = {f"backbone.{k[len('generator.'):]}": v for k, v in state.items() if k.startswith("generator.")}
        view.update({k: v for k, v in state.items() if k.startswith("lm_head.")})
        return view, gen_cfg
    view = {k: v for k, v in state.items() if k.startswith(("backbone.", "rtd_head."))}
    delta = view.pop("backbone.embeddings.token.delta", None)
    if delta is not None:  # gradient-disentangled sharing: E_D = E_G + E_delta
        view["backbone.embeddings.token.weight"] = state["generator.embeddings.token.weight"] + delta
    for part_name in ("token.weight", "position.weight", "segment.weight", "norm.weight", "norm.bias"):
        key = f"backbone.embeddings.{part_name}"
        if key not in view and f"generator.embeddings.{part_name}" in state:
            view[key] = state[f"generator.embeddings.{part_name}"]
    return view, cfg.replace(embedding_size=gen_cfg.embedding_size)


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, part: str = "discriminator") -> str:
    """Write a transformers directory (config.json, model.safetensors, tokenizer files); returns the architecture.

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
        state, cfg = _electra_view(state, hparams, cfg, part)
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
    return config["architectures"][0]


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    st = directory / "model.safetensors"
    binary = directory / "pytorch_model.bin"
    if not st.is_file() and not binary.is_file():
        raise ConfigError(f"import: '{directory}' has neither model.safetensors nor pytorch_model.bin")
    file = st if st.is_file() else binary
    try:
        if file is st:
            return safetensors_module().load_file(str(st))
        return torch.load(binary, map_location="cpu", weights_only=True)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same one line
        raise ConfigError(f"import: '{file}' is not a readable weights file ({' '.join(str(err).split())[:200]})") \
            from err


def _read_hf_dir(hf_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    directory = Path(hf_dir)
    file = directory / "config.json"
    if not file.is_file():
        raise ConfigError(f"import: '{hf_dir}' has no config.json; give a Hugging Face model directory")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"import: '{file}' is not readable JSON ({' '.join(str(err).split())})") from err
    if not isinstance(config, dict):
        raise ConfigError(f"import: '{file}' holds a JSON {type(config).__name__}, not an object of config fields")
    return directory, config


def _config_from_hf(directory: Path, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
    """:func:`config_from_hf`, a missing or ill-typed field of ``config.json`` being one line that names it."""
    try:
        return config_from_hf(config)
    except KeyError as err:
        raise ConfigError(f"import: '{directory / 'config.json'}' lacks the field {err}, which its "
                          f"{config.get('model_type')} model needs") from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"import: '{directory / 'config.json'}': {' '.join(str(err).split())}") from err


def _from_hf(weights: dict[str, torch.Tensor], cfg: BackboneConfig, family: str, directory: Path
             ) -> dict[str, torch.Tensor]:
    """:func:`from_hf`, checked against ``config.json`` before any model is built: a tensor its shapes need that the
    weights lack, or a vocabulary the weights do not hold (a config claiming 10^9 tokens would allocate for them)."""
    try:
        ours = from_hf(weights, cfg, family)
    except KeyError as err:
        raise ConfigError(f"import: the weights in '{directory}' lack {err}, which config.json's shape (layers, "
                          "sizes) needs") from err
    for key, tensor in ours.items():
        if key.endswith("embeddings.token.weight") and tensor.shape[0] != cfg.vocab_size:
            raise ConfigError(f"import: '{directory / 'config.json'}' says vocab_size={cfg.vocab_size}, but the "
                              f"weights hold {tensor.shape[0]} token embeddings")
    return ours


def _electra_generator(gen_dir: str | Path, disc: BackboneConfig) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """ELECTRA hyperparameters and our ``generator.`` / ``lm_head.`` weights from an ``ElectraForMaskedLM`` directory."""
    directory, config = _read_hf_dir(gen_dir)
    family, gen, _ = _config_from_hf(directory, config)
    if family != "electra-generator":
        raise ConfigError(f"import: --generator '{gen_dir}' is a {family}, not an ElectraForMaskedLM generator")
    disc_emb, gen_emb = disc.embedding_size or disc.hidden_size, gen.embedding_size or gen.hidden_size
    if gen_emb != disc_emb or disc.hidden_size % gen.hidden_size or gen.intermediate_size != 4 * gen.hidden_size:
        raise ConfigError(f"import: generator '{gen_dir}' (hidden {gen.hidden_size}, embedding {gen_emb}, "
                          f"intermediate {gen.intermediate_size}) does not fit the discriminator (hidden "
                          f"{disc.hidden_size}, embedding {disc_emb}): it needs the same embedding size, a hidden "
                          "size dividing the discriminator's and a 4x feed-forward")
    hparams = {"generator_size_divisor": disc.hidden_size // gen.hidden_size, "generator_num_layers": gen.num_layers,
               "generator_num_heads": gen.num_heads}
    weights = _from_hf(read_hf_weights(directory), gen, family, directory)
    ours = {("generator." + k[len("backbone."):] if k.startswith("backbone.") else k): v for k, v in weights.items()}
    return hparams, ours


def is_hf_directory(path: str | Path) -> bool:
    """A transformers model directory on disk (``config.json`` beside the weights)."""
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def hf_to_checkpoint(hf_dir: str | Path, generator_dir: str | Path | None = None) -> dict[str, Any]:
    """A transformers BERT/RoBERTa/ALBERT/ELECTRA/GPT-2 directory as an in-memory plm_lightning checkpoint (weights,
    backbone, tokenizer), what ``import`` writes and ``--model.init_from`` reads.

    An ``ElectraForPreTraining`` discriminator becomes an ELECTRA checkpoint; its generator comes from
    ``generator_dir`` (an ``ElectraForMaskedLM``) or, without one, starts from random weights at 1/4 width.
    """
    import lightning as L

    from plm_lightning.data.tokenizer import TextTokenizer
    from plm_lightning.objectives import ELECTRA, CausalLM, MaskedLM, PermutationLM, Seq2SeqLM

    directory, config = _read_hf_dir(hf_dir)
    family, cfg, objective = _config_from_hf(directory, config)
    ours = _from_hf(read_hf_weights(directory), cfg, family, directory)
    cls = {"MaskedLM": MaskedLM, "CausalLM": CausalLM, "ELECTRA": ELECTRA, "Seq2SeqLM": Seq2SeqLM,
           "PermutationLM": PermutationLM}[objective]
    preset = "xlnet-base" if objective == "PermutationLM" else "bert-base"
    hparams: dict[str, Any] = {"backbone": preset, "backbone_overrides": cfg.to_dict()}
    if family == "bart":
        hparams["decoder_start_token"] = "eos"
    if objective == "MaskedLM":
        hparams["sentence_prediction"] = {"bert-nsp": "nsp", "albert-sop": "sop"}.get(family, "none")
    if objective == "ELECTRA":
        hparams["generator_size_divisor"] = 4 if cfg.hidden_size % 4 == 0 else 1
        if generator_dir is not None:
            gen_hparams, gen_weights = _electra_generator(generator_dir, cfg)
            hparams.update(gen_hparams)
            shared = ("generator.embeddings.token.", "generator.embeddings.position.", "generator.embeddings.segment.",
                      "generator.embeddings.norm.")  # the discriminator's copy is the shared table
            ours.update({k: v for k, v in gen_weights.items() if not k.startswith(shared)})
    elif generator_dir is not None:
        raise ConfigError(f"import: --generator is for ELECTRA discriminators; '{hf_dir}' is a {family}")
    from plm_lightning.objectives.nesting import nested_construction

    with nested_construction():
        module = cls(**hparams, vocab_size=cfg.vocab_size)
    missing, unexpected = module.load_state_dict(ours, strict=False)
    allowed = ("lm_head.weight", "generator.embeddings.")  # tied to, or shared with, a table that was loaded
    if objective == "ELECTRA" and generator_dir is None:
        allowed = ("lm_head.", "generator.")  # a fresh generator
    if any(a.endswith(TASK_SUFFIX_VALUES) for a in config.get("architectures") or []):
        allowed = (*allowed, "lm_head.", "sentence_head.", "rtd_head.")  # a task model: only its backbone is read
    missing = [k for k in missing if not k.startswith(allowed)]
    if missing or unexpected:
        raise ConfigError(f"import: weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    meta: dict[str, Any] = {"objective": objective, "family": family, "backbone": cfg.to_dict(), "tokens_seen": 0,
                            "loss_tokens_seen": 0, "imported_from": str(directory.resolve()),
                            "special_token_ids": {k: config[k] for k in SPECIAL_TOKEN_FIELDS
                                                  if isinstance(config.get(k), int)}}
    if (directory / "tokenizer.json").is_file():
        tok = TextTokenizer.load(directory)
        meta["tokenizer"] = {"json": tok.tokenizer.to_str(), "special": tok.special, "kind": tok.kind}
    # the constructor's arguments only: `MaskedLM.load_from_checkpoint(path)` takes them as they are, and no class
    # path is stored for a loader to import
    return {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams), CHECKPOINT_KEY: meta,
            "pytorch-lightning_version": L.__version__, "epoch": 0, "global_step": 0}


def import_hf(hf_dir: str | Path, out_ckpt: str | Path, generator_dir: str | Path | None = None) -> dict[str, Any]:
    """Write :func:`hf_to_checkpoint` of ``hf_dir`` to ``out_ckpt`` (atomically)."""
    from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO

    checkpoint = hf_to_checkpoint(hf_dir, generator_dir)
    out = Path(out_ckpt)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"import: cannot write '{out}': {err.strerror} ('{err.filename}')") from err
    AtomicCheckpointIO().save_checkpoint(checkpoint, out)
    meta = checkpoint[CHECKPOINT_KEY]
    return {"family": meta["family"], "objective": meta["objective"], "checkpoint": str(out)}


def _base_family(ckpt: dict[str, Any]) -> str | None:
    """The transformers family of a checkpoint's bare backbone (``bert-nsp`` -> ``bert``), None when it has none."""
    meta = ckpt[CHECKPOINT_KEY]
    family = meta.get("family")
    if family is None:
        try:
            family = family_of(BackboneConfig(**meta["backbone"]), meta["objective"])
        except ConfigError:
            return None
    return {"bert-nsp": "bert", "albert-sop": "albert", "electra-generator": "electra"}.get(family, family)


def load_pretrained(path: str | Path, objectives: tuple[str, ...] | None = None, purpose: str = "this command"):
    """(our module in eval mode, its tokenizer) from a plm_lightning checkpoint or a transformers directory, the
    objective one of ``objectives`` (default: any Transformer objective)."""
    from plm_lightning import objectives as module

    ckpt = hf_to_checkpoint(path) if is_hf_directory(path) else load_checkpoint(path)
    meta = ckpt[CHECKPOINT_KEY]
    known = ("MaskedLM", "CausalLM", "ELECTRA", "Seq2SeqLM", "PermutationLM", "ERNIE2")
    allowed = objectives or known
    if meta["objective"] not in allowed:
        raise ConfigError(f"{purpose}: '{path}' holds a {meta['objective']} checkpoint; it needs one of "
                          f"{', '.join(allowed)}")
    hparams = {k: v for k, v in ckpt.get("hyper_parameters", {}).items() if not k.startswith("_")}
    hparams.update(backbone_overrides=meta["backbone"], vocab_size=meta["backbone"]["vocab_size"], init_from=None)
    from plm_lightning.objectives.nesting import nested_construction

    with nested_construction():
        model = getattr(module, meta["objective"])(**hparams)
    model.load_state_dict(ckpt["state_dict"], strict=False)
    model.source_family = _base_family(ckpt)
    model.pretraining_data = dict(ckpt.get("datamodule_hyper_parameters") or {})  # how it was pretrained
    tokenizer = tokenizer_from_meta(meta)
    if tokenizer is None:
        raise ConfigError(f"{purpose}: '{path}' has no tokenizer; train with this package or export one with it")
    return model.eval(), tokenizer
