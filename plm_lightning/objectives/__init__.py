"""One LightningModule per objective family over the shared blocks in plm_lightning.nn."""

from plm_lightning.objectives.base import PretrainingModule
from plm_lightning.objectives.causal_lm import CausalLM
from plm_lightning.objectives.cove import CoVe
from plm_lightning.objectives.distillation import DistilBERT
from plm_lightning.objectives.electra import ELECTRA
from plm_lightning.objectives.elmo import ELMo
from plm_lightning.objectives.ernie2 import ERNIE2
from plm_lightning.objectives.ernie_thu import ERNIETHU
from plm_lightning.objectives.glove import GloVe
from plm_lightning.objectives.masked_lm import MaskedLM
from plm_lightning.objectives.permutation_lm import PermutationLM
from plm_lightning.objectives.realm import REALM
from plm_lightning.objectives.seq2seq import Seq2SeqLM
from plm_lightning.objectives.static_embeddings import FastText, StaticEmbeddings, Word2Vec

__all__ = [
    "CausalLM", "CoVe", "DistilBERT", "ELECTRA", "ELMo", "ERNIE2", "ERNIETHU", "FastText", "GloVe", "MaskedLM", "PermutationLM",
    "PretrainingModule", "REALM", "Seq2SeqLM", "StaticEmbeddings", "Word2Vec",
]
