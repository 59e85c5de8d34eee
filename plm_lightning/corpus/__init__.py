"""Corpus preparation, below every objective: text sources (files, datasets, the embedded corpus, the synthetic
knowledge world and its graph), tokenizers, sentence splitting, the C4 filters, knowledge units, packing into
blocks and shards (partition by partition, in worker processes) and litdata streams. No Lightning, no model.

Every name a module here defines is exported, imported on first use (``plm_lightning.lazy``): there is no
list to keep, and importing one module of this package does not import the rest."""

from plm_lightning.lazy import package_exports

__getattr__, __dir__ = package_exports(__name__)
