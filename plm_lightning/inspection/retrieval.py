"""``inspect`` for REALM: a salient-span masked query, the block it came from (never retrieved), the blocks that
state its fact (world data), and statistics of the knowledge corpus and the masking."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.realm import REALMDataModule


def _batches(datamodule: REALMDataModule, batches: int) -> list[dict[str, Any]]:
    loader = datamodule.train_dataloader()
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == batches:
            break
    return out


def realm_statistics(datamodule: REALMDataModule, model: Any, batches: int) -> dict[str, Any]:
    datamodule.setup("fit")
    corpus = datamodule.corpus
    queries = corpus.queries["train"]
    masked, lengths = [], []
    for batch in _batches(datamodule, batches):
        chosen = batch["labels"] != -100
        masked.extend(chosen.sum(1).tolist())
        lengths.extend(batch["attention_mask"].sum(1).tolist())
    hp = getattr(model, "hparams", {})
    return {"objective": type(model).__name__, "corruption": "salient_span", "batches": batches,
            "blocks": len(corpus.blocks), "mean_block_tokens": float(np.mean([len(b) for b in corpus.blocks])),
            "train_queries": len(queries), "val_queries": len(corpus.queries["val"]),
            "mean_spans_per_query": float(np.mean([len(q.spans) for q in queries])),
            "mean_query_tokens": float(np.mean(lengths)), "mean_masked_tokens": float(np.mean(masked)),
            "masked_fraction": float(np.sum(masked) / np.sum(lengths)),
            "queries_with_relevant_blocks": float(np.mean([bool(q.relevant) for q in queries])),
            "top_k": hp.get("top_k"), "null_document": hp.get("null_document"), "ict_steps": hp.get("ict_steps")}


def render_realm(datamodule: REALMDataModule, model: Any, out: TextIO) -> None:
    tok = datamodule.tokenizer
    datamodule.setup("fit")
    batch = _batches(datamodule, 1)[0]
    corpus = datamodule.corpus
    hp = getattr(model, "hparams", {})
    out.write(f"objective: {type(model).__name__}: p(y|x) = sum over the top {hp.get('top_k')} blocks"
              f"{' + the null document' if hp.get('null_document') else ''} of p(z|x) p(y|z,x); {len(corpus.blocks)} "
              f"blocks to retrieve from\n\n")
    for row in range(min(2, len(batch["input_ids"]))):
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        labels = batch["labels"][row][: len(ids)]
        original = batch["ict_query_ids"][row][batch["ict_query_mask"][row].bool()].tolist()
        block = int(batch["block_ids"][row])
        relevant = [int(b) for b in batch["relevant_blocks"][row] if b >= 0]
        out.write(f"original:  {tok.decode(original)}\n")
        out.write(f"query x:   {tok.decode(ids)}\n")
        out.write(f"span y:    {tok.decode(labels[labels != -100].tolist())}  (loss on these tokens only)\n")
        out.write(f"own block: #{block} (never retrieved): {tok.decode(corpus.blocks[block].tolist())}\n")
        if relevant:
            out.write(f"blocks stating the same fact: {len(relevant)}, e.g. #{relevant[0]}: "
                      f"{tok.decode(corpus.blocks[relevant[0]].tolist())}\n")
        out.write("reader input for a retrieved z: [CLS] x [SEP] z [SEP] (token type 1 on z)\n\n")
