"""ERNIE (Tsinghua; Zhang et al. 2019, "ERNIE: Enhanced Language Representation with Informative Entities"): a BERT
whose upper layers fuse each token with the knowledge-graph entity aligned to it.

corruption: BERT's token masking + the dEA's alignment noise (:class:`~plm_lightning.data.ERNIETHUDataModule`) |
attention: bidirectional over tokens, and over the aligned entities | loss: masked tokens (MLM) + every aligned
token's entity (dEA).

* T-Encoder: the backbone's ``num_layers`` text layers; K-Encoder: ``fusion_layers`` aggregators
  (:class:`~plm_lightning.nn.fusion.KnowledgeableEncoder`, sec. 3.3) over the tokens and the fixed TransE entity
  embeddings (sec. 4.1). Paper size: N = 6 text layers, M = 6 aggregators, H = 768, entity size 100, 12 and 4 heads.
* dEA (sec. 3.4, eq. 7): ``p(e_j | w_i) = softmax_j(linear(w_i^o) . e_j)`` over the entities aligned in the
  sequence, for every aligned token (whether its alignment was kept, replaced or masked in the input).
  L = L_MLM + ``entity_loss_weight`` L_dEA (the paper adds NSP too; RoBERTa showed it can go).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn.feedforward import ACTIVATIONS
from plm_lightning.nn.flops import fusion_flops
from plm_lightning.nn.fusion import KnowledgeableEncoder, entity_inputs
from plm_lightning.objectives.masked_lm import MaskedLM


class EntityPredictionHead(nn.Module):
    """``linear(w^o)`` of eq. 7 as ERNIE's code has it: dense to the entity size, GELU, LayerNorm."""

    def __init__(self, hidden_size: int, entity_size: int, norm_eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, entity_size)
        self.norm = nn.LayerNorm(entity_size, eps=norm_eps)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.norm(ACTIVATIONS["gelu"](self.dense(hidden)))


class ERNIETHU(MaskedLM):
    """MLM + the denoising entity auto-encoder over a text encoder and knowledge-fusion layers."""

    def __init__(self, *args, fusion_layers: int = 6, entity_heads: int = 4,  # noqa: ANN002
                 num_entities: int | None = None, entity_dim: int | None = None, entity_loss_weight: float = 1.0,
                 **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            fusion_layers: Aggregator layers after the backbone's text layers (ERNIE: 6 after 6).
            entity_heads: Attention heads over the entity states (ERNIE: 4); must divide the entity size.
            num_entities: Rows of the entity table; null takes them from the data's knowledge graph.
            entity_dim: The entity embedding size; null takes the data's TransE size.
            entity_loss_weight: Weight of the dEA loss next to the MLM loss.
        """
        if fusion_layers < 1 or entity_heads < 1:
            raise ConfigError(f"model.fusion_layers={fusion_layers} and model.entity_heads={entity_heads} must be "
                              ">= 1")
        if entity_loss_weight < 0:
            raise ConfigError(f"model.entity_loss_weight={entity_loss_weight} must be >= 0")
        key = next((k for k in ("sentence_prediction", "span_boundary_objective", "enhanced_mask_decoder")
                    if kwargs.get(k) not in (None, False, "none")), None)
        if key is not None:  # MaskedLM's heads read the backbone's output; ERNIE's loss reads the aggregators' instead
            raise ConfigError(f"model.{key}={kwargs[key]!r} is not supported by ERNIETHU (its losses are MLM + dEA "
                              "over the knowledge-fusion layers); remove it")
        self.fusion_layers, self.entity_heads, self.entity_loss_weight = fusion_layers, entity_heads, entity_loss_weight
        super().__init__(*args, **kwargs)

    def check_data(self, data: DataContract) -> None:
        """Size the entity table from the data's graph (before the model is built)."""
        super().check_data(data)
        table = data.entity_embeddings
        if table is None and not self.built:
            raise ConfigError("model ERNIETHU needs entity-linked data: use data.class_path "
                              "plm_lightning.data.ERNIETHUDataModule")
        if table is not None:
            rows, dim = table.shape
            if self.built and (rows, dim) != tuple(self.entity_table.weight.shape):
                raise ConfigError(f"the data's knowledge graph has {rows} entities of size {dim}, the model's entity "
                                  f"table {tuple(self.entity_table.weight.shape)}; use the graph it was trained with")
            self.hparams.num_entities, self.hparams.entity_dim = rows, dim  # saved: a loaded model rebuilds its table

    def setup(self, stage: str) -> None:
        """On a new model, fill the entity table with the data's TransE embeddings."""
        fresh = not self.built
        super().setup(stage)
        table = self.data.entity_embeddings
        if fresh and table is not None:
            with torch.no_grad():
                self.entity_table.weight.copy_(table)

    def build(self) -> None:
        rows, dim = self.hparams.get("num_entities"), self.hparams.get("entity_dim")
        if rows is None or dim is None:
            raise ConfigError("model.num_entities / model.entity_dim are unknown; ERNIETHU takes them from "
                              "plm_lightning.data.ERNIETHUDataModule's knowledge graph")
        if dim % self.entity_heads:
            raise ConfigError(f"model.entity_heads={self.entity_heads} does not divide the entity size {dim}")
        super().build()
        cfg = self.config
        self.entity_table = nn.Embedding(rows, dim)
        self.entity_table.weight.requires_grad_(False)  # TransE's embeddings stay fixed (sec. 4.1)
        self.knowledge_encoder = KnowledgeableEncoder(self.fusion_layers, cfg.hidden_size, dim, cfg.num_heads,
                                                      self.entity_heads, cfg.intermediate_size, cfg.dropout,
                                                      cfg.attention_dropout, cfg.norm_eps, cfg.attention_backend)
        self.entity_head = EntityPredictionHead(cfg.hidden_size, dim, cfg.norm_eps)

    def stacks(self) -> list[nn.Module]:
        return [self.backbone, self.knowledge_encoder]

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        """Token states after the T-Encoder and the K-Encoder."""
        text = self.run_stack(self.backbone, batch)
        entities, aligned = entity_inputs(self.entity_table, batch["entity_ids"])
        tokens, _ = self.knowledge_encoder(text, entities, batch.get("attention_mask"), aligned)
        return tokens

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.encode(batch)
        mlm_loss, lm = self.lm_loss(hidden, batch["labels"])
        out = {"mlm_loss": mlm_loss, "lm_loss": mlm_loss, **lm}
        labels = batch["entity_labels"]
        asked = labels != IGNORE_INDEX
        candidates = batch["entity_candidates"]
        queries = self.entity_head(hidden[asked])  # [K, d]
        rows = asked.nonzero()[:, 0]
        keys = self.entity_table(candidates.clamp_min(0))[rows]  # [K, C, d]: the candidates of each query's row
        scores = torch.einsum("kd,kcd->kc", queries.float(), keys.float())
        scores = scores.masked_fill(candidates[rows] < 0, float("-inf"))
        if bool(asked.any()):
            out["entity_loss"] = F.cross_entropy(scores, labels[asked])
            out["entity_accuracy"] = (scores.argmax(-1) == labels[asked]).float().mean()
            out["loss"] = mlm_loss + self.entity_loss_weight * out["entity_loss"]
        else:  # no entity in the batch: the head still takes part (DDP, FSDP)
            out["loss"] = mlm_loss + 0.0 * queries.sum()
        return out

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Masked tokens and every aligned token (the dEA's predictions)."""
        return (batch["labels"] != IGNORE_INDEX) | (batch["entity_labels"] != IGNORE_INDEX)

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        super()._set_flops(batch, loss_tokens, backward)
        b, n = batch["input_ids"].shape
        cfg = self.config
        self.flops_per_batch += fusion_flops(self.fusion_layers, cfg.hidden_size, self.entity_table.embedding_dim,
                                             cfg.intermediate_size, b, n, backward)
