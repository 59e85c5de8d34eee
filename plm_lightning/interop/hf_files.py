"""Files of the two ecosystems, read and written without building a model: plm_lightning checkpoints (loaded with
``weights_only=True``), transformers directories (config.json, safetensors / pytorch_model.bin, tokenizer.json) and
their checks, each failure one line. ``interop.io`` (export), ``interop.task_heads`` and
``objectives.loading`` (import, ``init_from``, the tools' ``load_pretrained``) build on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.errors import ConfigError
from plm_lightning.interop.hf import config_from_hf, from_hf
from plm_lightning.nn.config import BackboneConfig

SPECIAL_TOKEN_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id",
                        "decoder_start_token_id", "forced_eos_token_id")
"""The token-id fields an import records, so export writes them back as they were."""


def safetensors_module():  # noqa: ANN202
    try:
        import safetensors.torch
    except ImportError as err:
        raise ConfigError("export/import need safetensors: pip install 'plm-lightning[hf]'") from err
    return safetensors.torch


def why_unreadable(err: Exception) -> str:
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
        raise ConfigError(f"checkpoint '{path}' is not a readable PyTorch checkpoint ({why_unreadable(err)})") from err
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt:
        raise ConfigError(f"checkpoint '{path}' was not written by plm_lightning")
    return ckpt


def tokenizer_from_meta(meta: dict[str, Any]):  # noqa: ANN202
    from tokenizers import Tokenizer

    from plm_lightning.corpus.tokenizer import TextTokenizer

    tok = meta.get("tokenizer")
    if tok is None:
        return None
    return TextTokenizer(Tokenizer.from_str(tok["json"]), tok["special"], tok.get("kind", "custom"))


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


def read_hf_dir(hf_dir: str | Path) -> tuple[Path, dict[str, Any]]:
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


def read_hf_config(directory: Path, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
    """:func:`config_from_hf`, a missing or ill-typed field of ``config.json`` being one line that names it."""
    try:
        return config_from_hf(config)
    except KeyError as err:
        raise ConfigError(f"import: '{directory / 'config.json'}' lacks the field {err}, which its "
                          f"{config.get('model_type')} model needs") from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"import: '{directory / 'config.json'}': {' '.join(str(err).split())}") from err


def weights_from_hf(weights: dict[str, torch.Tensor], cfg: BackboneConfig, family: str, directory: Path
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


def read_electra_generator(gen_dir: str | Path, disc: BackboneConfig) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """ELECTRA hyperparameters and our ``generator.`` / ``lm_head.`` weights from an ``ElectraForMaskedLM`` directory."""
    directory, config = read_hf_dir(gen_dir)
    family, gen, _ = read_hf_config(directory, config)
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
    weights = weights_from_hf(read_hf_weights(directory), gen, family, directory)
    ours = {("generator." + k[len("backbone."):] if k.startswith("backbone.") else k): v for k, v in weights.items()}
    return hparams, ours


def is_hf_directory(path: str | Path) -> bool:
    """A transformers model directory on disk (``config.json`` beside the weights)."""
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()
