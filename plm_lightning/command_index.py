"""Every command of ``python -m plm_lightning``, with one line on what it does, readable without importing Lightning:
``--help`` with no command and a mistyped command are answered from here in a second (the commands themselves load
Lightning, torch and the recipes)."""

from __future__ import annotations

import difflib
import sys

TRAINING_COMMANDS = {
    "fit": "train a recipe: fit --config configs/<recipe>.yaml [--key value ...]",
    "validate": "score a checkpoint on the recipe's validation documents: validate --config ... --ckpt_path CKPT",
    "test": "score a fine-tuned checkpoint on its task's test split: test --config ... --ckpt_path CKPT",
    "predict": "generate from a file of prompts: predict CKPT PROMPTS.txt (or Lightning's predict --config ...)",
}
"""LightningCLI's subcommands (``fit --help`` lists every key of a recipe)."""

EXTRA_COMMANDS = {
    "inspect": "show what a recipe's data pipeline does to text (--json statistics, --png the attention mask)",
    "export": "write a checkpoint as a Hugging Face transformers directory",
    "import": "convert a transformers directory to a checkpoint",
    "prepare": "clean a corpus with the C4 filters and write it as JSONL, with a report",
    "pack": "tokenize and pack a recipe's corpus on disk into shards now, in worker processes or on many nodes",
    "optimize": "write a recipe's packed blocks as litdata streams, for fit --data.streaming DIR",
    "sweep": "run a W&B sweep spec locally (W&B's open-source sweeps engine, no server)",
    "arena": "train recipes to one FLOPs budget, fine-tune and prompt each, and judge the literature's claims",
    "prompt": "zero/few-shot prompting of a checkpoint on an offline task",
    "acceptability": "minimal-pair acceptability (BLiMP-style) of a checkpoint",
    "evaluate": "lm-evaluation-harness tasks on a checkpoint (masked LMs by pseudo-log-likelihood)",
    "glue": "fine-tune a checkpoint on every GLUE task (and SuperGLUE BoolQ, RTE) into one table",
    "world": "write the synthetic knowledge world: corpus, facts, LAMA probes, CounterFact requests",
    "probe": "LAMA-style probing at every layer of a checkpoint (logit lens, trained heads, MDL probes)",
    "causal-trace": "ROME's causal tracing: where a fact is recalled, layer by layer",
    "neurons": "knowledge neurons: integrated-gradients attribution, suppress and amplify",
    "trace-facts": "rank training documents for facts: TracIn, embedding similarity, BM25",
    "edit": "edit facts in a causal LM (ROME, MEMIT, fine-tuning, knowledge neurons, MEND) and score the edit",
}
"""Our own subcommands (``<command> --help`` for each one's options)."""


def overview() -> str:
    """The text of ``python -m plm_lightning --help``."""
    width = max(map(len, {**TRAINING_COMMANDS, **EXTRA_COMMANDS}))
    lines = ["usage: python -m plm_lightning COMMAND [options]   (COMMAND --help for its options)", "",
             "training (LightningCLI; a recipe is a YAML of configs/):"]
    lines += [f"  {name:<{width}}  {text}" for name, text in TRAINING_COMMANDS.items()]
    lines += ["", "tools:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in EXTRA_COMMANDS.items()]
    lines += ["", "Quickstart: python -m plm_lightning fit --config configs/bert.yaml   (docs: README.md, docs/)"]
    return "\n".join(lines)


def unknown_command(name: str) -> str:
    """The one line for a command that does not exist, with the nearest names."""
    known = [*TRAINING_COMMANDS, *EXTRA_COMMANDS]
    near = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    return f"unknown command {name!r}; {hint}`python -m plm_lightning --help` lists the {len(known)} commands"


def answer_without_lightning(argv: list[str]) -> int | None:
    """The exit status for a command line answered from this index (no command, ``--help``, a command that does not
    exist), or None when the command must run."""
    if argv in ([], ["-h"], ["--help"]):
        print(overview())
        if not argv:
            print("plm_lightning: error: give a command (fit, inspect, ...)", file=sys.stderr)
            return 2
        return 0
    first = argv[0]
    if not first.startswith("-") and first not in TRAINING_COMMANDS and first not in EXTRA_COMMANDS:
        print(f"plm_lightning: error: {unknown_command(first)}", file=sys.stderr)
        return 2
    return None
