"""REALM's retrieval index (Guu et al. 2020, sec. 3.3): the retrievable blocks, their embeddings precomputed by the
document encoder and refreshed every ``refresh_every`` steps ("asynchronous MIPS refreshes", here synchronous), and
the top-k search in that stale index (exact inner products, or FAISS ``IndexFlatIP``), never a query's own block."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.nn.stack_inputs import StackInputs


class RetrievalIndex:
    """The index and search of ``REALM``, mixed into it; reads its ``query_encoder``, ``document_encoder``, their
    projections, ``tokenizer`` and ``hparams`` (``search``, ``refresh_every``, ``retrieval``)."""

    def set_corpus(self, blocks: list[np.ndarray]) -> None:
        """The retrievable blocks (token ids without special tokens); the index is rebuilt before the next search."""
        cls, sep, pad = (self.tokenizer.ids[k] for k in ("cls", "sep", "pad"))
        width = max(len(b) for b in blocks) + 2
        ids = torch.full((len(blocks), width), pad, dtype=torch.long)
        for i, b in enumerate(blocks):
            ids[i, : len(b) + 2] = torch.as_tensor(np.concatenate([[cls], b, [sep]]))
        lengths = torch.tensor([len(b) + 2 for b in blocks])
        self.corpus_ids, self.corpus_mask = ids, (torch.arange(width)[None] < lengths[:, None]).long()
        self.index, self.index_step, self._faiss = None, -1, None

    def corpus_rows(self, blocks: Tensor) -> tuple[Tensor, Tensor]:
        """``[CLS] block [SEP]`` ids and mask of the blocks ``blocks`` (any shape) on its device, cut to the longest
        of them."""
        ids, mask = self.corpus_ids.to(blocks.device)[blocks], self.corpus_mask.to(blocks.device)[blocks]
        width = int(mask.sum(-1).max())
        return ids[..., :width], mask[..., :width]

    def embed_queries(self, ids: Tensor, mask: Tensor) -> Tensor:
        return self.query_projection(self.query_encoder(ids, StackInputs(attention_mask=mask)).last_hidden_state[:, 0])

    def embed_documents(self, ids: Tensor, mask: Tensor) -> Tensor:
        return self.document_projection(self.document_encoder(ids, StackInputs(attention_mask=mask)).last_hidden_state[:, 0])

    @torch.no_grad()
    def refresh_index(self, batch_size: int = 256) -> None:
        """Embed every block with the current document encoder (in eval mode)."""
        if self.corpus_ids is None:
            raise ConfigError("REALM: no knowledge corpus; call set_corpus(blocks) or train with REALMDataModule")
        was_training = self.document_encoder.training
        self.document_encoder.eval()
        try:
            parts = [self.embed_documents(self.corpus_ids[i: i + batch_size].to(self.device),
                                          self.corpus_mask[i: i + batch_size].to(self.device)).float()
                     for i in range(0, len(self.corpus_ids), batch_size)]
        finally:
            self.document_encoder.train(was_training)
        self.index = torch.cat(parts)
        self.index_step = int(self.global_step) if self._trainer is not None else 0
        self._faiss = None
        if self.hparams.search == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatIP(self.index.shape[1])
            self._faiss.add(self.index.cpu().numpy())

    def retrieve(self, queries: Tensor, k: int, exclude: Tensor | None = None) -> Tensor:
        """Ids ``[B, k]`` of the k blocks with the largest inner product with each query embedding (the stale
        index), never a row's ``exclude`` block."""
        if self.index is None:
            self.refresh_index()
        k = min(k, len(self.index) - (exclude is not None))
        if self._faiss is not None:
            found = torch.from_numpy(self._faiss.search(queries.detach().float().cpu().numpy(), k + 1)[1])
            if exclude is not None:  # drop the excluded block, keep the order of the rest
                keep = found != exclude.cpu()[:, None]
                found = found.gather(1, torch.argsort((~keep).to(torch.int8), dim=1, stable=True))
            return found[:, :k].to(queries.device)
        scores = queries.detach().float() @ self.index.T
        if exclude is not None:
            scores.scatter_(1, exclude[:, None].to(scores.device), float("-inf"))
        return scores.topk(k, dim=1).indices

    def on_train_batch_start(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        stale = self.index is None or self.global_step - self.index_step >= self.hparams.refresh_every
        self._refresh_due = self._refresh_due or stale

    def on_validation_start(self) -> None:
        self._refresh_due = True

    def _refresh_if_due(self) -> None:
        """Refresh the index inside the step, not in the hooks that find it stale: under FSDP2 the root unit's
        parameters (embeddings, projections) are gathered only inside the module's forward, which the steps run in."""
        if self.hparams.retrieval and self._refresh_due:
            self.refresh_index()
        self._refresh_due = False
