"""Conversion to and from other ecosystems (Hugging Face transformers)."""

from plm_lightning.interop.hf import config_from_hf, family_of, from_hf, hf_config, to_hf
from plm_lightning.interop.io import export_checkpoint, import_hf

__all__ = ["config_from_hf", "export_checkpoint", "family_of", "from_hf", "hf_config", "import_hf", "to_hf"]
