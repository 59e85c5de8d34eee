"""plm-lightning: the pretraining objectives of the PLM literature as Lightning modules over shared blocks.

An objective = a corruption of the input (``plm_lightning.data.corruption``) + an attention-mask shape
(``plm_lightning.nn.masks``) + the positions that carry loss (``labels != -100``).

The public names below are imported on first use (PEP 562), so ``import plm_lightning`` (and the CLI's ``--help``)
does not load Lightning, transformers' neighbours or every objective; ``from plm_lightning import MaskedLM`` works as
an eager import would.
"""

# ruff: noqa: F401 - the TYPE_CHECKING imports at the end are re-exports for type checkers
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, ...]] = {
    "plm_lightning.callbacks": ("AtomicCheckpointIO", "MetricsFile", "ThroughputMFU", "TrainingSamples"),
    "plm_lightning.data": (
        "BARTDataModule", "CausalLMCollator", "CausalLMDataModule", "embedded_corpus", "ERNIE2DataModule",
        "ERNIETHUDataModule", "FIMDataModule", "GLMDataModule", "MaskedLMCollator", "MaskedLMDataModule",
        "MASSDataModule", "MultilingualDataModule", "MultilingualSpanCorruptionDataModule", "ParallelDataModule",
        "PermutationLMDataModule", "REALMDataModule", "RecurrentLMDataModule", "SpanCorruptionDataModule",
        "TextDataModule", "TextTokenizer", "UL2DataModule", "UniLMDataModule", "WordEmbeddingDataModule",
    ),
    "plm_lightning.data.cleaning": ("Cleaner", "CleaningConfig"),
    "plm_lightning.data.corruption": ("mask_tokens", "MaskingConfig"),
    "plm_lightning.data.streaming": ("streaming_dataset", "write_streams"),
    "plm_lightning.errors": ("ConfigError",),
    "plm_lightning.evaluation": ("evaluate_pairs", "evaluate_prompts", "PromptScorer", "template_pairs"),
    "plm_lightning.finetune": (
        "ChoiceDataModule", "ClassificationDataModule", "MultipleChoice", "QADataModule", "SequenceClassifier",
        "SpanExtractor", "TaggingDataModule", "TextToText", "TextToTextDataModule", "TokenClassifier", "WordTagger",
    ),
    "plm_lightning.knowledge": ("build_world", "ClozeReader", "LanguageModel", "MEMIT", "MEND", "ROME"),
    "plm_lightning.nn": (
        "BackboneConfig", "Decoder", "Encoder", "EncoderDecoder", "get_preset", "PRESETS", "ScalarMix",
    ),
    "plm_lightning.objectives": (
        "CausalLM", "CoVe", "DistilBERT", "ELECTRA", "ELMo", "ERNIE2", "ERNIETHU", "FastText", "GloVe", "MaskedLM",
        "PermutationLM", "PretrainingModule", "REALM", "Seq2SeqLM", "Word2Vec",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF, key=str.lower)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'plm_lightning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what a type checker and an IDE see: the same names, imported eagerly
    from plm_lightning.callbacks import AtomicCheckpointIO, MetricsFile, ThroughputMFU, TrainingSamples
    from plm_lightning.data import (
        BARTDataModule,
        CausalLMCollator,
        CausalLMDataModule,
        ERNIE2DataModule,
        ERNIETHUDataModule,
        FIMDataModule,
        GLMDataModule,
        MaskedLMCollator,
        MaskedLMDataModule,
        MASSDataModule,
        MultilingualDataModule,
        MultilingualSpanCorruptionDataModule,
        ParallelDataModule,
        PermutationLMDataModule,
        REALMDataModule,
        RecurrentLMDataModule,
        SpanCorruptionDataModule,
        TextDataModule,
        TextTokenizer,
        UL2DataModule,
        UniLMDataModule,
        WordEmbeddingDataModule,
        embedded_corpus,
    )
    from plm_lightning.data.cleaning import Cleaner, CleaningConfig
    from plm_lightning.data.corruption import MaskingConfig, mask_tokens
    from plm_lightning.data.streaming import streaming_dataset, write_streams
    from plm_lightning.errors import ConfigError
    from plm_lightning.evaluation import PromptScorer, evaluate_pairs, evaluate_prompts, template_pairs
    from plm_lightning.finetune import (
        ChoiceDataModule,
        ClassificationDataModule,
        MultipleChoice,
        QADataModule,
        SequenceClassifier,
        SpanExtractor,
        TaggingDataModule,
        TextToText,
        TextToTextDataModule,
        TokenClassifier,
        WordTagger,
    )
    from plm_lightning.knowledge import MEMIT, MEND, ROME, ClozeReader, LanguageModel, build_world
    from plm_lightning.nn import PRESETS, BackboneConfig, Decoder, Encoder, EncoderDecoder, ScalarMix, get_preset
    from plm_lightning.objectives import (
        ELECTRA,
        ERNIE2,
        ERNIETHU,
        REALM,
        CausalLM,
        CoVe,
        DistilBERT,
        ELMo,
        FastText,
        GloVe,
        MaskedLM,
        PermutationLM,
        PretrainingModule,
        Seq2SeqLM,
        Word2Vec,
    )
