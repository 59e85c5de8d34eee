"""The Lightning data layer: sources, tokenizers, packing, corruption and collators.

Every name is imported on first use (``plm_lightning.lazy``): importing one module of this package does not
import the rest."""

# ruff: noqa: F401 - the TYPE_CHECKING imports are re-exports for type checkers
from __future__ import annotations

from typing import TYPE_CHECKING

from plm_lightning.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "plm_lightning.data.bart": ("BARTCollator", "BARTDataModule",),
    "plm_lightning.data.collators": ("CausalLMCollator", "MaskedLMCollator", "MaskedLMSettings", "sample_keys",),
    "plm_lightning.data.continuum": ("ContinuumCollator", "ContinuumDataModule",),
    "plm_lightning.data.datamodule": ("BlockDataset", "CausalLMDataModule", "MaskedLMDataModule", "TextDataModule",),
    "plm_lightning.data.entity_fusion": ("EntityFusionCollator", "ERNIETHUDataModule",),
    "plm_lightning.data.ernie2": ("ERNIE2Collator", "ERNIE2DataModule",),
    "plm_lightning.data.fim": ("FIMCollator", "FIMDataModule",),
    "plm_lightning.data.glm": ("GLMCollator", "GLMDataModule",),
    "plm_lightning.data.mass": ("MASSCollator", "MASSDataModule",),
    "plm_lightning.data.multilingual": ("MultilingualDataModule", "MultilingualMLMCollator",),
    "plm_lightning.data.packing": ("PackedBlocks",),
    "plm_lightning.data.parallel": ("ParallelDataModule",),
    "plm_lightning.data.realm": ("REALMCollator", "REALMDataModule",),
    "plm_lightning.data.recurrent": ("RecurrentLMDataModule",),
    "plm_lightning.data.sampling": ("MixtureSampler", "smoothed_probabilities",),
    "plm_lightning.data.seq2seq": ("MultilingualSpanCorruptionDataModule", "SpanCorruptionCollator",
        "SpanCorruptionDataModule", "UL2Collator", "UL2DataModule",),
    "plm_lightning.data.sentences": ("SENTENCE_SPLITTERS", "split_corpus", "split_sentences",),
    "plm_lightning.data.sources": ("embedded_corpus", "fake_language", "load_documents", "load_parallel",),
    "plm_lightning.data.static": ("WordEmbeddingDataModule", "WordVocabulary",),
    "plm_lightning.data.tokenizer": ("TextTokenizer", "train_tokenizer",),
    "plm_lightning.data.unilm": ("UniLMCollator", "UniLMDataModule",),
    "plm_lightning.data.xlnet": ("PermutationLMCollator", "PermutationLMDataModule",),
})

if TYPE_CHECKING:  # what a type checker and an IDE see: the same names, imported eagerly
    from plm_lightning.data.bart import BARTCollator, BARTDataModule
    from plm_lightning.data.collators import CausalLMCollator, MaskedLMCollator, MaskedLMSettings, sample_keys
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
    from plm_lightning.data.sentences import SENTENCE_SPLITTERS, split_corpus, split_sentences
    from plm_lightning.data.seq2seq import (
        MultilingualSpanCorruptionDataModule,
        SpanCorruptionCollator,
        SpanCorruptionDataModule,
        UL2Collator,
        UL2DataModule,
    )
    from plm_lightning.data.sources import embedded_corpus, fake_language, load_documents, load_parallel
    from plm_lightning.data.static import WordEmbeddingDataModule, WordVocabulary
    from plm_lightning.data.tokenizer import TextTokenizer, train_tokenizer
    from plm_lightning.data.unilm import UniLMCollator, UniLMDataModule
    from plm_lightning.data.xlnet import PermutationLMCollator, PermutationLMDataModule
