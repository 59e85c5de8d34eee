"""The fine-tuning command ``glue``: one checkpoint fine-tuned on every GLUE (and SuperGLUE BoolQ / RTE) task, one
table (``finetune.glue``)."""

from __future__ import annotations

import json
from pathlib import Path

from plm_lightning.errors import CommandParser


def run_glue(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning glue",
                           description="Fine-tune a checkpoint on every GLUE task (and SuperGLUE's BoolQ and RTE) and "
                                       "write one table of the tasks' own metrics, majority-class floors beside them.")
    parser.add_argument("--ckpt", required=True, help="a checkpoint of ours (MLM, ELECTRA, causal LM, "
                                                      "encoder-decoder ...) or a transformers directory")
    parser.add_argument("--tasks", default="glue", help="task names (cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, "
                                                        "wnli, boolq, superglue-rte) and benchmarks (glue, "
                                                        "superglue), comma-separated")
    parser.add_argument("--data", default=None, help="a directory of save_to_disk copies, one per task (DIR/cola, "
                                                     "DIR/mnli ...); default: the hub copies nyu-mll/glue and "
                                                     "aps/super_glue through datasets' cache")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per task (BERT: 3)")
    parser.add_argument("--max-steps", type=int, default=-1, help="stop each task after N optimizer steps "
                                                                  "(-1: the epochs)")
    parser.add_argument("--learning-rate", type=float, default=2e-5, help="AdamW's peak rate (BERT's grid: 2e-5 to "
                                                                          "5e-5)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per example")
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--random-init", action="store_true",
                        help="the control arm: the checkpoint's architecture from random weights")
    parser.add_argument("--accelerator", default="cpu", help="Lightning's accelerator (cpu, gpu, auto)")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--precision", default="32-true", help="Lightning's precision (32-true, bf16-mixed ...)")
    parser.add_argument("--out", default=None, help="the report JSON (default: beside the checkpoint, "
                                                    "<name>.glue.json, where export's model card finds it)")
    parser.add_argument("--log-dir", default=None, help="the tasks' CSV logs (default: beside the report, "
                                                        "<name>.glue-logs/<task>)")
    parser.add_argument("--redo", action="store_true", help="score every task again, even those in the report")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    from plm_lightning.finetune.glue import GlueSettings, benchmark_table, benchmark_tasks, run_benchmark
    from plm_lightning.run_directory import GLUE_SUFFIX, results_path

    tasks = benchmark_tasks(args.tasks)
    settings = GlueSettings(epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.learning_rate,
                            batch_size=args.batch_size, max_length=args.max_length, warmup_ratio=args.warmup_ratio,
                            weight_decay=args.weight_decay, seed=args.seed, random_init=args.random_init,
                            accelerator=args.accelerator, devices=args.devices, precision=args.precision)
    default_out = results_path(args.ckpt, GLUE_SUFFIX)
    if args.random_init and not args.out:  # the control's scores never stand as the checkpoint's own in its card
        default_out = default_out.with_name(default_out.name.replace(GLUE_SUFFIX, ".random-init" + GLUE_SUFFIX))
    out = Path(args.out) if args.out else default_out
    log_dir = Path(args.log_dir) if args.log_dir else out.with_name(out.name.removesuffix(".json") + "-logs")
    report = run_benchmark(args.ckpt, tasks, args.data, settings, out, log_dir, redo=args.redo)
    if args.json:
        print(json.dumps(report))
        return
    print(benchmark_table(report))
    print(f"results: {out}")
