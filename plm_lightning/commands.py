"""The CLI's extra subcommands: ``inspect``, ``export``, ``import`` and ``predict CHECKPOINT PROMPTS`` (generation;
``predict --config ...`` remains LightningCLI's)."""

from __future__ import annotations

import argparse
import json
import sys

from plm_lightning.errors import ConfigError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like the rest of the CLI
        raise ConfigError(f"{self.prog}: {message}")


def run_export(argv: list[str]) -> None:
    parser = _Parser(prog="plm_lightning export", description="Write a Hugging Face transformers directory.")
    parser.add_argument("checkpoint", help="a plm_lightning checkpoint (.ckpt)")
    parser.add_argument("out_dir", help="directory to write config.json, model.safetensors and tokenizer files to")
    parser.add_argument("--part", choices=["discriminator", "generator"], default="discriminator",
                        help="ELECTRA: the discriminator (default, for downstream use) or the generator")
    args = parser.parse_args(argv)
    from plm_lightning.interop import export_checkpoint

    arch = export_checkpoint(args.checkpoint, args.out_dir, args.part)
    print(f"exported {args.checkpoint} as {arch} to {args.out_dir}")


def run_import(argv: list[str]) -> None:
    parser = _Parser(prog="plm_lightning import", description="Convert a transformers directory to a checkpoint.")
    parser.add_argument("hf_dir", help="a local transformers model directory (config.json + weights)")
    parser.add_argument("out_ckpt", help="checkpoint file to write")
    parser.add_argument("--generator", default=None, help="ELECTRA: the ElectraForMaskedLM generator directory that "
                        "goes with an ElectraForPreTraining discriminator")
    args = parser.parse_args(argv)
    from plm_lightning.interop import import_hf

    info = import_hf(args.hf_dir, args.out_ckpt, args.generator)
    print(f"imported {args.hf_dir} ({info['family']}) into {info['checkpoint']}; continue pretraining with "
          f"--model.init_from {info['checkpoint']}")


def run_inspect(argv: list[str]) -> None:
    parser = _Parser(prog="plm_lightning inspect", description="Show what a recipe's data pipeline does to text.")
    parser.add_argument("--config", action="append", required=True, help="recipe YAML (repeatable)")
    parser.add_argument("--batches", type=int, default=1, help="batches to measure")
    parser.add_argument("--json", action="store_true", help="print corruption statistics as one JSON object")
    parser.add_argument("--progress", type=float, default=0.0,
                        help="show the sample at this training progress, in epochs (staged recipes: ERNIE, ERNIE 2.0)")
    args, rest = parser.parse_known_args(argv)
    if args.batches < 1:
        raise ConfigError(f"--batches={args.batches} must be >= 1")
    if args.progress < 0:
        raise ConfigError(f"--progress={args.progress} must be >= 0")
    from plm_lightning.inspection import build_datamodule, corruption_statistics, render

    datamodule, objective = build_datamodule(args.config, rest)
    if args.json:
        print(json.dumps(corruption_statistics(datamodule, objective, args.batches)))
    else:
        render(datamodule, objective, sys.stdout, progress=args.progress)


def run_predict(argv: list[str]) -> None:
    parser = _Parser(prog="plm_lightning predict",
                     description="Generate from a file of prompts: continue them (GPT-2) or fill their sentinels (T5).")
    parser.add_argument("checkpoint", help="a CausalLM or Seq2SeqLM checkpoint of ours, or a transformers directory")
    parser.add_argument("prompts", help="a UTF-8 text file, one prompt per line")
    parser.add_argument("--strategy", default="greedy", help="greedy, sample or beam")
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top_k", type=int, default=0, help="sample among the k most probable tokens (0 = all)")
    parser.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling mass (1 = all)")
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--length_penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no_cache", action="store_true", help="recompute every step (the cache's reference)")
    parser.add_argument("--json", action="store_true", help="one JSON object per prompt")
    args = parser.parse_args(argv)
    from plm_lightning.generation import GenerationConfig
    from plm_lightning.prediction import predict_file

    config = GenerationConfig(args.strategy, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                              args.num_beams, args.length_penalty, not args.no_cache, args.seed)
    for row in predict_file(args.checkpoint, args.prompts, config):
        if args.json:
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(f"{row['prompt']}\t{row.get('filled', row['output'])}")
