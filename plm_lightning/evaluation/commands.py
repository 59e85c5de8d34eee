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


def run_evaluate(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning evaluate",
                           description="EleutherAI's lm-evaluation-harness on a checkpoint of ours, no export step: "
                                       "causal and encoder-decoder objectives answer every request type, masked "
                                       "ones loglikelihood by pseudo-log-likelihood.")
    parser.add_argument("checkpoint", help="a CausalLM / Seq2SeqLM / MaskedLM / ELECTRA checkpoint of ours, or a "
                                           "transformers directory")
    parser.add_argument("--tasks", required=True, help="lm-eval task, group or tag names, comma-separated")
    parser.add_argument("--include-path", action="append", default=None,
                        help="a directory of task YAMLs of your own (repeatable); local data files through the "
                             "YAML's dataset_kwargs")
    parser.add_argument("--only-include-path", action="store_true",
                        help="index only --include-path, not lm-eval's ~15,000 task definitions (seconds faster)")
    parser.add_argument("--num-fewshot", type=int, default=None, help="demonstrations per query (default: the task's)")
    parser.add_argument("--limit", type=float, default=None, help="evaluate the first N documents of each task "
                                                                  "(below 1: that fraction)")
    parser.add_argument("--batch-size", type=int, default=16, help="requests (masked LMs: masked copies) per pass")
    parser.add_argument("--pll", default="original", choices=["original", "within_word_l2r"],
                        help="masked LMs' pseudo-log-likelihood (Salazar et al. 2020; Kauf & Ivanova 2023)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per input (default: the model's)")
    parser.add_argument("--add-bos-token", action="store_true",
                        help="causal LMs: the end-of-text token before every context (lm-eval hf's add_bos_token)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--bootstrap-iters", type=int, default=100000, help="lm-eval's bootstrap for stderr "
                                                                            "(0: none)")
    parser.add_argument("--seed", type=int, default=0, help="lm-eval's random seeds (few-shot sampling)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--out", default=None, help="where to write the results JSON (default: beside the "
                                                    "checkpoint, <name>.lm-eval.json, where export's model card "
                                                    "finds it)")
    args = parser.parse_args(argv)
    from plm_lightning.evaluation.lm_eval_run import evaluate_checkpoint, results_table
    from plm_lightning.run_directory import results_path

    if args.num_fewshot is not None and args.num_fewshot < 0:
        raise ConfigError(f"evaluate: --num-fewshot={args.num_fewshot} must be >= 0")
    if args.limit is not None and args.limit <= 0:
        raise ConfigError(f"evaluate: --limit={args.limit} must be > 0")
    if args.only_include_path and not args.include_path:
        raise ConfigError("evaluate: --only-include-path needs --include-path DIR (a directory of task YAMLs)")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise ConfigError("evaluate: --tasks names no task")
    report = evaluate_checkpoint(args.checkpoint, tasks, include_path=args.include_path,
                                 include_defaults=not args.only_include_path, num_fewshot=args.num_fewshot,
                                 limit=args.limit, batch_size=args.batch_size, pll=args.pll,
                                 max_length=args.max_length, add_bos_token=args.add_bos_token, device=args.device,
                                 bootstrap_iters=args.bootstrap_iters, seed=args.seed)
    out = Path(args.out) if args.out else results_path(args.checkpoint)
    from plm_lightning.files import atomic_write

    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1), encoding="utf-8"))
    if args.json:
        print(json.dumps(report))
        return
    print(results_table(report))
    print(f"results: {out}")
