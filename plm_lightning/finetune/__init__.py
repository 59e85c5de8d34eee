"""Fine-tuning: task heads on our pretrained backbones and the downstream data they read."""

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

__all__ = ["GLUE_TASKS", "OFFLINE_TASKS", "ChoiceDataModule", "ClassificationDataModule", "EntityF1",
           "FinetuneDataModule", "FinetuneModule", "MultipleChoice", "QADataModule", "SequenceClassifier",
           "SpanExtractor", "TaggingDataModule", "TextToText", "TextToTextDataModule", "TokenClassifier", "Transfer",
           "WordFeatures", "WordTagger",
           "bio_chunks", "mixing_rates", "offline_task"]
