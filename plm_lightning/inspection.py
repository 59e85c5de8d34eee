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


def _batches(datamodule: TextDataModule, n: int, progress: float | None = None):  # noqa: ANN202
    """``n`` training batches spread evenly over the first epoch (so schedules show all their stages), or the
    batch at training ``progress`` (in epochs)."""
    loader = datamodule.train_dataloader()
    if progress is not None:
        loader.sampler.set_epoch(int(progress))
    keys = list(loader.sampler)
    bs = datamodule.batch_size
    total = max(1, len(keys) // bs)
    if progress is not None:
        starts = [min(total - 1, int((progress - int(progress)) * total))]
    else:
        starts = sorted({int(i * total / min(n, total)) for i in range(min(n, total))})
    for b in starts:
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


_NULL_MASKING = {"mask_token_fraction": None, "random_token_fraction": None, "unchanged_fraction": None,
                 "phrase_token_fraction": None, "entity_token_fraction": None, "stages": None}


def seq2seq_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """Encoder-decoder denoising: ``noise_fraction`` is the noised tokens' share of the original tokens (the papers'
    corruption rate), ``loss_fraction`` the original tokens the decoder predicts (T5, MASS: the noise; BART: the
    whole row), ``loss_tokens`` every target position (sentinels and EOS too)."""
    collate = datamodule.collator()
    markers = set(collate.sentinels.tolist()) | {collate.eos_id}
    original = noise = predicted = spans = inserted = loss_tokens = 0
    inputs: list[int] = []
    targets: list[int] = []
    streams: list[int] = []
    per_denoiser: dict[int, list[int]] = {}
    for samples, batch in _batches(datamodule, batches):
        if "stream" in batch:
            streams.extend(batch["stream"].tolist())
        if "denoiser" in batch:
            _collect_denoisers(per_denoiser, collate, samples, batch, markers)
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
            spans += int(np.isin(batch["input_ids"].numpy(), collate.sentinels).sum()) or len(samples)  # MASS: 1
        inputs.extend(batch["attention_mask"].numpy().sum(1).tolist())
        targets.extend(carried.sum(1).tolist())
    return {
        "objective": type(model).__name__, "corruption": collate.objective, "batches": batches,
        "tokens": original, "loss_tokens": loss_tokens, "loss_fraction": predicted / original if original else None,
        "noise_tokens": noise, "noise_fraction": noise / original if original else None, "spans": spans,
        "mean_span_length": noise / spans if spans else None, **({"inserted_tokens": inserted} if inserted else {}),
        "input_length_mean": float(np.mean(inputs)) if inputs else None,
        "target_length_mean": float(np.mean(targets)) if targets else None, **_NULL_MASKING,
        **_stream_mix(datamodule, streams),
        **({"denoisers": _denoiser_summary(per_denoiser)} if per_denoiser else {}),
    }


def _collect_denoisers(acc: dict[int, list[int]], collate: Any, samples: list[dict[str, Any]], batch: dict[str, Any],
                       markers: set[int]) -> None:
    """UL2: per denoiser, [rows, original tokens, noise (target) tokens, spans, input tokens, target tokens]."""
    labels, inputs = batch["labels"].numpy(), batch["input_ids"].numpy()
    for row, d in enumerate(batch["denoiser"].tolist()):
        carried = labels[row][labels[row] != IGNORE_INDEX]
        real = inputs[row][batch["attention_mask"][row].numpy().astype(bool)]
        noise = int((~np.isin(carried, list(markers))).sum())
        spans = int(np.isin(real, collate.sentinels).sum()) or 1  # S: the suffix is one span
        stats = [1, int((np.asarray(samples[row]["document_ids"]) >= 0).sum()), noise, spans, len(real), len(carried)]
        acc[d] = [a + b for a, b in zip(acc.get(d, [0] * 6), stats)]


def _denoiser_summary(acc: dict[int, list[int]]) -> dict[str, dict[str, float]]:
    from plm_lightning.data.corruption.ul2 import UL2_DENOISERS

    total = sum(v[0] for v in acc.values())
    return {UL2_DENOISERS[d].name: {"share": rows / total, "loss_fraction": noise / tokens,
                                    "mean_span_length": noise / spans, "input_length_mean": inputs / rows,
                                    "target_length_mean": targets / rows}
            for d, (rows, tokens, noise, spans, inputs, targets) in sorted(acc.items())}


def corruption_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """The statistics the design fixes for every objective (null where a field does not apply)."""
    collate = datamodule.collator()
    if getattr(collate, "objective", "") in ("span_corruption", "mixture_of_denoisers", "masked_seq2seq", "denoising"):
        return seq2seq_statistics(datamodule, model, batches)
    corrupting = getattr(collate, "objective", "") != "causal_lm"
    mask_id = datamodule.tokenizer.ids.get("mask")
    tokens = loss_tokens = n_mask = n_random = n_same = 0
    spans: list[int] = []
    lengths: list[int] = []
    in_unit = {"in_phrase": 0, "in_entity": 0}
    stages: list[int] = []
    streams: list[int] = []
    ernie2: dict[str, list] = {"forms": [], "active": [], "reorder": [], "distance": [], "capitalization": [],
                               "relation": []}
    for samples, batch in _batches(datamodule, batches):
        if "task_type_ids" in batch:
            _collect_ernie2(ernie2, collate, samples, batch)
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
        "phrase_token_fraction": in_unit["in_phrase"] / chosen if stages and chosen else None,
        "entity_token_fraction": in_unit["in_entity"] / chosen if stages and chosen else None,
        "stages": {collate.stages[k]: stages.count(k) for k in sorted(set(stages))} if stages else None,
        **_stream_mix(datamodule, streams),
        **_ernie2_summary(ernie2, collate),
    }


def _collect_ernie2(acc: dict[str, list], collate: Any, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
    acc["forms"].extend(batch["task_type_ids"].tolist())
    acc["active"].extend(collate.active_tasks(s.get("progress", 0.0)) for s in samples)
    for key, name in (("reorder_label", "reorder"), ("distance_label", "distance")):
        acc[name].extend(v for v in batch[key].tolist() if v != IGNORE_INDEX)
    for key, name in (("capitalization_labels", "capitalization"), ("relation_labels", "relation")):
        if key in batch:
            labels = batch[key].numpy()
            acc[name].extend(labels[labels != IGNORE_INDEX].tolist())


def _ernie2_summary(acc: dict[str, list], collate: Any) -> dict[str, Any]:
    """ERNIE 2.0: how often each task is trained, the input forms, and the label balance of each task."""
    from plm_lightning.data.corruption.sentence_reorder import class_permutation

    if not acc["forms"]:
        return {}
    n = len(acc["forms"])
    orders = {c: class_permutation(c) for c in set(acc["reorder"])}

    def share(values: list[int], classes: int) -> list[float] | None:
        return (np.bincount(values, minlength=classes) / len(values)).round(4).tolist() if values else None

    return {
        "task_fraction": {t: sum(t in a for a in acc["active"]) / n for t in collate.tasks},
        "form_fraction": dict(zip(("word", "reordering", "distance"), share(acc["forms"], 3))),
        # m = 3: n ~ U{1, 2, 3} segments, so 2 on average and in order 1/3 (1 + 1/2 + 1/6) = 0.556 of the time
        "reorder_mean_segments": float(np.mean([len(orders[c]) for c in acc["reorder"]])) if acc["reorder"] else None,
        "reorder_in_order_fraction": float(np.mean([orders[c] == tuple(sorted(orders[c])) for c in acc["reorder"]]))
        if acc["reorder"] else None,
        "distance_label_fraction": share(acc["distance"], 3),
        "capitalized_fraction": float(np.mean(acc["capitalization"])) if acc["capitalization"] else None,
        "relation_positive_fraction": float(np.mean(acc["relation"])) if acc["relation"] else None,
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


def _render_ernie2(datamodule: TextDataModule, sample: dict[str, Any], batch: dict[str, Any], tok: Any, real: int,
                   out: TextIO) -> None:
    """ERNIE 2.0: the sample's active tasks, input form and the labels of each task."""
    from plm_lightning.data.corruption.sentence_reorder import class_permutation

    collate = datamodule.collator()
    form = ("word-aware block", "reordered block", "sentence pair")[int(batch["task_type_ids"][0])]
    out.write(f"tasks: {', '.join(collate.active_tasks(sample.get('progress', 0.0)))} (task id: {form})\n\n")
    if int(batch["reorder_label"][0]) != IGNORE_INDEX:
        order = class_permutation(int(batch["reorder_label"][0]))
        out.write(f"sentence reordering: class {int(batch['reorder_label'][0])} = {len(order)} segment(s) laid out "
                  f"in order {list(order)}\n\n")
    if int(batch["distance_label"][0]) != IGNORE_INDEX:
        meaning = ("B follows A", "B elsewhere in A's document", "B from another document")
        out.write(f"sentence distance: {int(batch['distance_label'][0])} ({meaning[int(batch['distance_label'][0])]})\n\n")
    ids = batch["input_ids"][0].tolist()
    for key, name, positive in (("capitalization_labels", "capitalization", "capitalised"),
                                ("relation_labels", "token-document relation", "in another sentence")):
        if key in batch and (batch[key][0] != IGNORE_INDEX).any():
            labels = batch[key][0].tolist()[:real]
            words = " ".join(tok.id_to_token(ids[i]) + ("*" if v == 1 else "") for i, v in enumerate(labels)
                             if v != IGNORE_INDEX)
            out.write(f"{name} (words asked; * = {positive}):\n  {words}\n\n")


def _render_seq2seq(datamodule: TextDataModule, model: Any, sample: dict[str, Any], batch: dict[str, Any],
                    out: TextIO) -> None:
    """Encoder-decoder: the raw row, the encoder input with its sentinels, the decoder's target, and the masks."""
    tok = datamodule.tokenizer
    show = lambda seq: " ".join(tok.id_to_token(t) for t in seq)  # noqa: E731
    raw = np.asarray(sample["input_ids"])[np.asarray(sample["document_ids"]) >= 0].tolist()
    real = int(batch["attention_mask"][0].sum())
    labels = [t for t in batch["labels"][0].tolist() if t != IGNORE_INDEX]
    collate = datamodule.collator()
    if "denoiser" in batch:  # UL2: this row's denoiser
        from plm_lightning.data.corruption.ul2 import UL2_DENOISERS

        corruption = f"denoiser {UL2_DENOISERS[int(batch['denoiser'][0])].name} of the mixture"
    elif hasattr(collate, "noise"):  # BART
        n = collate.noise
        corruption = (f"{n.mask_length} masking of {n.mask_ratio:g} of the words (replace_length={n.replace_length}, "
                      f"lambda={n.poisson_lambda:g}, {n.placement}), sentence permutation {n.permute_sentence_ratio:g}, "
                      f"rotation {n.rotate_ratio:g}, insertion {n.insert_ratio:g}; {int(batch['noise_tokens'][0])} "
                      f"tokens noised in {int(batch['noise_spans'][0])} spans")
    elif hasattr(collate, "fragment_ratio"):  # MASS
        corruption = f"fragment_ratio={collate.fragment_ratio} (fragment starts at {int(batch['fragment_start'][0])})"
    else:
        corruption = f"noise_density={collate.noise_density}, mean_noise_span_length={collate.mean_noise_span_length}"
    out.write(f"objective: {type(model).__name__} ({collate.objective}), encoder seq_len={datamodule.seq_len} "
              f"(raw rows of {len(raw)} tokens), {corruption}\n\n")
    out.write(f"original ({len(raw)} tokens):\n  {show(raw)}\n\n")
    out.write(f"encoder input ({real} tokens):\n  {show(batch['input_ids'][0, :real].tolist())}\n\n")
    out.write(f"decoder target = loss positions ({len(labels)} tokens):\n  {show(labels)}\n\n")
    out.write(f"decoder input (target shifted right):\n  {show(batch['decoder_input_ids'][0, :len(labels)].tolist())}"
              "\n\nattention: encoder bidirectional over its input; decoder causal over the target, cross-attending "
              "to every encoder token\n")


def render(datamodule: TextDataModule, model: Any, out: TextIO, width: int = 24, progress: float = 0.0) -> None:
    """One sample (the first of the batch at training ``progress``, in epochs): original, corrupted input, targets,
    loss positions and a picture of the attention mask."""
    tok = datamodule.tokenizer
    samples, batch = next(_batches(datamodule, 1, progress))
    if "decoder_input_ids" in batch:
        _render_seq2seq(datamodule, model, samples[0], batch, out)
        return
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
    if "task_type_ids" in batch:
        _render_ernie2(datamodule, samples[0], batch, tok, real, out)
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
