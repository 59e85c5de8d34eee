"""Cloze answers from the objectives whose vocabulary head is not read at the answer slot of one stack, so that the
LAMA probe (Petroni et al. 2019, "Language Models as Knowledge Bases?") asks every objective through its own
pretraining head, as LAMA asked BERT, ELMo, GPT and Transformer-XL through theirs:

- T5 (span corruption): the encoder reads ``prefix <extra_id_0> suffix </s>``, the decoder ``<pad> <extra_id_0>``,
  and the answer is the decoder's next token: the first token of the span that sentinel stands for.
- BART (text infilling): the encoder reads ``<s> prefix <mask> suffix </s>``, the decoder reconstructs the
  original from ``</s> <s> prefix``, and the answer is the token it writes where the mask stood.
- XLNet (permutation LM): the row ``prefix [slot] suffix <sep> <cls>`` with the slot hidden from every content
  stream (``perm_mask``) and the query stream run at the slot: the last step of a factorization order, which sees
  every other token (eq. 4's ``g_theta(x_{z<t}, z_t)``).

Only the answer logits of the last layer are defined here (no logit lens through a decoder's or query stream's
layers); :func:`plm_lightning.knowledge.probing.probe` reports them as the final layer.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.lm import ModelView, Query
from plm_lightning.nn.stack_inputs import StackInputs

CLOZE_OBJECTIVES = ("Seq2SeqLM", "PermutationLM")


class ClozeReader(ModelView):
    """An encoder-decoder (T5 sentinel or BART mask form) or XLNet model asked cloze queries, in eval mode."""

    objectives = CLOZE_OBJECTIVES
    purpose = "the cloze reader"
    causal = False
    layerwise = False

    def __init__(self, module: nn.Module, tokenizer, name: str = "model") -> None:  # noqa: ANN001
        kind = type(module).__name__
        if kind not in CLOZE_OBJECTIVES:
            raise ConfigError(f"'{name}' holds a {kind} model; the cloze reader reads {', '.join(CLOZE_OBJECTIVES)}")
        self.module, self.tokenizer, self.name = module.eval(), tokenizer, name
        self.permutation = kind == "PermutationLM"
        ids = tokenizer.ids
        if self.permutation:
            tokenizer.require(("pad", "sep", "cls"), "the XLNet cloze reader")
            self.form = "xlnet"
        elif getattr(module, "decoder_start_token", "pad") == "eos" and "bos" in ids and "mask" in ids:
            self.form = "bart"
        elif len(tokenizer.sentinel_ids()):
            self.form = "t5"
        else:
            raise ConfigError(f"'{name}': an encoder-decoder whose tokenizer has neither sentinels (<extra_id_0>, T5) "
                              "nor <s>/<mask> with an </s> decoder start (BART); the cloze reader cannot ask it")
        tokenizer.require(("pad", "eos") if not self.permutation else (), "the cloze reader")

    def query(self, prefix: str, answer: str = "", suffix: str = "", subject: str | None = None) -> Query:
        """The cloze ``prefix [answer] suffix`` in this model's form; ``position`` indexes the decoder input
        (encoder-decoders) or the row (XLNet)."""
        prefix = prefix.rstrip()
        before, after = self.encode(prefix), self.encode(suffix.strip())
        answer_ids = tuple(self.encode(f"{prefix} {answer}")[len(before):]) if answer else ()
        ids = self.tokenizer.ids
        if self.form == "xlnet":
            slot = ids.get("mask", ids["pad"])  # hidden from every stream: any token would do
            row = (*before, slot, *after, ids["sep"], ids["cls"])
            return Query(row, len(before), answer_ids)
        start = ids[getattr(self.module, "decoder_start_token", "pad")]
        if self.form == "t5":
            sentinel = int(self.tokenizer.sentinel_ids()[0])
            return Query((*before, sentinel, *after, ids["eos"]), 1, answer_ids, decoder_ids=(start, sentinel))
        encoder = (ids["bos"], *before, ids["mask"], *after, ids["eos"])
        decoder = (start, ids["bos"], *before)
        return Query(encoder, len(decoder) - 1, answer_ids, decoder_ids=decoder)

    def answer_logits_of(self, queries: list[Query]) -> Tensor:
        """Last-layer vocabulary logits ``[B, V]`` at each query's answer slot."""
        pad = self.tokenizer.ids.get("pad", 0)
        ids, mask = _padded([q.ids for q in queries], pad, self.device)
        positions = torch.tensor([q.position for q in queries], device=self.device)
        rows = torch.arange(len(queries), device=self.device)
        if self.permutation:
            length = ids.shape[1]
            perm_mask = torch.zeros(len(queries), length, length, dtype=torch.bool, device=self.device)
            perm_mask[rows, :, positions] = True  # nobody's content stream sees the slot
            types = torch.zeros_like(ids)
            types[rows, mask.sum(1) - 1] = 2  # <cls>'s own segment, as in the training rows
            out = self.module.backbone(ids, StackInputs(attention_mask=mask, ids={"token_type_ids": types}, mask=~perm_mask,
                                                         output_positions=positions[:, None]))
            return self.module.lm_head(out.query_state[:, 0])
        decoder, decoder_mask = _padded([q.decoder_ids for q in queries], pad, self.device)
        hidden = self.module.decode({"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder,
                                     "decoder_attention_mask": decoder_mask})
        return self.module.lm_head(hidden[rows, positions])


def _padded(rows: list[tuple[int, ...]], pad: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Right-padded ids ``[B, L]`` and their attention mask."""
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def load_reader(path: str | Path):  # noqa: ANN201 - a LanguageModel or a ClozeReader
    """The probe's view of a checkpoint: a :class:`~plm_lightning.knowledge.lm.LanguageModel` for causal and
    masked LMs (every layer readable; ELECTRA through its generator), a :class:`ClozeReader` for encoder-decoders
    and XLNet (the answer logits)."""
    from plm_lightning.knowledge.lm import LM_OBJECTIVES, LanguageModel
    from plm_lightning.objectives.loading import load_pretrained

    if not Path(path).exists():
        raise ConfigError(f"no such checkpoint or transformers directory: '{path}'")
    module, tokenizer = load_pretrained(path, LM_OBJECTIVES + CLOZE_OBJECTIVES, "probe")
    reader = ClozeReader if type(module).__name__ in CLOZE_OBJECTIVES else LanguageModel
    return reader(module, tokenizer, str(path))
