"""CoVe: context vectors from a machine-translation encoder (McCann et al. 2017, "Learned in Translation").

An attentional sequence-to-sequence LSTM is trained to translate; its encoder, a two-layer bidirectional LSTM over
(GloVe) word vectors, is the MT-LSTM, and CoVe(w) = MT-LSTM(GloVe(w)). Downstream models read [GloVe(w); CoVe(w)]
(sec. 4). corruption: none | attention: the decoder's global attention over the encoder states | loss: every target
word under teacher forcing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from plm_lightning.data.static import WordVocabulary
from plm_lightning.data_contract import read_contract
from plm_lightning.errors import ConfigError
from plm_lightning.nn.losses import linear_cross_entropy
from plm_lightning.nn.recurrent import AttentionalDecoder
from plm_lightning.objectives.static_embeddings import CHECKPOINT_KEY, StaticEmbeddings


def read_word2vec_text(path: str) -> dict[str, Tensor]:
    """Vectors of a word2vec text file (``V dim`` header, then ``word v_1 .. v_dim``; GloVe's own files have no
    header, which is accepted too)."""
    vectors: dict[str, Tensor] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f):
            parts = line.rstrip().split(" ")
            if line_no == 0 and len(parts) == 2:
                continue
            try:
                vectors[parts[0]] = torch.tensor([float(v) for v in parts[1:]])
            except ValueError as err:
                raise ConfigError(f"model.word_vectors: '{path}' line {line_no + 1} is not 'word v_1 ... v_dim'") from err
    if not vectors:
        raise ConfigError(f"model.word_vectors: '{path}' holds no vectors")
    return vectors


class CoVe(StaticEmbeddings):
    """MT-LSTM encoder (2-layer BiLSTM) + attentional 2-layer LSTM decoder, trained to translate."""

    examples = "translation"
    data_module_name = "ParallelDataModule"

    def __init__(self, embedding_dim: int = 300, hidden: int = 300, layers: int = 2, dropout: float = 0.2,
                 word_vectors: str | None = None, freeze_word_vectors: bool = True, learning_rate: float = 1e-3) -> None:
        """
        Args:
            embedding_dim: Word vector size (GloVe: 300).
            hidden: LSTM size per direction (CoVe: 300, so CoVe vectors have 600 dimensions).
            layers: Encoder and decoder layers (CoVe: 2).
            dropout: Dropout between layers (CoVe: 0.2).
            word_vectors: A word2vec text file (``export`` of a GloVe recipe, or GloVe's own) to start the source
                embeddings from; words it lacks start random.
            freeze_word_vectors: Keep the source embeddings fixed (CoVe feeds fixed GloVe vectors).
            learning_rate: Adam's rate.
        """
        if layers < 1 or hidden < 1 or embedding_dim < 1:
            raise ConfigError("model.layers, model.hidden and model.embedding_dim must be positive")
        super().__init__(embedding_dim, learning_rate, 1.0, "adam")
        self.save_hyperparameters()
        self.target_vocabulary: WordVocabulary | None = None

    def setup(self, stage: str) -> None:
        if self.vocabulary is None and getattr(self.trainer, "datamodule", None) is not None:
            self.target_vocabulary = read_contract(self.trainer.datamodule).target_vocabulary
        super().setup(stage)

    def build(self, vocab_size: int) -> None:
        hp = self.hparams
        self.word_embeddings = nn.Embedding(vocab_size, hp.embedding_dim)
        if hp.word_vectors:
            self._load_word_vectors(hp.word_vectors)
        self.word_embeddings.weight.requires_grad_(not (hp.word_vectors and hp.freeze_word_vectors))
        self.encoder = nn.LSTM(hp.embedding_dim, hp.hidden, hp.layers, batch_first=True, bidirectional=True,
                               dropout=hp.dropout if hp.layers > 1 else 0.0)
        self.target_embeddings = nn.Embedding(len(self.target_vocabulary), hp.embedding_dim)
        self.decoder = AttentionalDecoder(hp.embedding_dim, hp.hidden, 2 * hp.hidden, hp.layers, hp.dropout)
        self.output = nn.Linear(hp.hidden, len(self.target_vocabulary))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam((p for p in self.parameters() if p.requires_grad), lr=self.hparams.learning_rate)

    def _load_word_vectors(self, path: str) -> None:
        vectors = read_word2vec_text(path)
        dim = len(next(iter(vectors.values())))
        if dim != self.hparams.embedding_dim:
            raise ConfigError(f"model.word_vectors: '{path}' has {dim}-dimensional vectors but model.embedding_dim="
                              f"{self.hparams.embedding_dim}")
        with torch.no_grad():
            for word, i in self.vocabulary.index.items():
                if word in vectors:
                    self.word_embeddings.weight[i] = vectors[word]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[CHECKPOINT_KEY]["target_vocabulary"] = self.target_vocabulary.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.target_vocabulary is None:
            self.target_vocabulary = WordVocabulary.from_dict(checkpoint[CHECKPOINT_KEY]["target_vocabulary"])
        super().on_load_checkpoint(checkpoint)

    def cove(self, source_ids: Tensor, source_mask: Tensor | None = None) -> Tensor:
        """CoVe vectors ``[B, S, 2 * hidden]``: the MT-LSTM's last layer over the source words (padding packed
        away, so it never reaches either direction)."""
        x = self.word_embeddings(source_ids)
        if source_mask is None:
            return self.encoder(x)[0]
        lengths = source_mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def features(self, source_ids: Tensor, source_mask: Tensor | None = None) -> Tensor:
        """What a downstream model reads (sec. 4): [GloVe(w); CoVe(w)], ``[B, S, embedding_dim + 2 * hidden]``."""
        return torch.cat([self.word_embeddings(source_ids), self.cove(source_ids, source_mask)], dim=-1)

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        mask = batch["source_mask"]
        context = self.cove(batch["source_ids"], mask)
        states = self.decoder(self.target_embeddings(batch["decoder_input_ids"]), context, mask)
        keep = batch["labels"] != -100
        return linear_cross_entropy(states[keep], self.output.weight, self.output.bias, batch["labels"][keep]).loss

    def vectors(self) -> Tensor:
        """Context-free: the source word embeddings (the GloVe half of the features)."""
        return self.word_embeddings.weight

