"""Does pretraining help? Downstream scores on the offline tasks for a BERT pretrained with our MLM recipe against the
same architecture and tokenizer from random initialisation, at the same fine-tuning budget (steps, batch, learning
rate, seed). Run by hand; the table goes to the issue note.

    python benchmarks/transfer.py --pretrain-steps 2000 --finetune-steps 200 --out runs/transfer
    python benchmarks/transfer.py --ckpt runs/transfer/pretrain/.../last.ckpt   # reuse a pretrained checkpoint

Pretraining runs ``configs/bert.yaml`` with ``--model.backbone`` (default bert-mini: 4 layers, hidden 256, Turc et
al. 2019) through the CLI; each fine-tuning run is an in-process Lightning ``Trainer`` on one task's train split,
scored on (the first ``--eval-examples`` of) its validation split beside the majority baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import torch

from plm_lightning.finetune import (
    ChoiceDataModule,
    ClassificationDataModule,
    MultipleChoice,
    QADataModule,
    SequenceClassifier,
    SpanExtractor,
    TaggingDataModule,
    TokenClassifier,
)

TASKS = {  # task -> (head, data, metric reported, data options)
    "code_or_prose": (SequenceClassifier, ClassificationDataModule, "val/accuracy", {}),
    "continuation": (SequenceClassifier, ClassificationDataModule, "val/accuracy", {}),
    "markup_spans": (TokenClassifier, TaggingDataModule, "val/entity_f1", {}),
    "cloze_spans": (SpanExtractor, QADataModule, "val/f1", {"max_length": 256}),
    "next_sentence": (MultipleChoice, ChoiceDataModule, "val/accuracy", {"max_length": 64, "batch_size": 8}),
}


def pretrain(args: argparse.Namespace) -> Path:
    root = Path(args.out) / "pretrain"
    cmd = [sys.executable, "-m", "plm_lightning", "fit", "--config", "configs/bert.yaml", "--model.backbone",
           args.backbone, "--trainer.max_steps", str(args.pretrain_steps), "--trainer.limit_val_batches", "0",
           "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"pretraining: {args.pretrain_steps} steps in {time.perf_counter() - t0:.0f} s", flush=True)
    return max(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)


def finetune(task: str, ckpt: str, random_init: bool, args: argparse.Namespace) -> dict[str, float]:
    head, data_cls, metric, options = TASKS[task]
    L.seed_everything(args.seed, verbose=False)
    model = head(init_from=ckpt, random_init=random_init, learning_rate=args.learning_rate)
    data = data_cls(task=f"offline:{task}", **{"batch_size": args.batch_size, **options})
    data.tokenizer = model.tokenizer
    data.setup("fit")
    data.examples["validation"] = data.examples["validation"][:args.eval_examples]
    trainer = L.Trainer(max_steps=args.finetune_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0)
    t0 = time.perf_counter()
    trainer.fit(model, datamodule=data)
    evaluator = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (scores,) = evaluator.validate(model, datamodule=data, verbose=False)
    return {"score": scores[metric], "baseline": scores.get("val/majority_baseline", float("nan")),
            "metric": metric, "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", help="a pretrained checkpoint (skips pretraining)")
    parser.add_argument("--backbone", default="bert-mini")
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    parser.add_argument("--finetune-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--eval-examples", type=int, default=400)
    parser.add_argument("--tasks", nargs="*", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", default="runs/transfer")
    args = parser.parse_args()
    torch.set_num_threads(2)
    ckpt = args.ckpt or str(pretrain(args))
    rows = []
    for task in args.tasks:
        arms = {arm: finetune(task, ckpt, arm == "random", args) for arm in ("pretrained", "random")}
        rows.append({"task": task, **{f"{arm}_{k}": v for arm, r in arms.items() for k, v in r.items()}})
        print(json.dumps(rows[-1]), flush=True)
    lines = [f"checkpoint: {ckpt}; fine-tuning {args.finetune_steps} steps x batch {args.batch_size}, lr "
             f"{args.learning_rate}, validation = first {args.eval_examples} examples", "",
             "| task | metric | pretrained | random init | gain | majority baseline |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["pretrained_metric"] == "val/entity_f1":  # tagging every word O finds no entity
            r["pretrained_baseline"] = 0.0
        lines.append(f"| {r['task']} | {r['pretrained_metric']} | {r['pretrained_score']:.3f} | "
                     f"{r['random_score']:.3f} | {r['pretrained_score'] - r['random_score']:+.3f} | "
                     f"{r['pretrained_baseline']:.3f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transfer.md").write_text("\n".join(lines) + "\n")
    (out / "transfer.json").write_text(json.dumps(rows, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
