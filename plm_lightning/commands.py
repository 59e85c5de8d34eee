"""The CLI's extra subcommands: ``inspect``, ``export``, ``import``, ``predict CHECKPOINT PROMPTS`` (generation, or
neighbour and analogy queries of static embeddings; ``predict --config ...`` remains LightningCLI's), ``sweep``,
and ``arena``; the data commands (``prepare``, ``pack``, ``optimize``) and the knowledge tools' are re-exported from
``data.commands`` and ``knowledge``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from plm_lightning.data_commands import run_optimize, run_pack, run_prepare  # noqa: F401 - dispatched by name
from plm_lightning.errors import CommandParser, ConfigError
from plm_lightning.evaluation.commands import run_acceptability, run_evaluate, run_prompt  # noqa: F401 - by name
from plm_lightning.files import writable_path
from plm_lightning.finetune.commands import run_glue  # noqa: F401 - dispatched by name
from plm_lightning.knowledge.commands import run_causal_trace, run_probe, run_world  # noqa: F401 - dispatched by name
from plm_lightning.knowledge.edit_commands import run_edit, run_neurons, run_trace_facts  # noqa: F401


def run_export(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning export", description="Write a Hugging Face transformers directory.")
    parser.add_argument("checkpoint", help="a plm_lightning checkpoint (.ckpt)")
    parser.add_argument("out_dir", help="directory to write config.json, model.safetensors and tokenizer files to")
    parser.add_argument("--part", choices=["discriminator", "generator"], default="discriminator",
                        help="ELECTRA: the discriminator (default, for downstream use) or the generator")
    parser.add_argument("--license", default=None, help="the model card's license field (a Hub license id, e.g. "
                        "apache-2.0); default: not stated")
    parser.add_argument("--push-to-hub", default=None, metavar="REPO",
                        help="then upload the directory to this Hub model repository (OWNER/NAME; created if missing)")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    args = parser.parse_args(argv)
    from plm_lightning.interop import export_checkpoint

    static = _static_embeddings(args.checkpoint)
    if args.push_to_hub:
        from plm_lightning.interop.hub import check_repo_id

        check_repo_id(args.push_to_hub)  # before anything is written
        if static is not None:
            raise ConfigError("export --push-to-hub uploads a transformers directory; word vectors are one text file")
    if static is not None:  # word2vec / fastText / GloVe: the word2vec text format
        out = Path(args.out_dir)
        out = out / "vectors.txt" if out.is_dir() or args.out_dir.endswith(("/", "\\")) else out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(static.word2vec_text(), encoding="utf-8")
        tmp.replace(out)
        print(f"exported {args.checkpoint} ({type(static).__name__}, {len(static.vocabulary)} words) in the word2vec "
              f"text format to {out}")
        return
    arch = export_checkpoint(args.checkpoint, args.out_dir, args.part, args.license)
    print(f"exported {args.checkpoint} as {arch} to {args.out_dir}")
    if args.push_to_hub:
        from plm_lightning.interop.hub import push_to_hub

        print(f"pushed to the Hub: {push_to_hub(args.out_dir, args.push_to_hub, private=args.private)}")


def run_import(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning import", description="Convert a transformers directory to a checkpoint.")
    parser.add_argument("hf_dir", help="a local transformers model directory (config.json + weights)")
    parser.add_argument("out_ckpt", help="checkpoint file to write")
    parser.add_argument("--generator", default=None, help="ELECTRA: the ElectraForMaskedLM generator directory that "
                        "goes with an ElectraForPreTraining discriminator")
    args = parser.parse_args(argv)
    from plm_lightning.objectives.loading import import_hf

    info = import_hf(args.hf_dir, args.out_ckpt, args.generator)
    print(f"imported {args.hf_dir} ({info['family']}) into {info['checkpoint']}; continue pretraining with "
          f"--model.init_from {info['checkpoint']}")


def run_inspect(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning inspect", description="Show what a recipe's data pipeline does to text.")
    parser.add_argument("--config", action="append", help="recipe YAML (repeatable)")
    parser.add_argument("--batches", type=int, default=1, help="batches to measure")
    parser.add_argument("--json", action="store_true", help="print corruption statistics as one JSON object")
    parser.add_argument("--progress", type=float, default=0.0,
                        help="show the sample at this training progress, in epochs (staged recipes: ERNIE, ERNIE 2.0)")
    parser.add_argument("--png", type=Path, default=None,
                        help="draw the attention mask with the loss positions and the text to this PNG file")
    parser.add_argument("--all-recipes", action="store_true", help="with --png: one grid of every recipe's mask")
    parser.add_argument("--recipes", default=None, help="with --all-recipes: a comma-separated subset (e.g. bert,t5)")
    parser.add_argument("--configs-dir", type=Path, default=Path("configs"), help="where --all-recipes finds recipes")
    parser.add_argument("--max-documents", type=int, default=None,
                        help="with --all-recipes: build each recipe from the first N documents of its text (quicker)")
    parser.add_argument("--width", type=int, default=None, help="tokens shown (text: 24, picture: 32)")
    args, rest = parser.parse_known_args(argv)
    if args.batches < 1:
        raise ConfigError(f"--batches={args.batches} must be >= 1")
    if args.progress < 0:
        raise ConfigError(f"--progress={args.progress} must be >= 0")
    if args.width is not None and args.width < 2:
        raise ConfigError(f"--width={args.width} must be >= 2")
    if args.all_recipes or args.png:
        _inspect_pictures(args, rest)
        return
    if not args.config:
        raise ConfigError("plm_lightning inspect: give --config RECIPE.yaml (or --all-recipes --png OUT.png)")
    from plm_lightning.inspection import build_datamodule, recipe_views

    datamodule, objective = build_datamodule(args.config, rest)
    statistics, view = recipe_views(datamodule, args.width or 24, args.progress)
    if args.json:
        print(json.dumps(statistics(datamodule, objective, args.batches)))
    else:
        view(datamodule, objective, sys.stdout)


def _inspect_pictures(args: argparse.Namespace, overrides: list[str]) -> None:
    """``inspect --png``: one recipe's picture, or with ``--all-recipes`` the grid of every recipe."""
    from plm_lightning.inspection import picture

    if args.png is None:
        raise ConfigError("plm_lightning inspect: --all-recipes draws a grid: give --png OUT.png")
    if args.png.suffix.lower() != ".png":
        raise ConfigError(f"plm_lightning inspect: --png {args.png} must name a .png file")
    if args.json:
        raise ConfigError("plm_lightning inspect: --png and --json are separate views; give one")
    writable_path(args.png, "--png").parent.mkdir(parents=True, exist_ok=True)
    width = args.width or 32
    if args.all_recipes:
        if args.config:
            raise ConfigError("plm_lightning inspect: --all-recipes draws every recipe of --configs-dir; drop --config")
        names = [n.strip() for n in args.recipes.split(",") if n.strip()] if args.recipes else None
        if args.max_documents is not None and args.max_documents < 1:
            raise ConfigError(f"plm_lightning inspect: --max-documents={args.max_documents} must be >= 1")
        drawn, skipped = picture.draw_all_recipes(picture.recipe_configs(args.configs_dir, names), args.png,
                                                  overrides, width, log=lambda m: print(m, file=sys.stderr),
                                                  max_documents=args.max_documents)
        print(f"drew {len(drawn)} recipes to {args.png}" + (f" ({len(skipped)} not drawn: {', '.join(skipped)})"
                                                            if skipped else ""))
        return
    if not args.config:
        raise ConfigError("plm_lightning inspect: --png draws a recipe: give --config RECIPE.yaml (or --all-recipes)")
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

    datamodule, objective = build_datamodule(args.config, overrides)
    drawn = picture.objective_picture(datamodule, objective, width, args.progress, Path(args.config[-1]).stem)
    picture.draw_picture(drawn, args.png)
    print(f"drew {drawn.title}: {len(drawn.tokens)} tokens, {int(drawn.loss.sum())} carrying loss, to {args.png}")


def run_predict(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning predict",
                           description="Generate from a file of prompts: continue them (GPT-2) or fill their sentinels (T5).",
                           epilog="Lightning's own batch prediction over a recipe's data stays available as "
                                  "`predict --config configs/<recipe>.yaml --ckpt_path CKPT`.")
    parser.add_argument("checkpoint", help="a CausalLM or Seq2SeqLM checkpoint of ours, or a transformers directory")
    parser.add_argument("prompts", help="a UTF-8 text file, one prompt per line (- reads standard input)")
    parser.add_argument("--strategy", default="greedy", help="greedy, sample or beam")
    # hyphenated like every other command's options; the underscore spellings of earlier releases still work
    parser.add_argument("--max-new-tokens", "--max_new_tokens", dest="max_new_tokens", type=int, default=32,
                        help="tokens to generate at most")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--top-k", "--top_k", dest="top_k", type=int, default=0,
                        help="sample among the k most probable tokens (0 = all)")
    parser.add_argument("--top-p", "--top_p", dest="top_p", type=float, default=1.0,
                        help="nucleus sampling mass (1 = all)")
    parser.add_argument("--num-beams", "--num_beams", dest="num_beams", type=int, default=4, help="beam search width")
    parser.add_argument("--length-penalty", "--length_penalty", dest="length_penalty", type=float, default=1.0,
                        help="beam search: scores divided by length ** this")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: a random one)")
    parser.add_argument("--no-cache", "--no_cache", dest="no_cache", action="store_true",
                        help="recompute every step (the cache's reference)")
    parser.add_argument("--json", action="store_true", help="one JSON object per prompt")
    parser.add_argument("--neighbours", type=int, default=10, help="static embeddings: answers per query")
    args = parser.parse_args(argv)
    static = _static_embeddings(args.checkpoint)
    if static is not None:
        _answer_queries(static, args.prompts, args.neighbours, args.json)
        return
    from plm_lightning.generation import GenerationConfig
    from plm_lightning.prediction import predict_file

    config = GenerationConfig(args.strategy, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                              args.num_beams, args.length_penalty, not args.no_cache, args.seed)
    for row in predict_file(args.checkpoint, args.prompts, config):
        if args.json:
            print(json.dumps(row, ensure_ascii=False))
        else:
            text = row.get("filled", row["output"])
            print(f"{row['prompt']}\t{text if text else '(no new text: the model ended the prompt at once)'}")


def _static_embeddings(path: str):  # noqa: ANN202
    """The static-embedding module of a checkpoint (word2vec, fastText, GloVe), or None for any other checkpoint."""
    from plm_lightning.checkpoint_format import CHECKPOINT_KEY, WORD_VECTOR_OBJECTIVES
    from plm_lightning.interop.hf_files import is_hf_directory, load_checkpoint

    if is_hf_directory(path):
        return None
    checkpoint = load_checkpoint(path)
    if checkpoint.get(CHECKPOINT_KEY, {}).get("objective") not in WORD_VECTOR_OBJECTIVES:
        return None
    from plm_lightning.objectives.static_queries import load_static_embeddings  # Lightning: only for these

    return load_static_embeddings(checkpoint)


def _answer_queries(model, queries: str, k: int, as_json: bool) -> None:  # noqa: ANN001
    """One query per line: a word (its nearest neighbours) or ``a - b + c`` (the analogy's answers)."""
    from plm_lightning.objectives.static_queries import answer_query

    path = Path(queries)
    if not path.is_file():
        raise ConfigError(f"predict: no such query file '{queries}' (one word or 'a - b + c' analogy per line)")
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = answer_query(model, line.strip(), k)
        if as_json:
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(f"{row['query']}\t" + (row["error"] if "error" in row else
                                          " ".join(f"{w}:{s:.3f}" for w, s in row["neighbours"])))


def run_sweep(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning sweep",
                           description="Run a W&B sweep spec with no W&B server: suggestions and hyperband from W&B's "
                                       "open-source sweeps engine, each trial a subprocess; re-run to continue.",
                           epilog="Any further --key value arguments are added to every trial's command, e.g. "
                                  "`sweep sweeps/gpt2.yaml --count 4 --trainer.max_steps 50` for a quick sweep "
                                  "(not a key the spec sweeps).")
    parser.add_argument("spec", help="a W&B sweep YAML (sweeps/*.yaml)")
    parser.add_argument("--count", type=int, required=True, help="trials in the whole sweep (earlier ones count)")
    parser.add_argument("--parallel", type=int, default=1, help="trials at a time")
    parser.add_argument("--dir", default=None, help="where the sweep's state, trials and results go "
                                                    "(default: sweeps_runs/<spec name>)")
    args, overrides = parser.parse_known_args(argv)
    from plm_lightning.sweeping import SweepController, best_trial, load_spec, write_report

    spec = load_spec(args.spec)
    directory = Path(args.dir or Path("sweeps_runs") / Path(args.spec).stem)
    controller = SweepController(spec, directory, args.parallel, overrides=overrides)
    try:
        trials = controller.run(args.count)
    except KeyboardInterrupt:
        print(f"sweep interrupted: state saved in {directory}; run the same command to continue", file=sys.stderr)
        sys.exit(130)
    files = write_report(trials, spec, directory)
    metric, goal = spec["metric"]["name"], spec["metric"].get("goal", "minimize")
    print(Path(files["markdown"]).read_text(encoding="utf-8"))
    best = best_trial(trials, metric, goal)
    if best is None:
        raise ConfigError(f"sweep: no trial logged {metric}; see {directory}/trials/*/output.log")
    print(f"results: {files['csv']}, {files['markdown']}, {files['plot']}")


def run_arena(argv: list[str]) -> None:
    from plm_lightning.arena import (
        DEFAULT_RECIPES,
        DOWNSTREAM,
        EXECUTORS,
        PROBES,
        PROMPTS,
        Arena,
        ArenaConfig,
        ExecutorSettings,
        read_results,
        write_report,
    )
    from plm_lightning.arena.executor import parse_options
    from plm_lightning.arena.runner import split_recipes

    parser = CommandParser(prog="plm_lightning arena",
                           description="Train recipes at one backbone size and several FLOPs budgets, score each on the "
                                       "same downstream tasks, and report which claims of the literature reproduce where "
                                       "the models beat random weights.")
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                        help="comma-separated recipe names; a variant: NAME[key=value;...], e.g. "
                             "continuum[data.bidirectional_fraction=0.25]")
    parser.add_argument("--budget-flops", default="1e13", help="training FLOPs per run; a comma list draws curves")
    parser.add_argument("--dir", type=Path, default=Path("arena_runs"), help="where runs and results go")
    parser.add_argument("--downstream", default="code-or-prose,cloze-spans",
                        help=f"fine-tuning tasks, of {', '.join(DOWNSTREAM)}; probes, of {', '.join(PROBES)} "
                             f"(needs --data world); prompted tasks, of {', '.join(PROMPTS)} (causal and "
                             "encoder-decoder recipes)")
    parser.add_argument("--prompt-shots", type=int, default=0, help="demonstrations before each prompted query")
    parser.add_argument("--prompt-limit", type=int, default=None,
                        help="prompt only the first N validation examples of each prompted task (default: all)")
    parser.add_argument("--prompt-normalize", default="none", choices=["none", "token", "char"],
                        help="a prompted candidate's log-likelihood: summed (none), per token, or per character "
                             "(acc_norm)")
    parser.add_argument("--data", default=None, help="pretraining text of every recipe (a data.source: a file, "
                                                     "directory, dataset or world[:key=value,...]); default: each "
                                                     "recipe's own (the embedded corpus)")
    for name, default in (("hidden-size", 128), ("num-heads", 4), ("num-layers", 4), ("intermediate-size", 512),
                          ("seq-len", 128), ("batch-size", 32), ("finetune-steps", 200), ("evaluations", 4),
                          ("val-batches", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--seeds", type=int, default=1,
                        help="runs per recipe and budget, each with its own pretraining and fine-tuning seed; the "
                             "report gives mean ± sd and judges claims by two standard errors (3 or more)")
    parser.add_argument("--random-init", default="",
                        help="comma-separated recipes also fine-tuned from random weights (the control arm)")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu",
                        help="where every run trains: cpu (the recipes' fp32) or gpu (one CUDA device, bf16-mixed)")
    parser.add_argument("--finetune-lr", type=float, default=None,
                        help="peak learning rate of every fine-tuning run (default: each task YAML's, set for "
                             "base-size models)")
    parser.add_argument("--executor", default="local",
                        help=f"where the runs go, one job each: {', '.join(EXECUTORS)} (submitit; local: processes of "
                             "this machine, slurm: sbatch jobs, debug: this process)")
    parser.add_argument("--max-parallel", type=int, default=1, help="runs at once (local cores are shared among them)")
    parser.add_argument("--timeout-min", type=int, default=24 * 60, help="a job's time limit in minutes")
    parser.add_argument("--cpus-per-task", type=int, default=None,
                        help="CPU cores per job (default: local cores / --max-parallel; SLURM's default)")
    parser.add_argument("--executor-option", action="append", default=[],
                        help="more submitit parameters, name=value (e.g. slurm_partition=dev); repeatable")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: rebuild the report from --dir's results.csv alone (an arena stopped "
                             "part-way, or results copied from elsewhere)")
    parser.add_argument("--page", type=Path, default=None,
                        help="also write the report as this Markdown page, its figures in a folder of its name")
    parser.add_argument("--configs-dir", default="configs", help="where the recipes are")
    args = parser.parse_args(argv)
    try:
        budgets = tuple(float(b) for b in args.budget_flops.split(",") if b.strip())
    except ValueError as err:
        raise ConfigError(f"arena: --budget-flops {args.budget_flops!r} must be numbers such as 1e13,1e14") from err
    config = ArenaConfig(
        recipes=split_recipes(args.recipes), budgets=budgets,
        downstream=tuple(t.strip() for t in args.downstream.split(",") if t.strip()), hidden_size=args.hidden_size,
        num_heads=args.num_heads, num_layers=args.num_layers, intermediate_size=args.intermediate_size,
        seq_len=args.seq_len, batch_size=args.batch_size, finetune_steps=args.finetune_steps,
        evaluations=args.evaluations, val_batches=args.val_batches, configs_dir=args.configs_dir, data=args.data,
        prompt_shots=args.prompt_shots, prompt_limit=args.prompt_limit,
        prompt_normalize=args.prompt_normalize, seeds=args.seeds,
        random_init=split_recipes(args.random_init), accelerator=args.accelerator, finetune_lr=args.finetune_lr)
    settings = ExecutorSettings(args.executor, args.max_parallel, args.timeout_min, args.cpus_per_task,
                                1 if args.accelerator == "gpu" else 0, parse_options(args.executor_option))
    if args.report_only:
        results = read_results(args.dir / "results.csv", config)
    else:
        results = Arena(config, args.dir, log=lambda m: print(m, file=sys.stderr, flush=True)).run(settings)
    ran = [a for a in argv if a != "--report-only"]  # the command that trains the runs reported
    files = write_report(results, config, args.dir, command=shlex.join(["python", "-m", "plm_lightning", "arena", *ran]))
    if args.page is not None:
        files["page"] = publish_page(files, args.page)
    print(files["report"].read_text(encoding="utf-8"))
    print(f"results: {', '.join(str(p) for p in files.values())}")


def publish_page(files: dict[str, Path], page: Path) -> Path:
    """The arena's ``report.md`` as ``page``, its figures and ``results.csv`` copied to ``<page's stem>/`` beside it."""
    import shutil

    figures = page.parent / page.stem
    figures.mkdir(parents=True, exist_ok=True)
    text = files["report"].read_text(encoding="utf-8")
    for key in ("loss_plot", "downstream_plot", "csv"):
        shutil.copyfile(files[key], figures / files[key].name)
        text = text.replace(f"]({files[key].name})", f"]({page.stem}/{files[key].name})")
    page.write_text(text, encoding="utf-8")
    return page
