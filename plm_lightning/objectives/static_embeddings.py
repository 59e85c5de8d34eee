"""Static word embeddings as LightningModules: word2vec (skip-gram and CBOW, negative sampling or hierarchical
softmax), fastText (subword n-grams) and GloVe, with nearest neighbours, analogies and the word2vec text format.

* word2vec (Mikolov et al. 2013a, sec. 3; 2013b, eq. 4 and sec. 2.1): skip-gram maximises
  log s(u_o . v_c) + sum_k log s(-u_k . v_c) over (center c, context o) pairs and k negatives from P_n; CBOW does the
  same with v_c replaced by the mean of the context vectors and o by the center; hierarchical softmax replaces the
  negatives by the sum over the center word's Huffman path of log s(+-u_node . v). Input vectors start uniform in
  +-0.5/dim, output vectors at zero (word2vec.c); plain SGD with the learning rate falling linearly to 1e-4 of itself.
* fastText (Bojanowski et al. 2017, sec. 3.2): a word's input vector is the mean of its own vector and the vectors of
  its character n-grams (3 to 6, the word wrapped in < >), hashed (FNV-1a) into ``buckets`` rows; a word never seen
  gets the mean of its n-grams.
* GloVe: ``objectives.glove``, on the same base. Loading any of them from a checkpoint and answering neighbour and
  analogy queries: ``objectives.static_queries``.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.data.static import WordVocabulary
from plm_lightning.data_contract import read_contract
from plm_lightning.errors import ConfigError
from plm_lightning.resume_state import ResumeHooks, restore_rng, rng_state


def fnv1a(text: str) -> int:
    """32-bit FNV-1a of the UTF-8 bytes, fastText's n-gram hash (its ``Dictionary::hash``)."""
    h = 2166136261
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def char_ngrams(word: str, minn: int = 3, maxn: int = 6) -> list[str]:
    """The character n-grams of ``<word>`` from ``minn`` to ``maxn`` characters (the whole ``<word>`` excluded: it is
    the word's own vector)."""
    wrapped = f"<{word}>"
    return [wrapped[i:i + n] for n in range(minn, maxn + 1) for i in range(len(wrapped) - n + 1)
            if wrapped[i:i + n] != wrapped]


class StaticEmbeddings(ResumeHooks, L.LightningModule):
    """Shared by the three methods: the vocabulary comes from the data module (and travels in the checkpoint);
    ``vectors()`` are the trained embeddings; neighbours and analogies by cosine similarity."""

    examples = "pairs"
    data_module_name = "WordEmbeddingDataModule"

    def __init__(self, dim: int = 100, learning_rate: float = 0.025, min_lr_ratio: float = 1e-4,
                 optimizer: Literal["sgd", "adam"] = "sgd") -> None:
        super().__init__()
        if dim < 1:
            raise ConfigError(f"model.dim={dim} must be a positive integer")
        if optimizer not in ("sgd", "adam"):
            raise ConfigError(f"model.optimizer={optimizer!r} is not one of sgd, adam")
        self.save_hyperparameters()
        self.vocabulary: WordVocabulary | None = None

    # -- construction -------------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None:  # weights from a checkpoint (``on_load_checkpoint`` gives the vocabulary)
            return
        data = read_contract(datamodule)
        if data.examples != self.examples:
            got = (data.examples if data.examples else
                   f"{type(datamodule).__name__} (use data.class_path: plm_lightning.data.{self.data_module_name})")
            raise ConfigError(f"{type(self).__name__} trains on data.examples={self.examples}, not {got}")
        if self.vocabulary is None:
            self.set_vocabulary(data.word_vocabulary)

    def configure_model(self) -> None:
        """Nothing here for ``ModelParallelStrategy`` to shard or split (embedding tables, ELMo's and CoVe's LSTMs):
        refused with a one-line error rather than Lightning's traceback; DDP serves these models."""
        from lightning.pytorch.strategies import ModelParallelStrategy

        if self._trainer is not None and isinstance(self.trainer.strategy, ModelParallelStrategy):
            raise ConfigError(f"trainer.strategy: {type(self).__name__} has no Transformer blocks for "
                              "ModelParallelStrategy (FSDP2, tensor parallelism) to shard or split; use "
                              "configs/strategy/ddp.yaml")

    def set_vocabulary(self, vocabulary: WordVocabulary) -> None:
        self.vocabulary = vocabulary
        self.build(len(vocabulary))

    def build(self, vocab_size: int) -> None:
        raise NotImplementedError

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {"objective": type(self).__name__, "vocabulary": self.vocabulary.to_dict(),
                                      "rng": rng_state()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.vocabulary is None:
            self.set_vocabulary(WordVocabulary.from_dict(checkpoint[CHECKPOINT_KEY]["vocabulary"]))
        restore_rng(checkpoint[CHECKPOINT_KEY].get("rng"))

    # -- optimisation -------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        """word2vec.c: SGD, the rate decaying linearly to ``min_lr_ratio`` of itself over training (or Adam with the
        same decay)."""
        sparse = any(isinstance(m, nn.Embedding) and m.sparse for m in self.modules())
        make = torch.optim.SGD if self.hparams.optimizer == "sgd" else torch.optim.SparseAdam if sparse else torch.optim.Adam
        optimizer = make(self.parameters(), lr=self.hparams.learning_rate)
        total, floor = max(1, int(self.trainer.estimated_stepping_batches)), self.hparams.min_lr_ratio
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(floor, 1 - s / total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    summed = False
    """With ``optimizer: sgd``, optimise the sum of the batch's example losses: word2vec.c updates once per example,
    so a batch of them is their summed gradient at the same rate. The mean is what is logged (and what Adam takes)."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.loss(batch)
        examples = max(1, len(batch[next(iter(batch))]))
        self.log("train/loss", loss, prog_bar=True, batch_size=examples)
        return loss * examples if self.summed and self.hparams.optimizer == "sgd" else loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch), prog_bar=True, batch_size=max(1, len(batch[next(iter(batch))])))

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    # -- using the vectors --------------------------------------------------------------------------------------
    def vectors(self) -> Tensor:
        raise NotImplementedError

    def vector(self, word: str) -> Tensor:
        """A word's vector; KeyError for a word outside the vocabulary (fastText builds one from n-grams)."""
        return self.vectors()[self.vocabulary.index[word]]

    def nearest(self, query: Tensor, k: int = 10, exclude: tuple[str, ...] = ()) -> list[tuple[str, float]]:
        table = F.normalize(self.vectors().detach().float(), dim=-1)
        scores = table @ F.normalize(query.detach().float(), dim=-1)
        for word in exclude:
            if word in self.vocabulary.index:
                scores[self.vocabulary.index[word]] = -2.0
        top = torch.topk(scores, min(k, len(scores)))
        return [(self.vocabulary.words[i], round(float(s), 4)) for s, i in zip(top.values, top.indices)]

    def neighbours(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        return self.nearest(self.vector(word), k, exclude=(word,))

    def analogy(self, a: str, b: str, c: str, k: int = 10) -> list[tuple[str, float]]:
        """``a - b + c`` (king - man + woman) by 3CosAdd over unit vectors, the three query words excluded
        (Mikolov et al. 2013c)."""
        unit = lambda w: F.normalize(self.vector(w).detach().float(), dim=-1)  # noqa: E731
        return self.nearest(unit(a) - unit(b) + unit(c), k, exclude=(a, b, c))

    def word2vec_text(self) -> str:
        """The word2vec text format: ``V dim`` then one ``word v_1 ... v_dim`` line per word."""
        table = self.vectors().detach().float().cpu().numpy()
        lines = [f"{table.shape[0]} {table.shape[1]}"]
        lines += [w + " " + " ".join(f"{v:.6f}" for v in row) for w, row in zip(self.vocabulary.words, table)]
        return "\n".join(lines) + "\n"


class Word2Vec(StaticEmbeddings):
    """Skip-gram or CBOW (the data's ``mode``), negative sampling or hierarchical softmax."""

    summed = True

    def __init__(self, dim: int = 100, learning_rate: float = 0.025, min_lr_ratio: float = 1e-4,
                 output: Literal["negative_sampling", "hierarchical_softmax"] = "negative_sampling",
                 optimizer: Literal["sgd", "adam"] = "sgd") -> None:
        """
        Args:
            dim: Vector size (word2vec: 100; the papers use 300).
            learning_rate: The starting rate (word2vec.c's SGD: 0.025 skip-gram, 0.05 CBOW).
            min_lr_ratio: Where the linear decay ends, relative to the start.
            output: negative_sampling (``data.negatives`` per example) or hierarchical_softmax (a Huffman tree).
            optimizer: sgd (word2vec.c's rule: the batch's summed example losses; fine for real vocabularies with
                subsampling, it can diverge when a few words fill every batch) or adam (the mean loss).
        """
        if output not in ("negative_sampling", "hierarchical_softmax"):
            raise ConfigError(f"model.output={output!r} is not one of negative_sampling, hierarchical_softmax")
        super().__init__(dim, learning_rate, min_lr_ratio, optimizer)

    def build(self, vocab_size: int) -> None:
        """Sparse gradients: a step touches only the rows of its words (and n-grams), as word2vec.c's updates."""
        dim = self.hparams.dim
        self.input_vectors = nn.Embedding(vocab_size, dim, sparse=True)
        nn.init.uniform_(self.input_vectors.weight, -0.5 / dim, 0.5 / dim)
        rows = vocab_size - 1 if self.hparams.output == "hierarchical_softmax" else vocab_size
        self.output_vectors = nn.Embedding(max(1, rows), dim, sparse=True)
        nn.init.zeros_(self.output_vectors.weight)
        if self.hparams.output == "hierarchical_softmax":
            codes, points, lengths = self.vocabulary.huffman()
            self.register_buffer("codes", torch.from_numpy(codes), persistent=False)
            self.register_buffer("points", torch.from_numpy(points), persistent=False)
            self.register_buffer("path_mask", torch.arange(codes.shape[1])[None] < torch.from_numpy(lengths)[:, None],
                                 persistent=False)

    def embed(self, ids: Tensor) -> Tensor:
        """Input vectors of ``ids`` (fastText: with their n-grams)."""
        return self.input_vectors(ids)

    def hidden(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(h, target word): skip-gram reads the center and predicts the context word; CBOW the mean of the context
        bag (``-1`` padded) and predicts the center."""
        context = batch["context"]
        if context.dim() == 1:
            return self.embed(batch["center"]), context
        present = context >= 0
        vectors = self.embed(context.clamp(min=0)) * present[..., None]
        return vectors.sum(1) / present.sum(1, keepdim=True).clamp(min=1), batch["center"]

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        if batch["center"].numel() == 0:
            return self.input_vectors.weight.sum() * 0.0
        h, target = self.hidden(batch)
        if self.hparams.output == "hierarchical_softmax":
            points, codes, mask = self.points[target], self.codes[target], self.path_mask[target]
            score = torch.einsum("bd,bpd->bp", h, self.output_vectors(points))
            # word2vec.c: code 0 means the left branch, taken with probability s(score)
            nll = F.binary_cross_entropy_with_logits(score, (1 - codes).float(), reduction="none")
            return (nll * mask).sum(1).mean()
        if "negatives" not in batch:
            raise ConfigError("negative sampling needs data.negatives > 0 (or model.output=hierarchical_softmax)")
        positive = (h * self.output_vectors(target)).sum(-1)
        negative = torch.einsum("bd,bkd->bk", h, self.output_vectors(batch["negatives"]))
        return (-F.logsigmoid(positive) - F.logsigmoid(-negative).sum(-1)).mean()

    def vectors(self) -> Tensor:
        return self.input_vectors.weight


class FastText(Word2Vec):
    """Skip-gram / CBOW whose input vector of a word is the mean of its own and its character n-grams' vectors."""

    def __init__(self, dim: int = 100, learning_rate: float = 0.05, min_lr_ratio: float = 1e-4,
                 output: Literal["negative_sampling", "hierarchical_softmax"] = "negative_sampling",
                 optimizer: Literal["sgd", "adam"] = "sgd", minn: int = 3, maxn: int = 6, buckets: int = 2_000_000) -> None:
        """
        Args:
            minn: Shortest character n-gram (fastText: 3).
            maxn: Longest character n-gram (fastText: 6).
            buckets: Rows the n-grams are hashed into (fastText: 2,000,000).
        """
        if not 1 <= minn <= maxn or buckets < 1:
            raise ConfigError(f"model.minn={minn}, maxn={maxn}, buckets={buckets}: need 1 <= minn <= maxn, buckets >= 1")
        super().__init__(dim, learning_rate, min_lr_ratio, output, optimizer)
        self.save_hyperparameters()

    def ngram_rows(self, word: str) -> list[int]:
        hp = self.hparams
        return [fnv1a(g) % hp.buckets for g in char_ngrams(word, hp.minn, hp.maxn)]

    def build(self, vocab_size: int) -> None:
        super().build(vocab_size)
        dim = self.hparams.dim
        self.ngram_vectors = nn.Embedding(self.hparams.buckets, dim, sparse=True)
        nn.init.uniform_(self.ngram_vectors.weight, -1.0 / dim, 1.0 / dim)
        rows = [self.ngram_rows(w) for w in self.vocabulary.words]
        width = max(1, max(len(r) for r in rows))
        table = np.full((vocab_size, width), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            table[i, :len(r)] = r
        self.register_buffer("word_ngrams", torch.from_numpy(table), persistent=False)

    def _mean(self, own: Tensor | None, ngrams: Tensor) -> Tensor:
        present = ngrams >= 0
        total = (self.ngram_vectors(ngrams.clamp(min=0)) * present[..., None]).sum(-2)
        count = present.sum(-1, keepdim=True)
        if own is not None:
            total, count = total + own, count + 1
        return total / count.clamp(min=1)

    def embed(self, ids: Tensor) -> Tensor:
        return self._mean(self.input_vectors(ids), self.word_ngrams[ids])

    def vectors(self) -> Tensor:
        return self.embed(torch.arange(len(self.vocabulary), device=self.input_vectors.weight.device))

    def vector(self, word: str) -> Tensor:
        """In the vocabulary: as trained; otherwise the mean of its n-grams (fastText's out-of-vocabulary words)."""
        if word in self.vocabulary.index:
            return super().vector(word)
        rows = torch.tensor(self.ngram_rows(word) or [-1], device=self.input_vectors.weight.device)
        return self._mean(None, rows)
