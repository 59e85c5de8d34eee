"""One view of any trained causal or masked LM for the knowledge tools: queries with the answer slot, hidden states of
every layer, vocabulary logits read from any layer, and the feed-forward modules to hook or edit.

A query is a cloze: text before the answer and (masked LMs) after it. A causal LM reads ``<eos> prefix`` (a document
start, as its training data has them) and predicts the answer's first token at the last position; a masked LM reads
``[CLS] prefix [MASK] suffix [SEP]`` and predicts it at the mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.nn.stack_inputs import StackInputs

LM_OBJECTIVES = ("CausalLM", "MaskedLM", "DistilBERT", "ELECTRA")
"""Objectives with a vocabulary head on one stack at the answer slot (ELECTRA: its generator, an MLM; the
discriminator has no vocabulary head)."""


@dataclass(frozen=True)
class Query:
    """Token ids of one cloze, the position that predicts the answer and the answer's token ids."""

    ids: tuple[int, ...]
    position: int
    answer: tuple[int, ...]
    subject_span: tuple[int, int] | None = None
    """Token range [start, end) of the subject inside ``ids`` when the query named one."""
    decoder_ids: tuple[int, ...] = ()
    """Encoder-decoders: the decoder's teacher-forced input; ``position`` is then a decoder position."""


class ModelView:
    """A trained model of ours (or imported from transformers) with its tokenizer, in eval mode: what
    :class:`LanguageModel` and :class:`~plm_lightning.knowledge.cloze.ClozeReader` share."""

    objectives: tuple[str, ...] = ()
    """The objectives :meth:`load` accepts."""
    purpose = "this tool"
    module: nn.Module
    tokenizer: Any

    @classmethod
    def load(cls, path: str | Path) -> Self:
        from plm_lightning.objectives.loading import load_pretrained

        if not Path(path).exists():
            raise ConfigError(f"no such checkpoint or transformers directory: '{path}'")
        module, tokenizer = load_pretrained(path, cls.objectives, cls.purpose)
        return cls(module, tokenizer, str(path))

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode_batch([text])[0] if text else []


class LanguageModel(ModelView):
    """A causal or masked LM of ours (or imported from transformers) with its tokenizer, in eval mode."""

    objectives = LM_OBJECTIVES
    purpose = "the knowledge tools"

    def __init__(self, module: nn.Module, tokenizer, name: str = "model") -> None:  # noqa: ANN001
        kind = type(module).__name__
        if kind not in LM_OBJECTIVES:
            raise ConfigError(f"'{name}' holds a {kind} model; the knowledge tools need one of {', '.join(LM_OBJECTIVES)}")
        self.module, self.tokenizer, self.name = module.eval(), tokenizer, name
        self.causal = kind == "CausalLM"
        self.stack: nn.Module = module.generator if kind == "ELECTRA" else module.backbone
        if type(module.backbone).__name__ == "XLStack":
            raise ConfigError(f"'{name}' is a Transformer-XL model; the knowledge tools read Decoder/Encoder stacks")
        needed = ("eos",) if self.causal else ("cls", "sep", "mask")
        tokenizer.require(needed, "the knowledge tools")

    # -- structure ------------------------------------------------------------------------------------------------
    @property
    def backbone(self) -> nn.Module:
        """The stack the vocabulary head reads (ELECTRA: the generator)."""
        return self.stack

    @property
    def layerwise(self) -> bool:
        """Every layer can be read (logit lens, per-layer heads), not only the answer logits."""
        return True

    @property
    def num_layers(self) -> int:
        return self.backbone.cfg.num_layers

    def block(self, layer: int) -> nn.Module:
        """Block ``layer`` (0-based); a one-line error naming the valid range otherwise."""
        if not 0 <= layer < self.num_layers:
            raise ConfigError(f"layer {layer} is out of range: this model has layers 0..{self.num_layers - 1}")
        return self.backbone.blocks()[layer]

    def ffn(self, layer: int) -> nn.Module:
        return self.block(layer).ffn

    # -- queries --------------------------------------------------------------------------------------------------
    def query(self, prefix: str, answer: str = "", suffix: str = "", subject: str | None = None) -> Query:
        """The cloze ``prefix [answer] suffix``; ``subject`` (a substring of ``prefix``) has its token span recorded."""
        prefix = prefix.rstrip()
        before = self.encode(prefix)
        answer_ids = tuple(self.encode(f"{prefix} {answer}")[len(before):]) if answer else ()
        span = None
        if subject is not None:
            at = prefix.find(subject)
            if at < 0:
                raise ConfigError(f"subject {subject!r} does not occur in the prompt {prefix!r}")
            start = len(self.encode(prefix[:at].rstrip()))
            span = (start, len(self.encode(prefix[: at + len(subject)])))
        if self.causal:
            ids = [self.tokenizer.ids["eos"], *before]
            offset, position = 1, len(ids) - 1
        else:
            ids = [self.tokenizer.ids["cls"], *before, self.tokenizer.ids["mask"], *self.encode(suffix.strip()),
                   self.tokenizer.ids["sep"]]
            offset, position = 1, len(before) + 1
        if span is not None:
            span = (span[0] + offset, span[1] + offset)
        return Query(tuple(ids), position, answer_ids, span)

    def batch(self, queries: list[Query]) -> tuple[Tensor, Tensor, Tensor]:
        """(input ids ``[B, L]`` right-padded, attention mask, answer positions ``[B]``)."""
        length = max(len(q.ids) for q in queries)
        pad = self.tokenizer.ids.get("pad", 0)
        ids = torch.full((len(queries), length), pad, dtype=torch.long)
        mask = torch.zeros((len(queries), length), dtype=torch.long)
        for i, q in enumerate(queries):
            ids[i, : len(q.ids)] = torch.tensor(q.ids)
            mask[i, : len(q.ids)] = 1
        positions = torch.tensor([q.position for q in queries])
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    # -- forward --------------------------------------------------------------------------------------------------
    def hidden_states(self, ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, ...]:
        """Embedding output and every layer's output, ``[B, L, H]`` each (the last after the final norm)."""
        return self.backbone(ids, StackInputs(attention_mask=attention_mask)).hidden_states

    def logits(self, hidden: Tensor, layer: int | None = None) -> Tensor:
        """Vocabulary logits of ``hidden``; from an intermediate ``layer`` of a pre-norm stack the final norm is applied
        first (the logit lens, nostalgebraist 2020)."""
        norm = self.backbone.final_norm
        if norm is not None and layer is not None and layer < self.num_layers:
            hidden = norm(hidden)
        return self.module.lm_head(hidden)

    def answer_logits(self, ids: Tensor, attention_mask: Tensor, positions: Tensor) -> Tensor:
        """Logits ``[B, V]`` at the answer positions from the last layer."""
        hidden = self.backbone(ids, StackInputs(attention_mask=attention_mask)).last_hidden_state
        return self.logits(hidden[torch.arange(len(positions), device=ids.device), positions])

    def answer_probabilities(self, queries: list[Query], batch_size: int = 64) -> Tensor:
        """P(first answer token) for each query ``[N]``."""
        out = []
        with torch.no_grad():
            for start in range(0, len(queries), batch_size):
                chunk = queries[start: start + batch_size]
                logits = self.answer_logits(*self.batch(chunk))
                answers = torch.tensor([q.answer[0] for q in chunk], device=logits.device)
                out.append(logits.float().softmax(-1).gather(1, answers[:, None])[:, 0])
        return torch.cat(out) if out else torch.zeros(0)
