"""plm-lightning: the pretraining objectives of the PLM literature as Lightning modules over shared blocks.

An objective = a corruption of the input (``plm_lightning.data.corruption``) + an attention-mask shape
(``plm_lightning.nn.masks``) + the positions that carry loss (``labels != -100``).
"""

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

__version__ = "0.1.0"

__all__ = [
    "AtomicCheckpointIO", "BARTDataModule", "BackboneConfig", "CausalLM", "CausalLMCollator", "CausalLMDataModule",
    "ChoiceDataModule", "ClassificationDataModule", "Cleaner", "CleaningConfig", "ClozeReader", "CoVe", "ConfigError",
    "Decoder", "DistilBERT", "ELECTRA", "ELMo", "ERNIE2", "ERNIE2DataModule", "ERNIETHU", "ERNIETHUDataModule",
    "Encoder", "EncoderDecoder",
    "FIMDataModule", "FastText", "GLMDataModule", "GloVe", "LanguageModel", "MASSDataModule", "MEMIT", "MEND",
    "MaskedLM", "MaskedLMCollator", "MaskedLMDataModule", "MaskingConfig", "MetricsFile", "MultilingualDataModule",
    "MultilingualSpanCorruptionDataModule", "MultipleChoice", "PRESETS", "ParallelDataModule", "PermutationLM",
    "PermutationLMDataModule", "PretrainingModule", "PromptScorer", "QADataModule", "REALM", "REALMDataModule",
    "ROME", "RecurrentLMDataModule", "ScalarMix", "Seq2SeqLM", "SequenceClassifier", "SpanCorruptionDataModule",
    "SpanExtractor", "TaggingDataModule", "TextDataModule", "TextToText", "TextToTextDataModule", "TextTokenizer",
    "ThroughputMFU", "TokenClassifier", "TrainingSamples", "UL2DataModule", "UniLMDataModule", "Word2Vec",
    "WordEmbeddingDataModule", "WordTagger", "build_world", "embedded_corpus", "evaluate_pairs", "evaluate_prompts",
    "get_preset", "mask_tokens", "streaming_dataset", "template_pairs", "write_streams",
]
