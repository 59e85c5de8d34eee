"""Frozen word-level feature extractors for task models: ELMo (Peters et al. 2018, sec. 3.3: the task model reads
ELMo^task_k = gamma * sum_j s_j h_kj, a ``ScalarMix`` of the biLM's L + 1 layers learnt with the task), CoVe
(McCann et al. 2017, sec. 4: [GloVe(w); CoVe(w)]) and static vectors (word2vec, GloVe, fastText). The extractor's
weights never train; it reads the task's words with its own vocabulary (lower-cased, unknown words as ``<unk>`` or
zeros; ELMo's character encoder reads every word)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from plm_lightning.corpus.characters import char_ids
from plm_lightning.data.static import split_words
from plm_lightning.errors import ConfigError
from plm_lightning.nn.recurrent import ScalarMix


def load_word_model(path: str) -> Any:
    """An ELMo, CoVe, word2vec, GloVe or fastText checkpoint of ours, in eval mode with frozen weights."""
    from pathlib import Path

    from plm_lightning.checkpoint_format import CHECKPOINT_KEY
    from plm_lightning.objectives import CoVe, ELMo
    from plm_lightning.objectives.static_queries import STATIC_OBJECTIVES

    if not Path(path).is_file():
        raise ConfigError(f"model.features_from: '{path}' does not exist (an ELMo, CoVe, word2vec, GloVe or fastText "
                          "checkpoint)")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    kinds = {**STATIC_OBJECTIVES, "ELMo": ELMo, "CoVe": CoVe}
    objective = checkpoint.get(CHECKPOINT_KEY, {}).get("objective")
    if objective not in kinds:
        raise ConfigError(f"model.features_from: '{path}' holds a {objective or 'foreign'} checkpoint; it needs one of "
                          f"{', '.join(kinds)}")
    import inspect

    cls = kinds[objective]
    accepted = inspect.signature(cls.__init__).parameters
    from plm_lightning.objectives.nesting import nested_construction

    with nested_construction():
        model = cls(**{k: v for k, v in checkpoint.get("hyper_parameters", {}).items()
                       if k in accepted and k != "word_vectors"})
    model.on_load_checkpoint(checkpoint)
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval().requires_grad_(False)


def normalise(word: str) -> str:
    """The extractor's spelling of a task word (its training lower-cased and split like BERT's normaliser)."""
    parts = split_words(word)
    return parts[0] if len(parts) == 1 else word.lower()


class WordFeatures(nn.Module):
    """``forward(words)`` -> ``[B, T, dim]`` features of padded word lists, the extractor frozen (its mix trains)."""

    word_level = True
    """Data modules batch words (not token ids) for a model whose tokenizer is this."""

    def __init__(self, path: str) -> None:
        super().__init__()
        model = load_word_model(path)
        self.kind = type(model).__name__
        self.vocabulary = model.vocabulary
        object.__setattr__(self, "extractor", model)  # not a submodule: frozen, and outside the task's checkpoints
        self.register_buffer("device_probe", torch.zeros(0), persistent=False)
        self.scalar_mix = ScalarMix(model.hparams.num_layers + 1) if self.kind == "ELMo" else None
        if self.kind == "ELMo":
            self.dim = 2 * model.hparams.projection_dim
        elif self.kind == "CoVe":
            self.dim = model.hparams.embedding_dim + 2 * model.hparams.hidden
        else:
            self.dim = model.vectors().shape[1]

    def _ids(self, words: list[list[str]], framed: bool) -> tuple[Tensor, Tensor]:
        index = self.vocabulary.index
        unk = index.get("<unk>", -1)
        rows = [[index.get(normalise(w), unk) for w in ws] for ws in words]
        if framed:
            rows = [[index["<s>"], *r, index["</s>"]] for r in rows]
        length = max(len(r) for r in rows)
        ids = torch.tensor([r + [max(unk, 0)] * (length - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in rows])
        return ids, mask

    def forward(self, words: list[list[str]]) -> Tensor:
        model = self.extractor
        device = self.device_probe.device
        model.to(device)
        if self.kind == "ELMo":  # <s> w_1 .. w_n </s>, characters for every word (no unknown words)
            ids, mask = self._ids(words, framed=True)
            framed = [["<s>", *(normalise(w) for w in ws), "</s>"] for ws in words]
            chars = torch.tensor([[char_ids(w) for w in ws] + [char_ids("</s>")] * (ids.shape[1] - len(ws))
                                  for ws in framed])
            batch = {"input_ids": ids.clamp(min=0).to(device), "chars": chars.to(device),
                     "lengths": mask.sum(1).to(device), "attention_mask": mask.bool().to(device)}
            with torch.no_grad():
                layers = model.features(batch)
            return self.scalar_mix([h[:, 1:-1] for h in layers])
        ids, mask = self._ids(words, framed=False)
        known = (ids >= 0).to(device)
        ids, mask = ids.clamp(min=0).to(device), mask.to(device)
        with torch.no_grad():
            if self.kind == "CoVe":
                return model.features(ids, mask) * known[..., None]
            return model.vectors()[ids] * known[..., None]
