"""Word-level data for the static embeddings (word2vec, GloVe, fastText): a counted vocabulary, the corpus as chunks of
word ids, and, as pure seeded collators, the training examples of each method.

* word2vec (Mikolov et al. 2013a/b; the reference ``word2vec.c``): frequent words are discarded with probability
  1 - (sqrt(f/t) + 1) t/f (f the word's frequency, t = ``sample``), each center takes a window b ~ U[1, window] and
  is paired with the words within b (skip-gram: one example per pair; CBOW: one per center, its context as a bag),
  negatives are drawn from the unigram distribution raised to 3/4.
* GloVe (Pennington et al. 2014, sec. 3 and 4.2): co-occurrence counts over a symmetric window, each pair at distance
  d adding 1/d, counted once over the whole corpus and cached.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from tokenizers import normalizers, pre_tokenizers
from torch.utils.data import Dataset

from plm_lightning.corpus.sources import load_documents
from plm_lightning.data.collators import sample_keys
from plm_lightning.data.sampling import ResumableDataLoader, resumable_loader
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, default_cache_dir

LM_SPECIALS = ("<unk>", "<s>", "</s>")
_NORMALIZER = normalizers.BertNormalizer(lowercase=True, strip_accents=False, clean_text=True)
_PRE_TOKENIZER = pre_tokenizers.BertPreTokenizer()


def split_words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks (BERT's normalizer and pre-tokenizer from ``tokenizers``)."""
    return [w for w, _ in _PRE_TOKENIZER.pre_tokenize_str(_NORMALIZER.normalize_str(text))]


@dataclass
class WordVocabulary:
    """Words kept by ``min_count`` (and ``max_size``), most frequent first, with their corpus counts."""

    words: list[str]
    counts: np.ndarray

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def build(cls, documents: list[list[str]], min_count: int, max_size: int | None = None) -> WordVocabulary:
        from collections import Counter

        counter = Counter(w for doc in documents for w in doc)
        kept = sorted(((c, w) for w, c in counter.items() if c >= min_count), key=lambda cw: (-cw[0], cw[1]))
        if max_size is not None:
            kept = kept[:max_size]
        if not kept:
            top = max(counter.values(), default=0)
            raise ConfigError(f"data.min_count={min_count} removes every word of the corpus (its most frequent word "
                              f"occurs {top} times); lower data.min_count")
        return cls([w for _, w in kept], np.array([c for c, _ in kept], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, words: list[str], unk: str | None = None) -> np.ndarray:
        """Word ids; words outside the vocabulary are dropped, as word2vec does, or read as ``unk``."""
        if unk is not None:
            return np.array([self.index.get(w, self.index[unk]) for w in words], dtype=np.int64)
        return np.array([self.index[w] for w in words if w in self.index], dtype=np.int64)

    def with_specials(self) -> WordVocabulary:
        """The vocabulary of a language model over words: ``<unk>``, ``<s>``, ``</s>`` appended (count 0)."""
        extra = [w for w in LM_SPECIALS if w not in self.index]
        return WordVocabulary(self.words + extra, np.concatenate([self.counts, np.zeros(len(extra), np.int64)]))

    def noise_distribution(self, power: float = 0.75) -> np.ndarray:
        """Negative sampling's P_n(w) proportional to count^power (Mikolov et al. 2013b, sec. 2.2: power 3/4)."""
        p = self.counts.astype(np.float64) ** power
        return p / p.sum()

    def keep_probability(self, sample: float) -> np.ndarray:
        """word2vec.c's subsampling: keep w with probability (sqrt(f/t) + 1) t/f, f = count / total (<= 1)."""
        if sample <= 0:
            return np.ones(len(self))
        f = self.counts / self.counts.sum()
        return np.minimum(1.0, (np.sqrt(f / sample) + 1) * sample / f)

    def huffman(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hierarchical softmax's binary Huffman tree over the counts (Mikolov et al. 2013b, sec. 2.1; word2vec.c's
        CreateBinaryTree): per word its path's inner nodes ``points`` ``[V, D]``, branch bits ``codes`` ``[V, D]``
        and path ``lengths`` ``[V]``; V - 1 inner nodes, frequent words get short paths."""
        n = len(self)
        if n == 1:
            return np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64), np.ones(1, np.int64)
        heap = [(int(c), i) for i, c in enumerate(self.counts)]
        heapq.heapify(heap)
        parent, bit = np.zeros(2 * n - 1, np.int64), np.zeros(2 * n - 1, np.int64)
        node = n
        while len(heap) > 1:
            (c1, a), (c2, b) = heapq.heappop(heap), heapq.heappop(heap)
            parent[a], parent[b], bit[b] = node, node, 1
            heapq.heappush(heap, (c1 + c2, node))
            node += 1
        root = node - 1
        paths = []
        for w in range(n):
            codes, points, x = [], [], w
            while x != root:
                codes.append(bit[x])
                points.append(parent[x] - n)
                x = parent[x]
            paths.append((codes[::-1], points[::-1]))
        depth = max(len(c) for c, _ in paths)
        codes, points = np.zeros((n, depth), np.int64), np.zeros((n, depth), np.int64)
        lengths = np.array([len(c) for c, _ in paths], np.int64)
        for w, (c, p) in enumerate(paths):
            codes[w, :len(c)], points[w, :len(p)] = c, p
        return codes, points, lengths

    def to_dict(self) -> dict[str, Any]:
        return {"words": self.words, "counts": self.counts.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WordVocabulary:
        return cls(list(d["words"]), np.asarray(d["counts"], dtype=np.int64))


class WordChunks(Dataset):
    """The corpus as chunks of at most ``chunk_words`` word ids that never cross a document (word2vec's "sentences"
    of up to 1000 words); samples carry ``index`` and ``epoch`` for the seeded collators."""

    def __init__(self, documents: list[np.ndarray], chunk_words: int) -> None:
        self.chunks = [doc[i:i + chunk_words] for doc in documents for i in range(0, len(doc), chunk_words)]
        self.chunks = [c for c in self.chunks if len(c) > 1]

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, key: int | tuple[int, ...]) -> dict[str, Any]:
        epoch, index = key[:2] if isinstance(key, tuple) else (0, key)
        return {"index": index, "epoch": epoch, "words": self.chunks[index]}


def windows(length: int, window: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(center, context) position pairs of a chunk: each center's window b ~ U[1, window] (word2vec's reduced
    window, which weighs near words more), every other position within b."""
    reach = rng.integers(1, window + 1, length)
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
    center = np.repeat(np.arange(length), len(offsets))
    offset = np.tile(offsets, length)
    context = center + offset
    keep = (np.abs(offset) <= reach[center]) & (context >= 0) & (context < length)
    return center[keep], context[keep]


class Word2VecCollator:
    """Chunks -> skip-gram pairs ``center``/``context`` or CBOW examples ``context`` ``[P, 2 window]`` (-1 padded) /
    ``center``, with ``negatives`` ``[P, k]`` from the unigram^3/4 distribution (none for hierarchical softmax)."""

    def __init__(self, keep: np.ndarray, noise: np.ndarray, window: int, negatives: int,
                 mode: Literal["skipgram", "cbow"], seed: int) -> None:
        self.keep, self.noise_cdf = keep, np.cumsum(noise)
        self.window, self.negatives, self.mode, self.seed = window, negatives, mode, seed

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Each chunk's subsampling, windows and negatives from its own key: a chunk makes the same examples in
        any batch, on any number of ranks."""
        centers, contexts, negatives = [], [], []
        for s, key in zip(samples, sample_keys(self.seed, samples)):
            rng = np.random.default_rng(int(key))
            words = s["words"][rng.random(len(s["words"])) < self.keep[s["words"]]]  # subsampling
            if len(words) < 2:
                continue
            c, x = windows(len(words), self.window, rng)
            if self.mode == "skipgram":
                centers.append(words[c])
                contexts.append(words[x])
            else:
                bag = np.full((len(words), 2 * self.window), -1, dtype=np.int64)
                slot = np.concatenate([[0], np.cumsum(np.bincount(c, minlength=len(words)))[:-1]])
                column = np.arange(len(c)) - slot[c]
                bag[c, column] = words[x]
                centers.append(words)
                contexts.append(bag)
            if self.negatives > 0:
                draws = rng.random((len(centers[-1]), self.negatives))
                negatives.append(np.minimum(np.searchsorted(self.noise_cdf, draws), len(self.noise_cdf) - 1))
        width = () if self.mode == "skipgram" else (2 * self.window,)
        out = {"center": torch.from_numpy(np.concatenate(centers) if centers else np.zeros(0, np.int64)),
               "context": torch.from_numpy(np.concatenate(contexts) if contexts else np.zeros((0, *width), np.int64))}
        if self.negatives > 0:
            out["negatives"] = torch.from_numpy(np.concatenate(negatives) if negatives
                                                else np.zeros((0, self.negatives), np.int64))
        return out


def cooccurrence(documents: list[np.ndarray], vocab_size: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GloVe's X_ij: every pair at distance d <= ``window`` in a document adds 1/d, both ways; as sorted COO arrays
    (rows, cols, values), zero entries absent."""
    rows, cols, vals = [], [], []
    for doc in documents:
        for d in range(1, window + 1):
            if len(doc) <= d:
                break
            a, b = doc[:-d], doc[d:]
            rows += [a, b]
            cols += [b, a]
            vals += [np.full(len(a), 1.0 / d)] * 2
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    key = np.concatenate(rows) * vocab_size + np.concatenate(cols)
    unique, inverse = np.unique(key, return_inverse=True)
    values = np.bincount(inverse, weights=np.concatenate(vals))
    return unique // vocab_size, unique % vocab_size, values


class SequenceCollator:
    """Chunks -> ELMo's biLM rows ``<s> w_1 .. w_n </s>``: ``input_ids`` ``[B, T]`` (padded with ``</s>``'s id, masked
    by ``attention_mask``), their characters ``chars`` ``[B, T, max_chars]`` and ``lengths``."""

    def __init__(self, vocabulary: WordVocabulary, max_chars: int = 50) -> None:
        from plm_lightning.corpus.characters import char_ids

        self.bos, self.eos = vocabulary.index["<s>"], vocabulary.index["</s>"]
        self.chars = np.array([char_ids(w, max_chars) for w in vocabulary.words], dtype=np.int64)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [np.concatenate([[self.bos], s["words"], [self.eos]]) for s in samples]
        lengths = np.array([len(r) for r in rows])
        ids = np.full((len(rows), lengths.max()), self.eos, dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
        return {"input_ids": torch.from_numpy(ids), "chars": torch.from_numpy(self.chars[ids]),
                "lengths": torch.from_numpy(lengths),
                "attention_mask": torch.arange(ids.shape[1])[None] < torch.from_numpy(lengths)[:, None]}


class CooccurrenceEntries(Dataset):
    """The non-zero X_ij, one sample each; batches are shuffled by the sampler."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
        self.rows, self.cols, self.values = rows, cols, values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, key: int | tuple[int, ...]) -> int:
        return key[1] if isinstance(key, tuple) else key


class CooccurrenceCollator:
    def __init__(self, entries: CooccurrenceEntries) -> None:
        self.entries = entries

    def __call__(self, index: list[int]) -> dict[str, torch.Tensor]:
        i = np.asarray(index)
        e = self.entries
        return {"row": torch.from_numpy(e.rows[i]), "col": torch.from_numpy(e.cols[i]),
                "count": torch.from_numpy(e.values[i]).float()}


class WordEmbeddingDataModule(L.LightningDataModule):
    """The static embeddings' data: word2vec / fastText examples (``examples: pairs``) or GloVe's co-occurrences
    (``examples: cooccurrence``) over a word vocabulary of the corpus."""

    @property
    def inspection_view(self) -> str:
        """``inspect``'s view of this data: ELMo's sequences, or the static embeddings' examples."""
        return "sequences" if self.examples == "sequences" else "static"

    def __init__(self, source: str | None = None, text_field: str = "text", split: str = "train",
                 examples: Literal["pairs", "cooccurrence", "sequences"] = "pairs",
                 mode: Literal["skipgram", "cbow"] = "skipgram",
                 min_count: int = 5, max_vocab: int | None = None, window: int = 5, sample: float = 1e-5,
                 negatives: int = 5, chunk_words: int = 1000, batch_size: int = 16, val_fraction: float = 0.02,
                 max_documents: int | None = None, num_workers: int = 0, seed: int = 1234,
                 cache_dir: str | None = None) -> None:
        """
        Args:
            examples: pairs (word2vec, fastText), cooccurrence (GloVe) or sequences (ELMo: rows of ``chunk_words``
                words framed by ``<s>`` / ``</s>``, unknown words read as ``<unk>``).
            mode: skipgram (predict each context word from the center) or cbow (the center from its context bag).
            min_count: Words rarer than this are dropped (word2vec: 5).
            max_vocab: Keep at most this many words (the most frequent).
            window: Largest context window (word2vec: 5, each center drawing b ~ U[1, window]; GloVe: 10, all of it).
            sample: Subsampling threshold t of frequent words (Mikolov et al. 2013b: 1e-5; 0 = off).
            negatives: Negative samples per example (5; 0 for hierarchical softmax).
            chunk_words: Words per training chunk (word2vec's 1000-word sentences); pairs never cross chunks.
            batch_size: Chunks per batch (pairs) or co-occurrence entries per batch.
        """
        super().__init__()
        if examples not in ("pairs", "cooccurrence", "sequences"):
            raise ConfigError(f"data.examples={examples!r} is not one of pairs, cooccurrence, sequences")
        if mode not in ("skipgram", "cbow"):
            raise ConfigError(f"data.mode={mode!r} is not one of skipgram, cbow")
        for key, value in (("min_count", min_count), ("window", window), ("chunk_words", chunk_words),
                           ("batch_size", batch_size)):
            if value < 1:
                raise ConfigError(f"data.{key}={value} must be a positive integer")
        if negatives < 0 or sample < 0:
            raise ConfigError("data.negatives and data.sample must be >= 0")
        self.save_hyperparameters()
        self.source, self.text_field, self.split_name, self.max_documents = source, text_field, split, max_documents
        self.examples, self.mode, self.min_count, self.max_vocab = examples, mode, min_count, max_vocab
        self.window, self.sample, self.negatives, self.chunk_words = window, sample, negatives, chunk_words
        self.batch_size, self.val_fraction, self.num_workers, self.seed = batch_size, val_fraction, num_workers, seed
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.vocabulary: WordVocabulary | None = None
        self.splits: dict[str, list[np.ndarray]] = {}
        self.entries: CooccurrenceEntries | None = None

    def contract(self) -> DataContract:
        """The examples and the vocabulary (built from the training split on first use)."""
        self.setup()
        return DataContract(examples=self.examples, word_vocabulary=self.vocabulary)

    def setup(self, stage: str | None = None) -> None:
        if self.vocabulary is not None:
            return
        texts, fingerprint = load_documents(self.source, self.text_field, self.split_name, self.max_documents)
        documents = [split_words(t) for t in texts]
        order = np.random.default_rng(self.seed).permutation(len(documents))
        n_val = int(len(documents) * self.val_fraction) if len(documents) > 1 else 0
        val, train = set(order[:n_val].tolist()), order[n_val:]
        self.vocabulary = WordVocabulary.build([documents[i] for i in train], self.min_count, self.max_vocab)
        unk = None
        if self.examples == "sequences":
            self.vocabulary, unk = self.vocabulary.with_specials(), "<unk>"
        encode = lambda i: self.vocabulary.encode(documents[i], unk)  # noqa: E731
        self.splits = {"train": [encode(i) for i in train], "val": [encode(i) for i in sorted(val)]}
        if self.examples == "cooccurrence":
            self.entries = CooccurrenceEntries(*self._cooccurrence(fingerprint))

    def _cooccurrence(self, fingerprint: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Counted once per (corpus, vocabulary, window) and cached as ``.npz``."""
        key = json.dumps([fingerprint, self.min_count, self.max_vocab, self.window, self.val_fraction, self.seed])
        path = self.cache_dir / f"cooccurrence-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
        if path.is_file():
            with np.load(path) as z:
                return z["rows"], z["cols"], z["values"]
        rows, cols, values = cooccurrence(self.splits["train"], len(self.vocabulary), self.window)
        atomic_write(path, lambda tmp: np.savez(tmp, rows=rows, cols=cols, values=values))
        return rows, cols, values

    def _loader(self, dataset: Dataset, collate: Any, shuffle: bool) -> ResumableDataLoader | list:
        return resumable_loader(dataset, collate, self.batch_size, shuffle, self.seed, self.num_workers, self.trainer)

    def pairs_collator(self) -> Word2VecCollator:
        vocab = self.vocabulary
        return Word2VecCollator(vocab.keep_probability(self.sample), vocab.noise_distribution(), self.window,
                                self.negatives, self.mode, self.seed)

    def collator(self) -> Any:
        return SequenceCollator(self.vocabulary) if self.examples == "sequences" else self.pairs_collator()

    def train_dataloader(self) -> ResumableDataLoader:
        if self.examples == "cooccurrence":
            return self._loader(self.entries, CooccurrenceCollator(self.entries), shuffle=True)
        return self._loader(WordChunks(self.splits["train"], self.chunk_words), self.collator(), shuffle=True)

    def val_dataloader(self) -> ResumableDataLoader | list:
        if self.examples == "cooccurrence":
            return []  # GloVe fits the counts themselves; there is no held-out objective
        return self._loader(WordChunks(self.splits["val"], self.chunk_words), self.collator(), shuffle=False)
