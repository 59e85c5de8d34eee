"""``inspect`` for ERNIE (Tsinghua): the token-entity alignments of a row and what the dEA noise did to them."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.corruption.entity_alignment import NO_ENTITY


def render_entities(datamodule: Any, sample: dict[str, Any], batch: dict[str, Any], tok: Any, real: int,
                    out: TextIO) -> None:
    """Each aligned token with its entity, and the entity the model is shown where the noise changed it."""
    names = datamodule.graph.entities
    original, seen = sample["entity_ids"][:real], batch["entity_ids"][0, :real].numpy()
    ids = sample["input_ids"][:real]
    pieces = []
    for i in np.flatnonzero(original != NO_ENTITY):
        shown = "masked" if seen[i] == NO_ENTITY else f"replaced by {names[seen[i]]}" if seen[i] != original[i] else ""
        pieces.append(f"{i}:{tok.id_to_token(int(ids[i]))} -> {names[original[i]]}" + (f" ({shown})" if shown else ""))
    out.write("entity alignments (position:first token -> entity; the dEA predicts each among the row's "
              f"{len(set(original[original != NO_ENTITY].tolist()))} entities):\n  " + "\n  ".join(pieces) + "\n\n")


def collect_entities(acc: dict[str, int], samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
    original = np.stack([s["entity_ids"] for s in samples])
    seen = batch["entity_ids"].numpy()
    aligned = original != NO_ENTITY
    acc["rows"] += len(samples)
    acc["aligned"] += int(aligned.sum())
    acc["masked"] += int((aligned & (seen == NO_ENTITY)).sum())
    acc["replaced"] += int((aligned & (seen != NO_ENTITY) & (seen != original)).sum())


def entity_summary(acc: dict[str, int]) -> dict[str, Any]:
    """Alignments per row and the shares of them the dEA masked and replaced (ERNIE: 0.15 and 0.05)."""
    if not acc.get("rows"):
        return {}
    aligned = acc["aligned"]
    return {"entities_per_sequence": aligned / acc["rows"],
            "entity_masked_fraction": acc["masked"] / aligned if aligned else None,
            "entity_replaced_fraction": acc["replaced"] / aligned if aligned else None}
