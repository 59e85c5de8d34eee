"""REALM: Retrieval-Augmented Language Model pretraining (Guu et al. 2020).

corruption: one salient span masked per sentence (data.REALMDataModule) | attention: bidirectional over
``[CLS] x [SEP] z [SEP]`` | loss: the masked span, marginalised over retrieved documents.

* Knowledge retriever (sec. 3.2, eq. 1): ``p(z | x) = softmax_z f(x, z)`` with ``f(x, z) = Embed_input(x)^T
  Embed_doc(z)``, each embedding a projected ``[CLS]`` state of its own Transformer encoder.
* Knowledge-augmented encoder (sec. 3.2): ``p(y | z, x) = prod_j p(y_j | z, x)`` from an MLM reader over the joined
  ``[CLS] x [SEP] z_body [SEP]`` (document tokens have token type 1).
* Marginal likelihood (eq. 2): ``p(y | x) = sum_{z in top-k} p(z | x) p(y | z, x)``; the loss is ``-log p(y | x)``, so
  the retriever is trained through ``p(z | x)`` jointly with the reader (sec. 3.3: ``grad log p(y|x)`` rewards
  documents with ``p(y|z,x) > p(y|x)``).
* Search (sec. 3.3, "asynchronous MIPS refreshes"): every block's ``Embed_doc`` is precomputed into an index that is
  refreshed every ``refresh_every`` steps (REALM: about every 500, by a parallel job; here synchronously); the top-k
  are searched in the stale index, then re-embedded with the current weights so ``p(z|x)`` has gradients. Exact
  inner-product search by default, FAISS (``IndexFlatIP``) with ``search: faiss``.
* Null document (sec. 3.4): an empty block always joins the top-k, for spans that need no retrieval.
* No trivial retrieval (sec. 3.4): the block a query sentence came from is never retrieved.
* Retriever warm start (sec. 3.4): REALM pretrains the retriever with the Inverse Cloze Task (Lee et al. 2019) -
  a sentence must retrieve its own block with the sentence removed, among the other blocks of the batch. With
  ``ict_steps`` > 0, the first steps train the retriever on the ICT loss alone: REALM starts its reader from a
  pretrained BERT; ours starts from scratch, and a reader that cannot yet read documents would send the retriever
  only noise, which Adam turns into full-size steps that erase the warm start (measured: recall@8 0.41 -> 0.09 in 50
  steps). Meanwhile the reader pretrains as an MLM on the null document (``ict_reader: null``, REALM's BERT
  stage): sec. 3.4's cold-start problem is that a reader trained on unrelated retrievals "learns to ignore the
  retrieved documents", and one that read the warming retriever's top-k (``ict_reader: retrieved``, ``p(z|x)``
  detached) did exactly that on the synthetic world. The null warm start is 4x cheaper but does not cure it there
  either; ``oracle_retrieval`` shows the reader does learn to read when every top-k holds the answer (README).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.errors import ConfigError
from plm_lightning.nn import Encoder, LMHead
from plm_lightning.nn.flops import training_flops
from plm_lightning.nn.stack_inputs import text_inputs
from plm_lightning.objectives import scale
from plm_lightning.objectives.base import PretrainingModule
from plm_lightning.objectives.realm_index import RetrievalIndex
from plm_lightning.objectives.realm_oracles import RetrievalOracles

SEARCHES = ("exact", "faiss")


class REALM(RetrievalIndex, RetrievalOracles, PretrainingModule):
    """Reader (``backbone`` + MLM head) and retriever (query and document encoders with projections)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, top_k: int = 8, retriever_dim: int = 128, refresh_every: int = 100,  # noqa: ANN002
                 null_document: bool = True, ict_steps: int = 0, search: Literal["exact", "faiss"] = "exact",
                 retriever_learning_rate: float | None = None, retrieval: bool = True,
                 ict_reader: Literal["null", "retrieved"] = "null", ict_weight: float = 0.0, copy_steps: int = 0,
                 copy_weight: float = 0.0, copy_source: Literal["own", "fact", "counterfactual"] = "own",
                 oracle_retrieval: bool = False, **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            top_k: Documents retrieved per query (REALM pretraining: 8, plus the null document).
            retriever_dim: Size of the retrieval embeddings (REALM: 128).
            refresh_every: Steps between rebuilds of the document index (REALM: ~500, asynchronously).
            null_document: Add the empty document to every top-k.
            ict_steps: Inverse Cloze Task warm-start steps for the retriever (0: none).
            ict_reader: What the reader reads during the warm start: null (the null document alone: it pretrains as
                an MLM, as REALM's reader starts from BERT) or retrieved (the warming retriever's top-k, without
                gradients to the retriever; the reader may learn to ignore documents while they are unrelated).
            ict_weight: After the warm start, the Inverse Cloze Task stays on as an auxiliary loss with this weight
                (0: off, REALM). While the reader cannot yet read, the marginal likelihood's gradient to the retriever
                is noise and erodes what ICT taught it; the auxiliary loss holds the retriever where ICT put it
                until the reader's signal takes over (measured on the recipe with held-out facts: val recall@8 0.025
                without it, 0.38 with ict_weight 1; README).
            copy_steps: Steps after the warm start in which each query's own block (the trivial retrieval of sec.
                3.4) replaces the last of its top-k and ``p(z|x)`` carries no gradient: the reader learns to copy
                from a document that surely holds the answer, the retriever learns nothing from it (REALM forbids
                trivial retrieval because the *retriever* would learn string matching). 0: none, REALM.
            copy_weight: During the copy steps, the reader's own loss on the (query, copy block) pair alone,
                ``-log p(y | x, copy block)``, is added with this weight (0: off). Not REALM's: the marginal rewards
                copying only in proportion to ``p(copy block|x)``, and a reader that ignores documents keeps that
                share small (measured: 0.21), so this supervises copying directly.
            copy_source: The block the copy steps put in the last slot: own (the query's own block, which states
                its sentence verbatim) or fact (another block stating the query's fact, drawn at random among them,
                so that copying means reading a paraphrase, not matching a string). fact is supervised by the data's
                fact labels (the synthetic world's), so it is not REALM's unsupervised setting; a query whose fact no
                other block states gets its own block. On training queries a memorised fact meets the copy loss as
                well as reading does (measured: with oracle blocks, such a reader scores 0.086 on held-out facts;
                README). counterfactual: the fact's block with the answer swapped for another entity of its class
                and length, in the block and in the labels (``REALMCollator``), read in a pass of its own beside the
                marginal, which keeps the retrieved top-k (still without a gradient to the retriever: once the
                reader reads, a wrong retrieval costs more than the null document, and the marginal then handed the
                null document all of ``p(z|x)``, measured: 0.999, recall@2 0.0); a memorised fact now predicts the
                wrong answer, so only reading meets ``copy_weight``'s loss (needs ``copy_weight`` > 0). This is the
                setting in which retrieval pays on held-out facts (measured: ``val/accuracy`` 0.23-0.32 against
                chance 0.044, ``val/fact_block_accuracy`` 1.0; README).
            oracle_retrieval: A diagnostic upper bound on data that knows its facts (the synthetic world): a block
                stating the query's fact replaces the last of the top-k when the search missed every one, so the
                reader always has the answer to read (``retrieval_recall`` is then 1).
            search: exact (inner products with every block) or faiss (IndexFlatIP; pip install faiss-cpu).
            retriever_learning_rate: Peak learning rate of the query and document encoders (null: learning_rate).
                Adam moves every weight by about the learning rate whatever the gradient's size, and while the reader
                cannot yet read documents the retriever's gradient is noise: a rate that suits a reader trained from
                scratch erases the retriever's warm start (REALM trains everything at 3e-5 from BERT and ICT).
            retrieval: false: nothing is retrieved and the reader reads the null document only, the no-retrieval
                baseline (the same reader, masking and loss without the knowledge corpus; train it, or set it on a
                trained REALM's ``hparams``, to measure what retrieval adds).
        """
        if top_k < 1 or retriever_dim < 1 or refresh_every < 1 or ict_steps < 0 or copy_steps < 0:
            raise ConfigError(f"model: top_k={top_k}, retriever_dim={retriever_dim} and refresh_every={refresh_every} "
                              f"must be >= 1, ict_steps={ict_steps} and copy_steps={copy_steps} >= 0")
        if ict_weight < 0 or copy_weight < 0:
            raise ConfigError(f"model: ict_weight={ict_weight} and copy_weight={copy_weight} must be >= 0")
        if copy_weight > 0 and copy_steps == 0:
            raise ConfigError("model.copy_weight acts during the copy steps: set model.copy_steps > 0 as well")
        if copy_source not in ("own", "fact", "counterfactual"):
            raise ConfigError(f"model.copy_source={copy_source!r} is not one of own, fact, counterfactual")
        if copy_source == "counterfactual" and copy_weight == 0:
            raise ConfigError("model.copy_source=counterfactual trains the reader through its copy loss alone: set "
                              "model.copy_weight > 0")
        if ict_reader not in ("null", "retrieved"):
            raise ConfigError(f"model.ict_reader={ict_reader!r} is not one of null, retrieved")
        if search not in SEARCHES:
            raise ConfigError(f"model.search={search!r} is not one of {', '.join(SEARCHES)}")
        if search == "faiss":
            try:
                import faiss  # noqa: F401
            except ImportError as err:
                raise ConfigError("model.search=faiss needs the faiss package: pip install faiss-cpu (or use "
                                  "search: exact)") from err
        if ict_steps and not null_document:
            raise ConfigError("model.ict_steps needs model.null_document=true: during the warm start the reader reads "
                              "the null document only")
        super().__init__(*args, **kwargs)
        self.index: Tensor | None = None
        self.index_step = -1
        self._faiss = None
        self._refresh_due = False
        self.corpus_ids: Tensor | None = None
        self.corpus_mask: Tensor | None = None

    def build(self) -> None:
        h, d = self.config.hidden_size, self.hparams.retriever_dim
        self.backbone = Encoder(self.config)
        self.lm_head = LMHead(self.config, transform=True, bias=True)
        self.query_encoder = Encoder(self.config)
        self.document_encoder = Encoder(self.config)
        self.query_projection = nn.Linear(h, d)
        self.document_projection = nn.Linear(h, d)

    def stacks(self) -> list[nn.Module]:
        return [self.backbone, self.query_encoder, self.document_encoder]

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        retriever = [self.query_encoder, self.document_encoder, self.query_projection, self.document_projection]
        ids = {id(p) for m in retriever for p in m.parameters()}
        rate = self.hparams.retriever_learning_rate or self.hparams.learning_rate
        return [([p for p in self.parameters() if id(p) not in ids], self.hparams.learning_rate),
                ([p for p in self.parameters() if id(p) in ids], rate)]

    # -- the knowledge corpus and its index ---------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        super().setup(stage)
        blocks = self.data.knowledge_blocks
        if blocks is None:
            raise ConfigError("REALM needs a knowledge corpus to retrieve from: use data.class_path: "
                              "plm_lightning.data.REALMDataModule")
        self.set_corpus(blocks)

    # -- the loss -----------------------------------------------------------------------------------------------
    def _join(self, ids: Tensor, mask: Tensor, docs: Tensor, doc_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``[CLS] x [SEP] z_body [SEP]`` for every (query, document) pair ``[B, Z, L]``, without padding between the
        parts: ids, attention mask, token types (1 on the document)."""
        b, z = docs.shape[:2]
        lq, body = mask.sum(1), docs[..., 1:]
        ld = (doc_mask.sum(-1) - 1).clamp_min(0)
        width = ids.shape[1] + body.shape[-1]
        source = torch.cat([ids[:, None].expand(b, z, -1), body], -1)
        pos = torch.arange(width, device=ids.device)[None, None]
        in_query = pos < lq[:, None, None]
        index = torch.where(in_query, pos, (pos - lq[:, None, None] + ids.shape[1]).clamp(max=width - 1))
        valid = pos < (lq[:, None] + ld)[..., None]
        joined = torch.where(valid, source.gather(2, index.expand(b, z, -1)), self.tokenizer.ids["pad"])
        return joined, valid.long(), (valid & ~in_query).long()

    def ict_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Inverse Cloze Task (Lee et al. 2019, eq. 2): each sentence against every context of the (global) batch:
        under data parallelism the contexts of every rank are gathered, so the negatives do not shrink with the
        per-rank batch."""
        q = self.embed_queries(batch["ict_query_ids"], batch["ict_query_mask"])
        c = self.embed_documents(batch["ict_context_ids"], batch["ict_context_mask"])
        contexts, offset = scale.gather_data_parallel(c, self._trainer)
        return F.cross_entropy((q @ contexts.T).float(), torch.arange(len(q), device=q.device) + offset)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        self._refresh_if_due()
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b = ids.shape[0]
        out: dict[str, Tensor] = {}
        self._copy_pairs = None
        if not self.training and self.hparams.retrieval and "fact_blocks" in batch:
            self._log_fact_block_accuracy(out, batch)
        warm = self.training and self.global_step < self.hparams.ict_steps
        pad = self.tokenizer.ids["pad"]
        if warm or (self.training and self.hparams.ict_weight > 0):
            out["ict_loss"] = self.ict_loss(batch)
        null_only = not self.hparams.retrieval or (warm and self.hparams.ict_reader == "null")
        if self.hparams.retrieval and null_only:  # the warm start: the warming retriever's recall is still logged
            with torch.no_grad():
                top = self.retrieve(self.embed_queries(ids, mask), self.hparams.top_k, batch.get("block_ids"))
            self._log_retrieval(out, top, batch.get("relevant_blocks"))
        if null_only:  # the baseline and the reader's warm start: the null document alone, p(z = null | x) = 1
            docs = torch.full((b, 1, 2), pad, dtype=torch.long, device=ids.device)
            docs[:, 0] = torch.tensor([self.tokenizer.ids["cls"], self.tokenizer.ids["sep"]], device=ids.device)
            return self._read(batch, docs, torch.ones_like(docs), ids.new_zeros(b, 1, dtype=torch.float), out, warm)
        # during the warm start the retriever learns from ICT alone: p(z|x) is computed without a graph
        copying = self.training and not warm and self.global_step < self.hparams.ict_steps + self.hparams.copy_steps
        in_slot = copying and self.hparams.copy_source != "counterfactual"  # the copy block joins the top-k
        copy_loss = self._counterfactual_copy_loss(batch) if copying and not in_slot else None
        with torch.set_grad_enabled(torch.is_grad_enabled() and not warm and not copying):
            q = self.embed_queries(ids, mask)
            top = self.retrieve(q, self.hparams.top_k, batch.get("block_ids"))
            if self.hparams.oracle_retrieval:
                top = self._with_relevant_block(top, batch.get("relevant_blocks"))
            searched = top  # the copy phase logs the search's recall; the reader reads the copy block in the last slot
            if in_slot:
                top = torch.cat([top[:, :-1], self._copy_blocks(batch).to(top.device)[:, None]], 1)
            docs, doc_mask = self.corpus_rows(top.to(ids.device))
            embedded = self.embed_documents(docs.flatten(0, 1), doc_mask.flatten(0, 1)).view(b, top.shape[1], -1)
            scores = torch.einsum("bd,bkd->bk", q, embedded)
            if self.hparams.null_document:
                empty = torch.tensor([[self.tokenizer.ids["cls"], self.tokenizer.ids["sep"]]], device=ids.device)
                scores = torch.cat([scores, q @ self.embed_documents(empty, torch.ones_like(empty)).T], 1)
        self._log_retrieval(out, searched, batch.get("relevant_blocks"))
        if self.hparams.null_document:
            null_doc = torch.full((b, 1, docs.shape[-1]), pad, dtype=torch.long, device=ids.device)
            null_doc[:, 0, :2] = empty
            null_mask = torch.zeros_like(null_doc)
            null_mask[:, 0, :2] = 1
            docs, doc_mask = torch.cat([docs, null_doc], 1), torch.cat([doc_mask, null_mask], 1)
        log_pz = scores.float().log_softmax(-1)  # [B, Z]
        out = self._read(batch, docs, doc_mask, log_pz, out, warm, top.shape[1] - 1 if in_slot else None)
        if copy_loss is not None:
            out["copy_loss"] = copy_loss
            out["loss"] = out["loss"] + self.hparams.copy_weight * copy_loss
        if self.hparams.null_document:
            out["retrieval_null_probability"] = log_pz[:, -1].exp().mean().detach()
        return out

    def _read(self, batch: dict[str, Tensor], docs: Tensor, doc_mask: Tensor, log_pz: Tensor,
              out: dict[str, Tensor], warm: bool, copy_slot: int | None = None) -> dict[str, Tensor]:
        """The reader over every (query, document) pair and the marginal ``-log sum_z p(z|x) p(y|x, z)``; in the
        copy steps ``copy_slot`` is where each query's copy block sits (for ``copy_weight``)."""
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        b, z = ids.shape[0], log_pz.shape[1]
        joined, joined_mask, types = self._join(ids, mask, docs, doc_mask)
        width = joined.shape[-1]
        inputs = text_inputs(self.backbone, joined_mask.flatten(0, 1), types.flatten(0, 1))
        hidden = self.backbone(joined.flatten(0, 1), inputs).last_hidden_state
        chosen = labels != IGNORE_INDEX  # [B, Lq]; the span sits inside x, at the same positions in every pair
        positions = F.pad(chosen, (0, width - chosen.shape[1]))[:, None].expand(b, z, width)
        logits = self.lm_head(hidden, positions.flatten(0, 1)).float()  # [(b, z, j) entries, V]
        rank = (chosen.cumsum(1) - 1)[:, None].expand(b, z, -1)
        rank = F.pad(rank, (0, width - rank.shape[-1]))
        bi, zi, ji = positions.nonzero(as_tuple=True)
        ri = rank[bi, zi, ji]
        m = max(1, int(chosen.sum(1).max()))
        targets = labels[bi, ji]
        token_logp = logits.log_softmax(-1).gather(1, targets[:, None])[:, 0]
        per_token = log_pz.new_zeros(b, z, m).index_put((bi, zi, ri), token_logp)  # log p(y_j | z, x)
        marginal = torch.logsumexp(log_pz + per_token.sum(-1), -1)  # log p(y | x), eq. 2
        out["loss"] = -marginal.mean()
        if copy_slot is not None and self.hparams.copy_weight > 0:
            out["copy_loss"] = -per_token[:, copy_slot].sum(-1).mean()  # -log p(y | x, copy block): the reader alone
            out["loss"] = out["loss"] + self.hparams.copy_weight * out["copy_loss"]
        # per token: log sum_z p(z|x) p(y_j|z,x), and the argmax of the mixture (the reported LM loss and accuracy)
        valid = torch.arange(m, device=ids.device)[None] < chosen.sum(1)[:, None]
        token_marginal = torch.logsumexp(log_pz[..., None] + per_token, 1)[valid]
        with torch.no_grad():
            mixture = log_pz.new_zeros(b, m, logits.shape[-1]).index_put(
                (bi, ri), log_pz[bi, zi, None].exp() * logits.softmax(-1), accumulate=True)
        out.update({"lm_loss": -token_marginal.mean(), "lm_targets": labels[chosen],
                    "lm_predictions": mixture[valid].argmax(-1), "lm_token_losses": -token_marginal.detach()})
        if "ict_loss" in out:
            out["loss"] = out["loss"] + (1.0 if warm else self.hparams.ict_weight) * out["ict_loss"]
        self._shapes = (b, z, width, ids.shape[1], docs.shape[-1])
        return out

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        """Reader over B x Z joined pairs (and the counterfactual copy's B pairs), query encoder over B queries,
        document encoder over B x k blocks (the index refresh every ``refresh_every`` steps is not counted)."""
        b, z, width, lq, ld = getattr(self, "_shapes", (1, 1, 1, 1, 1))
        cfg = self.config
        self.flops_per_batch = (training_flops(cfg, b * z, width, loss_tokens * z, backward=backward)
                                + training_flops(cfg, b, lq, 0, head_transform=False, backward=backward)
                                + training_flops(cfg, b * z, ld, 0, head_transform=False, backward=backward))
        if getattr(self, "_copy_pairs", None) is not None:
            copies, copy_width = self._copy_pairs
            self.flops_per_batch += training_flops(cfg, copies, lq + copy_width, loss_tokens, backward=backward)
