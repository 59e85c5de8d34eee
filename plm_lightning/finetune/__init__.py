"""Fine-tuning: task heads on our pretrained backbones and the downstream data they read."""

from plm_lightning.finetune.classification import SequenceClassifier
from plm_lightning.finetune.data import GLUE_TASKS, OFFLINE_TASKS, ClassificationDataModule, offline_task

__all__ = ["GLUE_TASKS", "OFFLINE_TASKS", "ClassificationDataModule", "SequenceClassifier", "offline_task"]
