"""Training speed of the encoder recipes of issue 3 against their transformers counterparts at the same config, and
ELECTRA's cost per step relative to BERT at the same discriminator size (the generator's overhead).

    python -m benchmarks.encoder_recipes [--threads 2] [--repeats 6] [--batch 8] [--seq 128]

Each row times one optimizer step (forward, backward, fused AdamW) of ours and of the counterpart, interleaved in
the same run; ``speedup_ours_over_hf`` is the median over rounds of (their time / our time).

- ALBERT-base (MLM + SOP) vs ``AlbertForPreTraining``.
- SpanBERT-base (MLM + SBO) vs ``BertForMaskedLM``: transformers has no SBO head, so ours does strictly more work.
- ELECTRA-base (1/3-width generator, shared embeddings, L = MLM + 50 RTD) vs ``ElectraForMaskedLM`` +
  ``ElectraForPreTraining`` sharing one ``ElectraEmbeddings``, glued with the same sampling and loss.
- ELECTRA-base vs our BERT-base MLM (same discriminator): the generator's and the per-token head's extra cost.
- DeBERTa-v3-base MLM (32k vocabulary) vs ``DebertaV2ForMaskedLM`` (ours with and without the Enhanced Mask Decoder, which
  transformers does not implement: with it ours runs the last layer twice more).
- ModernBERT-base MLM (30% masking) vs ``ModernBertForMaskedLM``, on batches with 10% padding (ours unpads).
- XLM at base shapes on a TLM batch vs ``XLMWithLMHeadModel``; multilingual BERT-base (119,547 vocabulary) vs
  ``BertForPreTraining``; ERNIE 2.0-base with its five tasks vs ``ErnieForPreTraining`` (MLM + NSP).

    python -m benchmarks.encoder_recipes --only deberta modernbert
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from benchmarks.common import interleaved_timing, step_parser
from benchmarks.train_throughput import _step_fn
from plm_lightning.objectives import ELECTRA, ERNIE2, MaskedLM


def _mlm_batch(batch: int, seq: int, vocab: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(5, vocab, (batch, seq))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, seq) < 0.15
    labels[chosen] = ids[chosen]
    corrupted = ids.masked_fill(chosen, 4)
    return {"input_ids": corrupted, "labels": labels, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids), "sentence_label": torch.randint(0, 2, (batch,))}


def _span_batch(batch: int, seq: int, vocab: int) -> dict[str, torch.Tensor]:
    """Spans of 3-4 tokens covering ~15% of each row, with the boundary keys the SBO head reads."""
    b = _mlm_batch(batch, seq, vocab)
    ids = b["input_ids"]
    labels = torch.full_like(ids, -100)
    span_ids = torch.full_like(ids, -1)
    left, right, offset = torch.zeros_like(ids), torch.zeros_like(ids), torch.zeros_like(ids)
    for start in range(5, seq - 6, 24):
        length = 3 + (start // 24) % 2
        sl = slice(start, start + length)
        labels[:, sl] = ids[:, sl]
        span_ids[:, sl] = start
        left[:, sl], right[:, sl] = start - 1, start + length
        offset[:, sl] = torch.arange(1, length + 1)
    return {**b, "labels": labels, "input_ids": ids.masked_fill(labels != -100, 4), "span_ids": span_ids,
            "span_left": left, "span_right": right, "span_offset": offset}


def _row(name: str, t: dict, tokens: int, counterpart: str, ratio: float | None = None) -> dict:
    """``ratio``: second's time over first's (default: the median of per-round ratios when first ran first)."""
    first, second = list(t)
    ratio = t[second]["ratio_to_first"] if ratio is None else ratio
    return {"benchmark": name, "counterpart": counterpart, "threads": torch.get_num_threads(),
            f"{first}_tokens_per_s": round(tokens / t[first]["median"], 1),
            f"{second}_tokens_per_s": round(tokens / t[second]["median"], 1),
            f"{first}_s_per_step_median": round(t[first]["median"], 4),
            f"{second}_s_per_step_median": round(t[second]["median"], 4),
            f"ratio_{second}_time_over_{first}": round(ratio, 3)}


def _versus_hf(ours: torch.nn.Module, hf: torch.nn.Module, d: dict, repeats: int, hf_inputs: dict[str, str],
               **extra: object) -> dict:
    """Interleaved steps of our module and a transformers model on the same batch: ``hf_inputs`` maps each of its
    keyword arguments to a batch key (``extra``: more of ours)."""
    return interleaved_timing({
        "ours": _step_fn(ours, lambda: ours(**d)["loss"]),
        "hf": _step_fn(hf, lambda: hf(**{arg: d[key] for arg, key in hf_inputs.items()}).loss),
        **extra,
    }, repeats=repeats)


MLM_INPUTS = {"input_ids": "input_ids", "attention_mask": "attention_mask", "labels": "labels"}


def _versus_hf_mlm(ours: torch.nn.Module, hf: torch.nn.Module, d: dict, repeats: int, **extra: object) -> dict:
    return _versus_hf(ours, hf, d, repeats, MLM_INPUTS, **extra)


def albert(batch: int, seq: int, repeats: int) -> dict:
    from transformers import AlbertConfig, AlbertForPreTraining

    d = _mlm_batch(batch, seq, 30000)
    ours = MaskedLM(backbone="albert-base", vocab_size=30000, sentence_prediction="sop").train()
    cfg = AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=768, num_attention_heads=12,
                       intermediate_size=3072, hidden_act="gelu_new", hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    hf = AlbertForPreTraining(cfg).train()
    t = _versus_hf(ours, hf, d, repeats, {**MLM_INPUTS, "token_type_ids": "token_type_ids",
                                          "sentence_order_label": "sentence_label"})
    return _row("ALBERT-base MLM+SOP", t, batch * seq, "AlbertForPreTraining")


def spanbert(batch: int, seq: int, repeats: int) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    d = _span_batch(batch, seq, 30522)
    ours = MaskedLM(backbone="bert-base", vocab_size=30522, span_boundary_objective=True).train()
    hf = BertForMaskedLM(BertConfig()).train()
    t = _versus_hf_mlm(ours, hf, d, repeats)
    return _row("SpanBERT-base MLM+SBO", t, batch * seq, "BertForMaskedLM (no SBO)")


def _hf_electra() -> tuple[torch.nn.Module, torch.nn.Module]:
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    disc = ElectraForPreTraining(ElectraConfig(embedding_size=768, hidden_size=768, num_attention_heads=12,
                                               intermediate_size=3072)).train()
    gen = ElectraForMaskedLM(ElectraConfig(embedding_size=768, hidden_size=256, num_attention_heads=4,
                                           intermediate_size=1024)).train()
    disc.electra.embeddings = gen.electra.embeddings  # shared token, position and segment tables
    gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
    return gen, disc


def electra(batch: int, seq: int, repeats: int) -> list[dict]:
    d = _mlm_batch(batch, seq, 30522)
    ours = ELECTRA(backbone="electra-base", vocab_size=30522, generator_size_divisor=3).train()
    bert = MaskedLM(backbone="bert-base", vocab_size=30522).train()
    gen, disc = _hf_electra()
    both = torch.nn.ModuleList([gen, disc])
    masked = d["labels"] != -100

    def hf_loss() -> torch.Tensor:
        g = gen(input_ids=d["input_ids"], attention_mask=d["attention_mask"], labels=d["labels"])
        with torch.no_grad():
            sampled = torch.multinomial(F.softmax(g.logits[masked].float(), -1), 1).squeeze(-1)
        replaced = d["input_ids"].clone()
        replaced[masked] = sampled
        original = torch.where(masked, d["labels"], d["input_ids"])
        out = disc(input_ids=replaced, attention_mask=d["attention_mask"], labels=(replaced != original).long())
        return g.loss + 50.0 * out.loss

    t = interleaved_timing({"ours": _step_fn(ours, lambda: ours(**d)["loss"]), "hf": _step_fn(both, hf_loss),
                            "bert": _step_fn(bert, lambda: bert(**d)["loss"])}, repeats=repeats)
    vs_hf = _row("ELECTRA-base (generator 1/3)", {"ours": t["ours"], "hf": t["hf"]}, batch * seq,
                 "ElectraForMaskedLM + ElectraForPreTraining")
    vs_bert = _row("ELECTRA-base cost vs BERT-base MLM (ours)", {"bert": t["bert"], "electra": t["ours"]},
                   batch * seq, "our MaskedLM bert-base", ratio=1.0 / t["bert"]["ratio_to_first"])
    return [vs_hf, vs_bert]


def deberta(batch: int, seq: int, repeats: int) -> list[dict]:
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    vocab = 32000  # the 128k table of the release is 3 x 0.4 GB of fp32 weights + Adam states here; same on both sides
    d = _mlm_batch(batch, seq, vocab)
    ours = MaskedLM(backbone="deberta-v3-base", vocab_size=vocab).train()
    emd = MaskedLM(backbone="deberta-v3-base", vocab_size=vocab, enhanced_mask_decoder=True).train()
    cfg = DebertaV2Config(vocab_size=vocab, relative_attention=True, position_buckets=256, max_relative_positions=-1,
                          pos_att_type=["p2c", "c2p"], position_biased_input=False, norm_rel_ebd="layer_norm",
                          share_att_key=True, type_vocab_size=0, layer_norm_eps=1e-7)
    hf = DebertaV2ForMaskedLM(cfg).train()
    t = _versus_hf_mlm(ours, hf, d, repeats, ours_emd=_step_fn(emd, lambda: emd(**d)["loss"]))
    plain = _row("DeBERTa-v3-base MLM", {"ours": t["ours"], "hf": t["hf"]}, batch * seq, "DebertaV2ForMaskedLM")
    with_emd = _row("DeBERTa-v3-base MLM + EMD", {"ours_emd": t["ours_emd"], "hf": t["hf"]}, batch * seq,
                    "DebertaV2ForMaskedLM (no EMD)", ratio=t["hf"]["ratio_to_first"] / t["ours_emd"]["ratio_to_first"])
    return [plain, with_emd]


def modernbert(batch: int, seq: int, repeats: int) -> dict:
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    d = _mlm_batch(batch, seq, 50368)
    d["attention_mask"][:, int(seq * 0.9):] = 0
    d["labels"][d["attention_mask"] == 0] = -100
    chosen = (torch.rand(batch, seq) < 0.3) & d["attention_mask"].bool()
    d["labels"] = torch.where(chosen, d["input_ids"], torch.full_like(d["labels"], -100))
    ours = MaskedLM(backbone="modernbert-base", vocab_size=50368, backbone_overrides={"pad_token_id": 0}).train()
    hf = ModernBertForMaskedLM(ModernBertConfig(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                                sep_token_id=2)).train()
    t = _versus_hf_mlm(ours, hf, d, repeats)
    return _row("ModernBERT-base MLM (30%, 10% padding)", t, batch * seq, "ModernBertForMaskedLM")


def xlm(batch: int, seq: int, repeats: int) -> dict:
    """XLM at BERT-base shapes (12 x 768, 12 heads, GELU, post-norm, learned positions, 2 language embeddings) on a
    TLM batch: two sentences, positions restarting at the second, a language id per token."""
    from transformers import XLMConfig, XLMWithLMHeadModel

    vocab = 30000
    d = _mlm_batch(batch, seq, vocab)
    half = seq // 2
    d["position_ids"] = torch.cat([torch.arange(half), torch.arange(seq - half)]).expand(batch, seq).contiguous()
    d["token_type_ids"] = (torch.arange(seq) >= half).long().expand(batch, seq).contiguous()
    ours = MaskedLM(backbone="bert-base", vocab_size=vocab, backbone_overrides={"dropout": 0.1}).train()
    cfg = XLMConfig(vocab_size=vocab, emb_dim=768, n_layers=12, n_heads=12, n_langs=2, use_lang_emb=True,
                    max_position_embeddings=512, dropout=0.1, attention_dropout=0.1, causal=False, asm=False,
                    layer_norm_eps=1e-12)
    hf = XLMWithLMHeadModel(cfg).train()
    t = _versus_hf(ours, hf, d, repeats, {**MLM_INPUTS, "langs": "token_type_ids", "position_ids": "position_ids"})
    return _row("XLM-base TLM (language embeddings, restarted positions)", t, batch * seq, "XLMWithLMHeadModel")


def mbert(batch: int, seq: int, repeats: int) -> dict:
    """Multilingual BERT-base: BERT's MLM + NSP over mBERT's 119,547-token shared vocabulary."""
    from transformers import BertConfig, BertForPreTraining

    vocab = 119547
    d = _mlm_batch(batch, seq, vocab)
    ours = MaskedLM(backbone="bert-base", vocab_size=vocab, sentence_prediction="nsp").train()
    hf = BertForPreTraining(BertConfig(vocab_size=vocab)).train()
    t = _versus_hf(ours, hf, d, repeats, {**MLM_INPUTS, "token_type_ids": "token_type_ids",
                                          "next_sentence_label": "sentence_label"})
    return _row("mBERT-base MLM+NSP (119,547 vocabulary)", t, batch * seq, "BertForPreTraining")


def ernie2(batch: int, seq: int, repeats: int) -> dict:
    """ERNIE 2.0-base with all five tasks active (MLM, capitalisation and token-document relation on half of the
    unmasked tokens, reordering and distance on [CLS]) vs ``ErnieForPreTraining`` with task ids (MLM + NSP, the
    two heads transformers has)."""
    from transformers import ErnieConfig, ErnieForPreTraining

    vocab = 30522
    d = _mlm_batch(batch, seq, vocab)
    g = torch.Generator().manual_seed(1)
    unmasked = d["labels"] == -100
    asked = unmasked & (torch.rand(batch, seq, generator=g) < 0.5)
    for key in ("capitalization_labels", "relation_labels"):
        d[key] = torch.where(asked, torch.randint(0, 2, (batch, seq), generator=g), torch.full_like(asked, -100,
                                                                                                    dtype=torch.long))
    pair = torch.arange(batch) % 2 == 0
    d["reorder_label"] = torch.where(pair, -100, torch.randint(0, 9, (batch,), generator=g))
    d["distance_label"] = torch.where(pair, torch.randint(0, 3, (batch,), generator=g), -100)
    d["task_type_ids"] = torch.where(pair, 2, 1)
    ours = ERNIE2(backbone="bert-base", vocab_size=vocab).train()
    hf = ErnieForPreTraining(ErnieConfig(vocab_size=vocab, use_task_id=True, task_type_vocab_size=3)).train()
    d["hf_task_type_ids"] = d["task_type_ids"][:, None].expand(batch, seq).contiguous()
    t = _versus_hf(ours, hf, d, repeats, {**MLM_INPUTS, "token_type_ids": "token_type_ids",
                                          "task_type_ids": "hf_task_type_ids", "next_sentence_label": "sentence_label"})
    return _row("ERNIE 2.0-base, five tasks", t, batch * seq, "ErnieForPreTraining (MLM + NSP only)")


RECIPES = {"albert": lambda b, s, r: [albert(b, s, r)], "spanbert": lambda b, s, r: [spanbert(b, s, r)],
           "electra": electra, "deberta": deberta, "modernbert": lambda b, s, r: [modernbert(b, s, r)],
           "xlm": lambda b, s, r: [xlm(b, s, r)], "mbert": lambda b, s, r: [mbert(b, s, r)],
           "ernie2": lambda b, s, r: [ernie2(b, s, r)]}


def main() -> None:
    args = step_parser(list(RECIPES)).parse_args()
    torch.set_num_threads(args.threads)
    rows = [row for name in args.only for row in RECIPES[name](args.batch, args.seq, args.repeats)]
    for row in rows:
        ratio = next((v for k, v in row.items() if k.startswith("ratio_hf_time_over_")), None)
        if ratio is not None:
            row["speedup_ours_over_hf"] = ratio
        print(json.dumps(row))


if __name__ == "__main__":
    main()
