"""REALM's experiments beside its objective: the oracle retriever (the relevant block swapped in), the copy steps'
block choice and counterfactual copies, and the diagnostics that separate the reader from the retriever (the
reader's accuracy given a block stating the fact, the retriever's recall). The objective itself (Guu et al. 2020) is
``objectives.realm``; docs/realm-experiments.md reports what these measured."""

from __future__ import annotations

import torch
from torch import Tensor

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.errors import ConfigError


class RetrievalOracles:
    """Mixed into ``REALM``; reads its ``hparams`` (``copy_source``), ``corpus_rows`` and ``_read``."""

    def _copy_blocks(self, batch: dict[str, Tensor]) -> Tensor:
        """The block each query reads in the copy steps (``copy_source``): its own, or the one the collator drew
        among the other blocks that state its fact (its own where there is none)."""
        if self.hparams.copy_source == "own":
            return batch["block_ids"]
        if "fact_blocks" not in batch:
            raise ConfigError("model.copy_source=fact needs data that knows which blocks state each query's fact: "
                              "use data.source: world (the synthetic knowledge world)")
        return batch["fact_blocks"]

    @torch.no_grad()
    def _log_fact_block_accuracy(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> None:
        """The reader alone, given a block that states the query's fact (``fact_blocks``; queries whose fact no
        other block states are left out): its token accuracy on the masked span, ``fact_block_accuracy``. It
        separates the reader from the retriever: ``val/accuracy`` can only approach it when the retriever finds such
        a block and ``p(z|x)`` prefers it."""
        relevant = batch.get("relevant_blocks")
        has = (relevant >= 0).any(1) if relevant is not None else None
        if has is None or not has.any():
            return
        rows = {k: v[has] for k, v in batch.items() if torch.is_tensor(v) and len(v) == len(has)}
        docs, doc_mask = self.corpus_rows(rows["fact_blocks"][:, None].to(rows["input_ids"].device))
        read = self._read(rows, docs, doc_mask, docs.new_zeros(docs.shape[:2], dtype=torch.float), {}, False)
        out["fact_block_accuracy"] = (read["lm_predictions"] == read["lm_targets"]).float().mean()

    def _counterfactual_copy_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """``-log p(y' | x, z')`` averaged over the queries that have a counterfactual copy: the reader alone on the
        collator's ``copy_ids`` (a block stating the query's fact with ``t'`` for the answer) and ``copy_labels``."""
        if "copy_ids" not in batch:
            raise ConfigError("model.copy_source=counterfactual needs REALMDataModule's counterfactual copies "
                              "(copy_ids, copy_labels): use data.class_path: plm_lightning.data.REALMDataModule")
        has = (batch["copy_labels"] != IGNORE_INDEX).any(1)
        self._copy_pairs = (len(has), batch["copy_ids"].shape[1])
        if not has.any():
            return batch["copy_ids"].new_zeros((), dtype=torch.float)
        docs, doc_mask = batch["copy_ids"][:, None], batch["copy_mask"][:, None]
        read = self._read({**batch, "labels": batch["copy_labels"]}, docs, doc_mask,
                          docs.new_zeros(docs.shape[:2], dtype=torch.float), {}, False)
        return read["loss"] * len(has) / has.sum()  # rows without a copy add log 1 = 0 to the mean

    @staticmethod
    def _with_relevant_block(top: Tensor, relevant: Tensor | None) -> Tensor:
        """The oracle: each row's first relevant block replaces its last retrieved one unless one was retrieved."""
        if relevant is None:
            raise ConfigError("model.oracle_retrieval needs data that knows which blocks state each query's fact: "
                              "use data.source: world (the synthetic knowledge world)")
        gold = relevant[:, 0].to(top.device)
        missed = (gold >= 0) & ~(top[:, :, None] == relevant[:, None, :].to(top.device)).any(-1).any(-1)
        top = top.clone()
        top[missed, -1] = gold[missed]
        return top

    def _log_retrieval(self, out: dict[str, Tensor], top: Tensor, relevant: Tensor | None) -> None:
        """Recall of the top-k: the share of queries (that have any) with a relevant block retrieved."""
        if relevant is None:
            return
        has = (relevant >= 0).any(1)
        if has.any():
            hit = (top[:, :, None] == relevant[:, None, :]).any(-1).any(-1)
            out["retrieval_recall"] = hit[has].float().mean()
