"""Fine-tuning: task heads on our pretrained backbones and the downstream data they read.

Every name a module here defines is exported, imported on first use (``plm_lightning.lazy``): there is no
list to keep, and importing one module of this package does not import the rest."""

from plm_lightning.lazy import package_exports

__getattr__, __dir__ = package_exports(__name__)
