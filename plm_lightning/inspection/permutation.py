"""``inspect`` statistics and view of XLNet's permutation LM: no token is corrupted; what matters is which positions
are predicted (the last 1/K of the factorization order, as n-gram spans) and what each stream may see."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.inspection.batches import sample_batches


def _runs(row: np.ndarray) -> list[int]:
    edges = np.diff(np.concatenate([[0], row.astype(np.int8), [0]]))
    return (np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).tolist()


def order_ranks(perm_mask: np.ndarray) -> np.ndarray:
    """Each position's place in the factorization order, recovered from a perm_mask: how many positions it may see
    (context tokens, which see only each other, come first; a target sees the context and the targets before it)."""
    return (~perm_mask).sum(1)


def permutation_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """``loss_fraction``: predicted tokens of all real tokens (1/K); ``targets_per_row_mean`` against
    ``num_predict``, the targets of a full row; ``mean_span_length`` of the predicted runs;
    ``context_before_targets``: the share of rows in which every context token is visible to every target (partial
    prediction predicts the end of the order)."""
    collate = datamodule.collator()
    tokens = loss_tokens = rows = context_first = 0
    spans: list[int] = []
    per_row: list[int] = []
    for _, batch in sample_batches(datamodule, batches):
        real = batch["attention_mask"].numpy().astype(bool)
        targets = batch["labels"].numpy() != IGNORE_INDEX
        perm = batch["perm_mask"].numpy()
        tokens += int(real.sum())
        loss_tokens += int(targets.sum())
        per_row.extend(targets.sum(1).tolist())
        for r in range(len(real)):
            spans.extend(_runs(targets[r]))
            context = real[r] & ~targets[r] & ~np.isin(batch["input_ids"][r].numpy(), [collate.sep_id, collate.cls_id])
            context_first += int(not perm[r][np.ix_(targets[r], context)].any())
            rows += 1
    return {"objective": type(model).__name__, "corruption": collate.objective, "batches": batches,
            "tokens": tokens, "loss_tokens": loss_tokens, "loss_fraction": loss_tokens / tokens if tokens else None,
            "mask_token_fraction": None, "random_token_fraction": None, "unchanged_fraction": None,
            "mean_span_length": float(np.mean(spans)) if spans else None,
            "input_length_mean": tokens / rows if rows else None, "target_length_mean": None,
            "num_predict": collate.num_predict, "targets_per_row_mean": float(np.mean(per_row)) if per_row else None,
            "perm_size": collate.perm_size, "context_before_targets": context_first / rows if rows else None}


def render_permutation(datamodule: TextDataModule, model: Any, out: TextIO, width: int = 24,
                       progress: float = 0.0) -> None:
    """The first row: tokens with segment ids, the targets, the order, and both streams' masks."""
    tok = datamodule.tokenizer
    _, batch = next(sample_batches(datamodule, 1, progress))
    ids, labels = batch["input_ids"][0].numpy(), batch["labels"][0].numpy()
    real = int(batch["attention_mask"][0].sum())
    perm = batch["perm_mask"][0].numpy()
    targets = labels != IGNORE_INDEX
    out.write(f"objective: {type(model).__name__} (permutation_lm), seq_len={datamodule.seq_len}, "
              f"perm_size={datamodule.perm_size}, predicted per full row={datamodule.collator().num_predict}\n\n")
    out.write("input (unchanged; [x] = predicted, segment ids below):\n  "
              + " ".join(f"[{tok.id_to_token(t)}]" if m else tok.id_to_token(t) for t, m in zip(ids[:real], targets))
              + f"\n  {batch['token_type_ids'][0, :real].tolist()}\n\n")
    ranks = order_ranks(perm)
    order = [int(i) for i in np.argsort(ranks[:real], kind="stable") if targets[i]]
    out.write(f"predicted positions in factorization order (each sees the context and the ones before it):\n  "
              f"{order}\n\n")
    n = min(width, real)
    content = ~perm[:n, :n] | np.eye(n, dtype=bool)
    for name, grid in (("content stream h", content), ("query stream g (targets only)", ~perm[:n, :n])):
        out.write(f"{name}, first {n} tokens (row = query, '#' = may attend):\n")
        for i, row in enumerate(grid):
            line = "".join("#" if v else "." for v in row)
            out.write("  " + (line if name.startswith("content") or targets[i] else " " * n) + "\n")
        out.write("\n")
