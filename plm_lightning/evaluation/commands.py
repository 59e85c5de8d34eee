"""The evaluation commands: ``acceptability`` (BLiMP-style minimal pairs) and ``prompt`` (zero/few-shot). The arena
calls them as functions, as the CLI does."""

from __future__ import annotations

import json
from pathlib import Path

from plm_lightning.errors import CommandParser, ConfigError


def run_acceptability(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning acceptability",
                           description="Minimal-pair acceptability (BLiMP): does the model score the acceptable sentence of "
                                       "each pair higher (log-likelihood for causal LMs, pseudo-log-likelihood for masked "
                                       "LMs)? Accuracy per phenomenon.")
    parser.add_argument("checkpoint", help="a CausalLM / MaskedLM checkpoint of ours or a transformers directory")
    parser.add_argument("--pairs", action="append", default=None,
                        help="a BLiMP-format JSONL file (sentence_good, sentence_bad; repeatable); default: the "
                             "built-in template pairs")
    parser.add_argument("--builtin", type=int, default=100, help="built-in pairs per phenomenon (without --pairs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the built-in pairs")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    from plm_lightning.evaluation import evaluate_pairs, read_pairs, template_pairs
    from plm_lightning.knowledge.lm import LanguageModel
    from plm_lightning.progress import progress_bar

    if args.builtin < 1:
        raise ConfigError(f"acceptability: --builtin={args.builtin} must be >= 1")
    pairs = [p for path in args.pairs for p in read_pairs(path)] if args.pairs else template_pairs(args.builtin,
                                                                                                 args.seed)
    lm = LanguageModel.load(args.checkpoint)
    report = evaluate_pairs(lm, pairs, progress_bar(len(pairs), "scoring pairs")).summary()
    report["checkpoint"] = args.checkpoint
    if args.out:
        from plm_lightning.files import atomic_write

        atomic_write(Path(args.out), lambda tmp: tmp.write_text(json.dumps(report, indent=1), encoding="utf-8"))
    if args.json:
        print(json.dumps(report))
        return
    print(f"{report['pairs']} pairs, scored by {report['scoring']}")
    for name, row in report["phenomena"].items():
        print(f"{name:<32}{row['pairs']:>6}  accuracy {row['accuracy']:.3f}")
    print(f"{'all':<32}{report['pairs']:>6}  accuracy {report['accuracy']:.3f} (macro {report['macro_accuracy']:.3f})")


def run_prompt(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning prompt",
                           description="Zero/few-shot prompting: multiple-choice and classification by candidate "
                                       "log-likelihood, generation scored by exact match and ROUGE-L.")
    parser.add_argument("checkpoint", help="a CausalLM or Seq2SeqLM checkpoint of ours, or a transformers directory")
    parser.add_argument("--task", required=True, help="offline:code_or_prose|continuation|next_sentence|cloze_spans, "
                                                      "choices:FILE.jsonl or generation:FILE.jsonl")
    parser.add_argument("--shots", type=int, default=0, help="solved training examples before each query")
    parser.add_argument("--seed", type=int, default=0, help="seed of the demonstrations")
    parser.add_argument("--split", default="validation", choices=["validation", "test"])
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N examples")
    parser.add_argument("--normalize", default="none", choices=["none", "token", "char"],
                        help="length normalisation of candidate log-likelihoods")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="generation tasks: tokens to generate")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--out", default=None, help="also write the summary and every prediction as JSON")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"prompt: --limit={args.limit} must be >= 1")
    from plm_lightning.evaluation.prompting import PromptScorer, demonstrations, evaluate_prompts, load_prompt_task
    from plm_lightning.prediction import load_generator
    from plm_lightning.progress import progress_bar

    splits = load_prompt_task(args.task)  # bad task specs and shot counts fail before the model loads
    demonstrations(splits["train"], args.shots, args.seed)
    count = min(len(splits[args.split]), args.limit or len(splits[args.split]))
    scorer = PromptScorer(*load_generator(args.checkpoint, "prompt"))
    report = evaluate_prompts(scorer, args.task, args.shots, args.seed, args.split, args.limit, args.normalize,
                              args.max_new_tokens, progress_bar(count, "prompting"))
    summary = report.summary()
    if args.out:
        from plm_lightning.files import atomic_write

        payload = {**summary, "predictions": report.predictions}
        atomic_write(Path(args.out), lambda tmp: tmp.write_text(json.dumps(payload, indent=1), encoding="utf-8"))
    if args.json:
        print(json.dumps(summary))
        return
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in report.metrics.items())
    print(f"{args.task}, {args.shots}-shot (seed {args.seed}), {report.examples} {args.split} examples: {metrics}")
