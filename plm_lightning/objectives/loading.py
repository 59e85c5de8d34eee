"""Models from checkpoints and transformers directories: ``import`` (a transformers directory as a plm_lightning
checkpoint), ``--model.init_from`` of a transformers directory, and ``load_pretrained`` (the tools' way to get a
trained model and its tokenizer). These build objective modules, so they live with the objectives; the files they
read are ``interop.hf_files``'s, and ``interop`` imports no objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.errors import ConfigError
from plm_lightning.interop.hf import family_of
from plm_lightning.interop.hf_files import (
    SPECIAL_TOKEN_FIELDS,
    is_hf_directory,
    load_checkpoint,
    read_electra_generator,
    read_hf_config,
    read_hf_dir,
    read_hf_weights,
    tokenizer_from_meta,
    weights_from_hf,
)
from plm_lightning.interop.task_heads import TASK_SUFFIX
from plm_lightning.nn.config import BackboneConfig

TASK_SUFFIX_VALUES = tuple(TASK_SUFFIX.values())


def hf_to_checkpoint(hf_dir: str | Path, generator_dir: str | Path | None = None) -> dict[str, Any]:
    """A transformers BERT/RoBERTa/ALBERT/ELECTRA/GPT-2 directory as an in-memory plm_lightning checkpoint (weights,
    backbone, tokenizer), what ``import`` writes and ``--model.init_from`` reads.

    An ``ElectraForPreTraining`` discriminator becomes an ELECTRA checkpoint; its generator comes from
    ``generator_dir`` (an ``ElectraForMaskedLM``) or, without one, starts from random weights at 1/4 width.
    """
    import lightning as L

    from plm_lightning.corpus.tokenizer import TextTokenizer
    from plm_lightning.objectives import ELECTRA, CausalLM, MaskedLM, PermutationLM, Seq2SeqLM

    directory, config = read_hf_dir(hf_dir)
    family, cfg, objective = read_hf_config(directory, config)
    ours = weights_from_hf(read_hf_weights(directory), cfg, family, directory)
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
            gen_hparams, gen_weights = read_electra_generator(generator_dir, cfg)
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


def reads_bidirectionally(pretrained: Any) -> bool:
    """Whether a decoder was pretrained attending bidirectionally over a prefix of its rows (the bidirectionality
    continuum, ``data.bidirectional_fraction > 0``): it then reads a fine-tuning input, or a prompt, as that prefix,
    all of it attending to all of it, and what follows causally (Artetxe et al. 2022, sec. 3)."""
    fraction = (getattr(pretrained, "pretraining_data", None) or {}).get("bidirectional_fraction")
    return bool(getattr(pretrained, "causal", False)) and fraction is not None and float(fraction) > 0


def predicts_next_token(pretrained: Any) -> bool:
    """False for a continuum decoder pretrained with ``data.prediction=masked``: its head fills masked positions in
    place and was never trained to predict the next token, so it cannot generate or score continuations."""
    return (getattr(pretrained, "pretraining_data", None) or {}).get("prediction", "next_token") != "masked"
