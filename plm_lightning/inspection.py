"""``inspect``: what a recipe's DataModule does to real text, shown to a person or measured as JSON statistics."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np
import torch

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.nn.masks import causal_mask, combine, document_mask, padding_mask


def build_datamodule(configs: list[str], overrides: list[str]) -> tuple[TextDataModule, Any]:
    """Instantiate the recipe exactly as ``fit`` would, and prepare its data."""
    from plm_lightning.cli import PLMCLI

    args = [a for c in configs for a in ("--config", c)] + overrides
    cli = PLMCLI(args=args, run=False)
    datamodule = cli.datamodule
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule, cli.model


def _batches(datamodule: TextDataModule, n: int):  # noqa: ANN202
    loader = datamodule.train_dataloader()
    keys = list(loader.sampler)
    bs = datamodule.batch_size
    for b in range(min(n, max(1, len(keys) // bs))):
        samples = [loader.dataset[k] for k in keys[b * bs:(b + 1) * bs]]
        yield samples, loader.collate_fn(samples)


def _span_words(batch: dict[str, Any], samples: list[dict[str, Any]]) -> list[int]:
    """Words per span for corruptions that define spans (SpanBERT): the unit the papers report."""
    from plm_lightning.data.corruption import word_ids

    span_ids = batch["span_ids"].numpy()
    starts = np.stack([s["word_starts"] for s in samples])
    _, word_begins = word_ids(span_ids >= 0, starts)
    counts: list[int] = []
    for row in range(span_ids.shape[0]):
        ids = span_ids[row][span_ids[row] >= 0]
        if ids.size:
            counts.extend(np.bincount(ids, weights=word_begins[row][span_ids[row] >= 0]).astype(int)[np.unique(ids)])
    return counts


def _runs(mask: np.ndarray) -> list[int]:
    """Lengths of the contiguous True runs of each row."""
    lengths: list[int] = []
    for row in mask:
        padded = np.concatenate([[False], row, [False]]).astype(np.int8)
        edges = np.flatnonzero(np.diff(padded))
        lengths.extend((edges[1::2] - edges[::2]).tolist())
    return lengths


def corruption_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """The statistics the design fixes for every objective (null where a field does not apply)."""
    collate = datamodule.collator()
    corrupting = getattr(collate, "objective", "") != "causal_lm"
    mask_id = datamodule.tokenizer.ids.get("mask")
    tokens = loss_tokens = n_mask = n_random = n_same = 0
    spans: list[int] = []
    lengths: list[int] = []
    in_unit = {"in_phrase": 0, "in_entity": 0}
    stages: list[int] = []
    streams: list[int] = []
    for samples, batch in _batches(datamodule, batches):
        if "stream" in batch:
            streams.extend(batch["stream"].tolist())
        original = np.stack([s["input_ids"] for s in samples]).astype(np.int64)
        real = batch["attention_mask"].numpy().astype(bool)
        labels = batch["labels"].numpy()
        corrupted = batch["input_ids"].numpy()
        loss = labels != IGNORE_INDEX  # the corrupted positions
        tokens += int(real.sum())
        loss_tokens += int(model.loss_positions(batch).numpy().sum())  # ELECTRA: every real token
        lengths.extend(real.sum(1).tolist())
        if corrupting:
            c, o = corrupted[loss], original[loss]
            n_mask += int((c == mask_id).sum())
            n_same += int((c == o).sum())
            n_random += int(((c != o) & (c != mask_id)).sum())
            spans.extend(_span_words(batch, samples) if "span_ids" in batch else _runs(loss))
            for name in in_unit:
                if name in samples[0]:
                    in_unit[name] += int(np.stack([s[name] for s in samples])[loss].sum())
            if "knowledge_stage" in batch:
                stages.extend(batch["knowledge_stage"].tolist())
    chosen = n_mask + n_random + n_same

    def frac(x: int) -> float | None:
        return x / chosen if corrupting and chosen else None

    return {
        "objective": type(model).__name__,
        "corruption": getattr(collate, "objective", None),
        "batches": batches,
        "tokens": tokens,
        "loss_tokens": loss_tokens,
        "loss_fraction": loss_tokens / tokens if tokens else None,
        "mask_token_fraction": frac(n_mask),
        "random_token_fraction": frac(n_random),
        "unchanged_fraction": frac(n_same),
        "mean_span_length": float(np.mean(spans)) if corrupting and spans else None,
        "input_length_mean": float(np.mean(lengths)) if lengths else None,
        "target_length_mean": None,
        # ERNIE: the share of masked tokens inside phrases / entities, and the stage mix of the measured batches
        "phrase_token_fraction": in_unit["in_phrase"] / loss_tokens if stages and loss_tokens else None,
        "entity_token_fraction": in_unit["in_entity"] / loss_tokens if stages and loss_tokens else None,
        "stages": {collate.stages[k]: stages.count(k) for k in sorted(set(stages))} if stages else None,
        **_stream_mix(datamodule, streams),
    }


def _stream_mix(datamodule: TextDataModule, streams: list[int]) -> dict[str, Any]:
    """Multilingual data (XLM, mBERT): the share of measured samples per language / parallel corpus, next to the
    smoothed sampling probabilities they are drawn with."""
    names = getattr(datamodule, "stream_names", None)
    if not names or not streams:
        return {}
    counts = np.bincount(streams, minlength=len(names)) / len(streams)
    target = datamodule.stream_weights()
    return {"stream_fraction": dict(zip(names, counts.round(4).tolist())),
            "stream_probability": dict(zip(names, target.round(4).tolist()))}


def _bracket_units(sample: dict[str, Any], kind: str, tok: Any, real: int) -> str:
    """The sample's tokens with each multi-token phrase or entity unit in brackets."""
    inside, starts = sample[f"in_{kind}"][:real], sample[f"{kind}_starts"][:real]
    pieces = []
    for i, t in enumerate(sample["input_ids"][:real].tolist()):
        opens = inside[i] and (i == 0 or starts[i] or not inside[i - 1])
        closes = inside[i] and (i + 1 == real or starts[i + 1] or not inside[i + 1])
        pieces.append(("[" if opens else "") + tok.id_to_token(t) + ("]" if closes else ""))
    return " ".join(pieces)


def render(datamodule: TextDataModule, model: Any, out: TextIO, width: int = 24) -> None:
    """One sample: original, corrupted input, targets, loss positions and a picture of the attention mask."""
    tok = datamodule.tokenizer
    samples, batch = next(_batches(datamodule, 1))
    original = np.stack([s["input_ids"] for s in samples])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    real = int(batch["attention_mask"][0].sum())
    show = lambda seq: " ".join(tok.id_to_token(t) for t in seq[:real])  # noqa: E731
    out.write(f"objective: {type(model).__name__} ({getattr(datamodule.collator(), 'objective', '?')}), "
              f"seq_len={datamodule.seq_len}, packing={datamodule.packing}\n\n")
    out.write(f"original:\n  {show(original[0].tolist())}\n\n")
    for kind in ("phrase", "entity"):  # ERNIE's knowledge units, bracketed
        if f"in_{kind}" in samples[0]:
            out.write(f"{kind} units [...]:\n  {_bracket_units(samples[0], kind, tok, real)}\n\n")
    if "stream" in batch:  # multilingual: the sample's language or parallel corpus
        name = datamodule.stream_names[int(batch["stream"][0])]
        out.write(f"stream: {name}" + (" (TLM pair)" if "-" in name else "") + "\n\n")
    if "position_ids" in batch:
        out.write(f"position ids (restart at the target sentence):\n  {batch['position_ids'][0, :real].tolist()}\n\n")
    if "token_type_ids" in batch and "stream" in batch:
        out.write(f"token types (language ids):\n  {batch['token_type_ids'][0, :real].tolist()}\n\n")
    if "knowledge_stage" in batch:
        out.write(f"stage: {datamodule.collator().stages[int(batch['knowledge_stage'][0])]}\n\n")
    out.write(f"corrupted input:\n  {show(ids)}\n\n")
    targets = " ".join(f"{i}:{tok.id_to_token(t)}" for i, t in enumerate(labels) if t != IGNORE_INDEX)
    out.write(f"targets (position:token):\n  {targets}\n\n")
    carries_loss = model.loss_positions(batch)[0].tolist()
    loss_line = "".join("^" if c else "." for c in carries_loss[:real])
    out.write(f"loss positions ({sum(carries_loss)} of {real} tokens):\n  {loss_line}\n\n")
    if "sentence_label" in batch:
        meaning = "0 = in order, 1 = swapped" if datamodule.packing == "sentence_order" else "0 = continuation, 1 = random"
        out.write(f"sentence label: {int(batch['sentence_label'][0])} ({meaning})\n\n")
    n = min(width, ids.__len__())
    mask = combine(padding_mask(batch["attention_mask"][:1, :n]),
                   document_mask(batch["document_ids"][:1, :n]) if "document_ids" in batch else None,
                   causal_mask(n) if getattr(model, "causal", False) else None)
    if mask is None:
        mask = torch.ones(1, 1, n, n, dtype=torch.bool)
    grid = mask.expand(1, 1, n, n)[0, 0]
    out.write(f"attention mask, first {n} tokens (row = query, '#' = may attend):\n")
    for row in grid.tolist():
        out.write("  " + "".join("#" if v else "." for v in row) + "\n")
