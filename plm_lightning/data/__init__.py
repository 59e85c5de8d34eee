"""The Lightning data layer: sources, tokenizers, packing, corruption and collators."""

from plm_lightning.data.collators import CausalLMCollator, MaskedLMCollator, sample_keys
from plm_lightning.data.datamodule import BlockDataset, CausalLMDataModule, MaskedLMDataModule, TextDataModule
from plm_lightning.data.packing import PackedBlocks
from plm_lightning.data.sources import embedded_corpus, load_documents, split_sentences
from plm_lightning.data.tokenizer import TextTokenizer, train_tokenizer

__all__ = [
    "BlockDataset", "CausalLMCollator", "CausalLMDataModule", "MaskedLMCollator", "MaskedLMDataModule",
    "PackedBlocks", "TextDataModule", "TextTokenizer", "embedded_corpus", "load_documents", "sample_keys",
    "split_sentences", "train_tokenizer",
]
