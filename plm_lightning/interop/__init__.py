"""Conversion to and from other ecosystems (Hugging Face transformers). ``import`` builds a model, so it lives with
the objectives: :func:`plm_lightning.objectives.loading.import_hf`."""

from plm_lightning.interop.hf import config_from_hf, family_of, from_hf, hf_config, to_hf
from plm_lightning.interop.io import export_checkpoint

__all__ = ["config_from_hf", "export_checkpoint", "family_of", "from_hf", "hf_config", "to_hf"]
