"""Knowledge inside a model: a synthetic world with known facts; probing, locating, tracing and editing facts in any
causal or masked LM trained here or imported from transformers.

Every name a module here defines is exported, imported on first use (``plm_lightning.lazy``): there is no
list to keep, and importing one module of this package does not import the rest."""

from plm_lightning.lazy import package_exports

__getattr__, __dir__ = package_exports(__name__)
