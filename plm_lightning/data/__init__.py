"""The Lightning data layer: sources, tokenizers, packing, corruption and collators."""

from plm_lightning.data.bart import BARTCollator, BARTDataModule
from plm_lightning.data.collators import CausalLMCollator, MaskedLMCollator, sample_keys
from plm_lightning.data.continuum import ContinuumCollator, ContinuumDataModule
from plm_lightning.data.datamodule import BlockDataset, CausalLMDataModule, MaskedLMDataModule, TextDataModule
from plm_lightning.data.entity_fusion import EntityFusionCollator, ERNIETHUDataModule
from plm_lightning.data.ernie2 import ERNIE2Collator, ERNIE2DataModule
from plm_lightning.data.fim import FIMCollator, FIMDataModule
from plm_lightning.data.glm import GLMCollator, GLMDataModule
from plm_lightning.data.mass import MASSCollator, MASSDataModule
from plm_lightning.data.multilingual import MultilingualDataModule, MultilingualMLMCollator
from plm_lightning.data.packing import PackedBlocks
from plm_lightning.data.parallel import ParallelDataModule
from plm_lightning.data.realm import REALMCollator, REALMDataModule
from plm_lightning.data.recurrent import RecurrentLMDataModule
from plm_lightning.data.sampling import MixtureSampler, smoothed_probabilities
from plm_lightning.data.seq2seq import (
    MultilingualSpanCorruptionDataModule,
    SpanCorruptionCollator,
    SpanCorruptionDataModule,
    UL2Collator,
    UL2DataModule,
)
from plm_lightning.data.sources import (
    embedded_corpus,
    fake_language,
    load_documents,
    load_parallel,
    split_corpus,
    split_sentences,
)
from plm_lightning.data.static import WordEmbeddingDataModule, WordVocabulary
from plm_lightning.data.tokenizer import TextTokenizer, train_tokenizer
from plm_lightning.data.unilm import UniLMCollator, UniLMDataModule
from plm_lightning.data.xlnet import PermutationLMCollator, PermutationLMDataModule

__all__ = [
    "BARTCollator", "BARTDataModule", "BlockDataset", "CausalLMCollator", "CausalLMDataModule", "ContinuumCollator",
    "ContinuumDataModule", "ERNIE2Collator", "ERNIE2DataModule", "ERNIETHUDataModule", "EntityFusionCollator",
    "FIMCollator", "FIMDataModule", "GLMCollator", "GLMDataModule", "MASSCollator",
    "MASSDataModule", "MaskedLMCollator", "MaskedLMDataModule", "MixtureSampler", "MultilingualDataModule",
    "MultilingualMLMCollator", "MultilingualSpanCorruptionDataModule", "PackedBlocks", "ParallelDataModule",
    "REALMCollator", "REALMDataModule",
    "PermutationLMCollator", "PermutationLMDataModule", "RecurrentLMDataModule", "SpanCorruptionCollator",
    "SpanCorruptionDataModule", "TextDataModule", "TextTokenizer", "UL2Collator", "UL2DataModule", "UniLMCollator",
    "UniLMDataModule", "WordEmbeddingDataModule", "WordVocabulary", "embedded_corpus", "fake_language",
    "load_documents", "load_parallel", "sample_keys", "smoothed_probabilities", "split_corpus", "split_sentences",
    "train_tokenizer",
]
