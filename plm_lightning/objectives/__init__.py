"""One LightningModule per objective family over the shared blocks in plm_lightning.nn."""

from plm_lightning.objectives.base import PretrainingModule
from plm_lightning.objectives.causal_lm import CausalLM
from plm_lightning.objectives.electra import ELECTRA
from plm_lightning.objectives.ernie2 import ERNIE2
from plm_lightning.objectives.masked_lm import MaskedLM
from plm_lightning.objectives.permutation_lm import PermutationLM
from plm_lightning.objectives.seq2seq import Seq2SeqLM

__all__ = [
    "CausalLM", "ELECTRA", "ERNIE2", "MaskedLM", "PermutationLM", "PretrainingModule", "Seq2SeqLM",
]
