"""Parallel data for CoVe's machine translation (McCann et al. 2017): ``source<TAB>target`` sentence pairs (or
``fake:<corpus>``, every sentence of a corpus with its Fake-English version), a word vocabulary per side, and
teacher-forced batches."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from plm_lightning.corpus.sources import load_parallel
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.sampling import KeyedList, ResumableDataLoader, resumable_loader
from plm_lightning.data.static import WordVocabulary, split_words
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError


def pad(rows: list[np.ndarray], value: int) -> torch.Tensor:
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return torch.from_numpy(out)


class TranslationCollator:
    """Pairs -> ``source_ids`` ``[B, S]`` (+ ``source_mask``), ``decoder_input_ids`` ``<s> y`` and ``labels``
    ``y </s>`` (-100 on padding)."""

    def __init__(self, source: WordVocabulary, target: WordVocabulary) -> None:
        self.source_pad = source.index["</s>"]
        self.bos, self.eos = target.index["<s>"], target.index["</s>"]

    def __call__(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, torch.Tensor]:
        sources = [s for s, _ in pairs]
        lengths = torch.tensor([len(s) for s in sources])
        targets = [t for _, t in pairs]
        return {"source_ids": pad(sources, self.source_pad),
                "source_mask": torch.arange(int(lengths.max()))[None] < lengths[:, None],
                "decoder_input_ids": pad([np.concatenate([[self.bos], t]) for t in targets], self.eos),
                "labels": pad([np.concatenate([t, [self.eos]]) for t in targets], IGNORE_INDEX)}


class ParallelDataModule(L.LightningDataModule):
    """Translation pairs for CoVe's MT-LSTM."""

    inspection_view = "translation"

    def __init__(self, parallel_corpus: str = "fake:embedded", min_count: int = 2, max_length: int = 50,
                 max_pairs: int | None = None, batch_size: int = 32, val_fraction: float = 0.02,
                 num_workers: int = 0, seed: int = 1234) -> None:
        """
        Args:
            parallel_corpus: A UTF-8 file of ``source<TAB>target`` lines, or ``fake:<corpus>`` (``fake:embedded``:
                the embedded corpus's sentences with their Fake-English versions, a translation task for free).
            min_count: Words rarer than this on either side read as ``<unk>``.
            max_length: Sentences are cut to this many words.
            max_pairs: Use only the first pairs.
        """
        super().__init__()
        if min_count < 1 or max_length < 1 or batch_size < 1:
            raise ConfigError("data.min_count, data.max_length and data.batch_size must be positive integers")
        self.save_hyperparameters()
        self.parallel_corpus, self.min_count, self.max_length, self.max_pairs = (parallel_corpus, min_count,
                                                                                 max_length, max_pairs)
        self.batch_size, self.val_fraction, self.num_workers, self.seed = batch_size, val_fraction, num_workers, seed
        self.source_vocabulary: WordVocabulary | None = None
        self.target_vocabulary: WordVocabulary | None = None
        self.splits: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}

    @property
    def vocabulary(self) -> WordVocabulary | None:
        """The source side's vocabulary: what the encoder (CoVe) reads."""
        return self.source_vocabulary

    def contract(self) -> DataContract:
        """Translation pairs and both vocabularies (built from the training split on first use)."""
        self.setup()
        return DataContract(examples="translation", word_vocabulary=self.source_vocabulary,
                            target_vocabulary=self.target_vocabulary)

    def setup(self, stage: str | None = None) -> None:
        if self.source_vocabulary is not None:
            return
        pairs, _ = load_parallel("", self.parallel_corpus, self.max_pairs, where="data.parallel_corpus")
        words = [(split_words(s)[: self.max_length], split_words(t)[: self.max_length]) for s, t in pairs]
        words = [(s, t) for s, t in words if s and t]
        order = np.random.default_rng(self.seed).permutation(len(words))
        n_val = int(len(words) * self.val_fraction)
        train, val = order[n_val:], order[:n_val]
        self.source_vocabulary = WordVocabulary.build([words[i][0] for i in train], self.min_count).with_specials()
        self.target_vocabulary = WordVocabulary.build([words[i][1] for i in train], self.min_count).with_specials()
        encode = lambda i: (self.source_vocabulary.encode(words[i][0], "<unk>"),  # noqa: E731
                            self.target_vocabulary.encode(words[i][1], "<unk>"))
        self.splits = {"train": [encode(i) for i in train], "val": [encode(i) for i in sorted(val)]}

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        collate = TranslationCollator(self.source_vocabulary, self.target_vocabulary)
        return resumable_loader(KeyedList(self.splits[split]), collate, self.batch_size, shuffle, self.seed,
                                self.num_workers, self.trainer)

    def train_dataloader(self) -> ResumableDataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> ResumableDataLoader | list:
        return self._loader("val", shuffle=False)
