"""GPT-2 with fill-in-the-middle (Bavarian et al. 2022): GPT-2's contiguous blocks, each document piece of a block
moved into FIM layout with probability ``fim_rate`` when batched (``data.corruption.fim``), then next-token
prediction over everything, as the paper trains."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.tokenizer import TextTokenizer
from plm_lightning.data.collators import CausalLMCollator, sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.fim import FIMSplit, fim_document
from plm_lightning.data.datamodule import CausalLMDataModule
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.errors import ConfigError

FIM_ROLES = ("fim_prefix", "fim_middle", "fim_suffix")


def document_pieces(document_ids: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of one document id in a packed row (padding, id -1, excluded)."""
    edges = np.flatnonzero(np.diff(document_ids)) + 1
    bounds = [0, *edges.tolist(), len(document_ids)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if document_ids[a] >= 0]


class FIMCollator(CausalLMCollator):
    """Context-level FIM on packed rows: each document piece (its trailing end-of-text kept last) is transformed
    with probability ``fim_rate``, PSM or SPM (``spm_rate``), and the row cut back to its length; ``labels`` are the
    next tokens; ``fim_documents`` / ``documents`` count the pieces per row for ``inspect``."""

    objective = "fill_in_the_middle"

    def __init__(self, tokenizer: TextTokenizer, fim_rate: float = 0.5, spm_rate: float = 0.5,
                 split: FIMSplit = "character", seed: int = 0, document_mask: bool = False) -> None:
        super().__init__(document_mask)
        self.tokenizer, self.fim_rate, self.spm_rate, self.split, self.seed = tokenizer, fim_rate, spm_rate, split, seed
        self.ids = {**{role: tokenizer.ids[role] for role in FIM_ROLES}, "eos": tokenizer.ids["eos"]}

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode_batch([text])[0] if text else []

    def transform(self, ids: np.ndarray, document_ids: np.ndarray, key: int) -> tuple[list[int], list[int], int, int]:
        """(tokens, their document ids, FIM documents, documents that had text to move) of one packed row."""
        rng = np.random.default_rng(int(key))
        tokens: list[int] = []
        docs: list[int] = []
        pieces = document_pieces(document_ids)
        transformed = candidates = 0
        for start, end in pieces:
            body = ids[start:end].tolist()
            tail = [body.pop()] if body and body[-1] == self.ids["eos"] else []
            candidates += bool(body)
            if body and rng.random() < self.fim_rate:
                body, _ = fim_document(body, rng, self.ids, self.spm_rate, self.split, self.tokenizer.decode,
                                       self._encode)
                transformed += 1
            tokens.extend(body + tail)
            docs.extend([int(document_ids[start])] * (len(body) + len(tail)))
        return tokens, docs, transformed, candidates

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        length = len(samples[0]["input_ids"])
        ids = np.full((len(samples), length), self.ids["eos"], dtype=np.int64)
        docs = np.full((len(samples), length), -1, dtype=np.int64)
        counts = []
        for row, (s, key) in enumerate(zip(samples, sample_keys(self.seed, samples))):
            tokens, doc, fim, total = self.transform(np.asarray(s["input_ids"]), np.asarray(s["document_ids"]), key)
            n = min(length, len(tokens))
            ids[row, :n], docs[row, :n] = tokens[:n], doc[:n]
            counts.append((fim, total))
        real = docs >= 0
        labels = np.full_like(ids, IGNORE_INDEX)
        labels[:, :-1] = np.where(real[:, 1:], ids[:, 1:], IGNORE_INDEX)
        out = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels),
               "attention_mask": torch.from_numpy(real), "fim_documents": torch.tensor([c[0] for c in counts]),
               "documents": torch.tensor([c[1] for c in counts])}
        if self.document_mask:
            out["document_ids"] = torch.from_numpy(docs)
        return out


class FIMDataModule(CausalLMDataModule):
    """GPT-2's data with fill-in-the-middle; the tokenizer needs ``<fim_prefix>``, ``<fim_middle>``, ``<fim_suffix>``
    (the ``gpt2`` kind trained here has them)."""

    required_special_tokens = ("eos", *FIM_ROLES)

    def __init__(self, *args: Any, fim_rate: float = 0.5, spm_rate: float = 0.5, fim_split: FIMSplit = "character",
                 **kwargs: Any) -> None:
        """
        Args:
            fim_rate: Probability that a document is moved into FIM layout (the paper: 0.5; up to 0.9 without
                hurting left-to-right quality).
            spm_rate: Of those, the share in SPM layout, the rest PSM (the paper's joint training: 0.5).
            fim_split: Cut the document at the character level (the paper's default) or the token level.
        """
        super().__init__(*args, **kwargs)
        for name, value in (("fim_rate", fim_rate), ("spm_rate", spm_rate)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"data.{name}={value} must lie in [0, 1] (Bavarian et al. 2022: 0.5)")
        if fim_split not in ("character", "token"):
            raise ConfigError(f"data.fim_split={fim_split!r} is not one of character, token")
        self.fim_rate, self.spm_rate, self.fim_split = fim_rate, spm_rate, fim_split

    def collator(self) -> FIMCollator:
        return FIMCollator(self.tokenizer, self.fim_rate, self.spm_rate, self.fim_split, self.seed,
                           self.document_mask)

    def inspection_notes(self) -> list[InspectionNotes]:
        return [FIMNotes()]


class FIMNotes(InspectionNotes):
    """FIM in ``inspect``: the share of documents moved into PSM/SPM layout (Bavarian et al. 2022: ``fim_rate``)."""

    def __init__(self) -> None:
        self.moved = self.documents = 0

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        self.moved += int(batch["fim_documents"].sum())
        self.documents += int(batch["documents"].sum())

    def summary(self) -> dict[str, Any]:
        return {"fim_document_fraction": self.moved / self.documents} if self.documents else {}
