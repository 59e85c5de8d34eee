"""``inspect`` statistics and views of the denoising objectives whose targets are not the masked tokens in place:
encoder-decoder (T5, UL2, MASS, BART), their decoder-only prefix-LM rows (``decoder_only``) and GLM's blank
infilling."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.inspection_notes import summarize
from plm_lightning.data.seq2seq import input_rows
from plm_lightning.inspection.batches import sample_batches

_NULL_MASKING = {"mask_token_fraction": None, "random_token_fraction": None, "unchanged_fraction": None}


def seq2seq_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """Encoder-decoder denoising: ``noise_fraction`` is the noised tokens' share of the original tokens (the papers'
    corruption rate), ``loss_fraction`` the original tokens the decoder predicts (T5, MASS: the noise; BART: the
    whole row), ``loss_tokens`` every target position (sentinels and EOS too)."""
    collate = datamodule.collator()
    markers = set(collate.sentinels.tolist()) | {collate.eos_id}
    original = noise = predicted = spans = inserted = loss_tokens = 0
    inputs: list[int] = []
    targets: list[int] = []
    notes = datamodule.inspection_notes()
    for samples, batch in sample_batches(datamodule, batches):
        for note in notes:
            note.add(samples, batch)
        original += int(sum((np.asarray(s["document_ids"]) >= 0).sum() for s in samples))
        labels = batch["labels"].numpy()
        carried = labels != IGNORE_INDEX
        loss_tokens += int(carried.sum())
        predicted += int((carried & ~np.isin(labels, list(markers))).sum())
        if "noise_tokens" in batch:  # BART: the collator counts what its noise did
            noise += int(batch["noise_tokens"].sum())
            spans += int(batch["noise_spans"].sum())
            inserted += int(batch["inserted_tokens"].sum())
        else:
            noise += int((carried & ~np.isin(labels, list(markers))).sum())
            spans += sum(int(np.isin(row, collate.sentinels).sum()) for row in input_rows(batch)) or len(samples)  # MASS: 1
        inputs.extend(len(row) for row in input_rows(batch))
        targets.extend(carried.sum(1).tolist())
    return {
        "objective": type(model).__name__, "corruption": collate.objective, "batches": batches,
        "tokens": original, "loss_tokens": loss_tokens, "loss_fraction": predicted / original if original else None,
        "noise_tokens": noise, "noise_fraction": noise / original if original else None, "spans": spans,
        "mean_span_length": noise / spans if spans else None, **({"inserted_tokens": inserted} if inserted else {}),
        "input_length_mean": float(np.mean(inputs)) if inputs else None,
        "target_length_mean": float(np.mean(targets)) if targets else None, **_NULL_MASKING,
        **summarize(notes),
    }


def blank_infilling_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """GLM: ``noise_fraction`` = blanked tokens / original tokens, spans and their mean length, Part A (the
    bidirectional prefix) and the whole sequence's mean lengths; ``loss_tokens`` = the span tokens and one [E] per
    span."""
    original = blanked = spans = loss_tokens = 0
    part_a: list[int] = []
    lengths: list[int] = []
    for samples, batch in sample_batches(datamodule, batches):
        original += int(sum((np.asarray(s["document_ids"]) >= 0).sum() for s in samples))
        blanked += int(batch["blanked_tokens"].sum())
        spans += int(batch["spans"].sum())
        loss_tokens += int((batch["labels"] != IGNORE_INDEX).sum())
        part_a.extend(batch["prefix_lengths"].tolist())
        lengths.extend(batch["attention_mask"].sum(1).tolist())
    return {"objective": type(model).__name__, "corruption": "blank_infilling", "batches": batches, "tokens": original,
            "loss_tokens": loss_tokens, "loss_fraction": loss_tokens / original if original else None,
            "noise_tokens": blanked, "noise_fraction": blanked / original if original else None, "spans": spans,
            "mean_span_length": blanked / spans if spans else None,
            "input_length_mean": float(np.mean(part_a)) if part_a else None,
            "target_length_mean": float(np.mean(lengths) - np.mean(part_a)) if part_a else None,
            "sequence_length_mean": float(np.mean(lengths)) if lengths else None, **_NULL_MASKING}


def render_seq2seq(datamodule: TextDataModule, model: Any, sample: dict[str, Any], batch: dict[str, Any],
                    out: TextIO) -> None:
    """Encoder-decoder: the raw row, the encoder input with its sentinels, the decoder's target, and the masks."""
    tok = datamodule.tokenizer
    show = lambda seq: " ".join(tok.id_to_token(t) for t in seq)  # noqa: E731
    raw = np.asarray(sample["input_ids"])[np.asarray(sample["document_ids"]) >= 0].tolist()
    real = int(batch["attention_mask"][0].sum())
    labels = [t for t in batch["labels"][0].tolist() if t != IGNORE_INDEX]
    collate = datamodule.collator()
    corruption = collate.describe(batch)  # each encoder-decoder collator says its own corruption
    out.write(f"objective: {type(model).__name__} ({collate.objective}), encoder seq_len={datamodule.seq_len} "
              f"(raw rows of {len(raw)} tokens), {corruption}\n\n")
    out.write(f"original ({len(raw)} tokens):\n  {show(raw)}\n\n")
    out.write(f"encoder input ({real} tokens):\n  {show(batch['input_ids'][0, :real].tolist())}\n\n")
    out.write(f"decoder target = loss positions ({len(labels)} tokens):\n  {show(labels)}\n\n")
    seen = ("every encoder token" if "cross_attention_mask" not in batch else
            f"{int(batch['cross_attention_mask'][0].sum())} of the {real} encoder tokens (not the masks)")
    out.write(f"decoder input (target shifted right):\n  {show(batch['decoder_input_ids'][0, :len(labels)].tolist())}"
              "\n\nattention: encoder bidirectional over its input; decoder causal over the target, cross-attending "
              f"to {seen}\n")


