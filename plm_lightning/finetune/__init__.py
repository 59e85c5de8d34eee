"""Fine-tuning: task heads on our pretrained backbones and the downstream data they read.

Every name is imported on first use (``plm_lightning.lazy``): importing one module of this package does not
import the rest."""

# ruff: noqa: F401 - the TYPE_CHECKING imports are re-exports for type checkers
from __future__ import annotations

from typing import TYPE_CHECKING

from plm_lightning.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "plm_lightning.finetune.base": ("FinetuneModule",),
    "plm_lightning.finetune.classification": ("MultipleChoice", "SequenceClassifier",),
    "plm_lightning.finetune.data": ("GLUE_TASKS", "ChoiceDataModule", "ClassificationDataModule",
        "FinetuneDataModule",),
    "plm_lightning.finetune.metrics": ("EntityF1", "bio_chunks",),
    "plm_lightning.finetune.qa": ("SpanExtractor",),
    "plm_lightning.finetune.qa_data": ("QADataModule",),
    "plm_lightning.finetune.tagging": ("TokenClassifier",),
    "plm_lightning.finetune.tagging_data": ("TaggingDataModule",),
    "plm_lightning.finetune.tasks": ("OFFLINE_TASKS", "offline_task",),
    "plm_lightning.finetune.text_to_text": ("TextToText",),
    "plm_lightning.finetune.text_to_text_data": ("TextToTextDataModule", "mixing_rates",),
    "plm_lightning.finetune.transfer": ("Transfer",),
    "plm_lightning.finetune.word_features": ("WordFeatures",),
    "plm_lightning.finetune.word_tagger": ("WordTagger",),
})

if TYPE_CHECKING:  # what a type checker and an IDE see: the same names, imported eagerly
    from plm_lightning.finetune.base import FinetuneModule
    from plm_lightning.finetune.classification import MultipleChoice, SequenceClassifier
    from plm_lightning.finetune.data import GLUE_TASKS, ChoiceDataModule, ClassificationDataModule, FinetuneDataModule
    from plm_lightning.finetune.metrics import EntityF1, bio_chunks
    from plm_lightning.finetune.qa import SpanExtractor
    from plm_lightning.finetune.qa_data import QADataModule
    from plm_lightning.finetune.tagging import TokenClassifier
    from plm_lightning.finetune.tagging_data import TaggingDataModule
    from plm_lightning.finetune.tasks import OFFLINE_TASKS, offline_task
    from plm_lightning.finetune.text_to_text import TextToText
    from plm_lightning.finetune.text_to_text_data import TextToTextDataModule, mixing_rates
    from plm_lightning.finetune.transfer import Transfer
    from plm_lightning.finetune.word_features import WordFeatures
    from plm_lightning.finetune.word_tagger import WordTagger
