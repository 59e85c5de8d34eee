"""The objectives' data: LightningDataModules and their collators (``datamodule``: text -> blocks -> a seeded
collator; one module per objective family), the corruption schemes (``corruption/``) and the sample order
(``sampling``). Corpus preparation (sources, tokenizers, sentences, cleaning, packing, shards) is
:mod:`plm_lightning.corpus`, one floor down.

Every name a module here defines is exported, imported on first use (``plm_lightning.lazy``): there is no
list to keep, and importing one module of this package does not import the rest."""

from plm_lightning.lazy import package_exports

__getattr__, __dir__ = package_exports(__name__)
