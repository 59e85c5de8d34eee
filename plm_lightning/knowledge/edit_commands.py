"""CLI subcommands of the knowledge tools that attribute or change a model's facts: ``neurons``, ``trace-facts`` and
``edit``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from plm_lightning.errors import CommandParser, ConfigError
from plm_lightning.files import read_user_text
from plm_lightning.knowledge.commands import _emit, _layers, _read_jsonl, _world_or_fail


def _auto_layers(lm, world, name: str) -> list[int]:  # noqa: ANN001
    """ROME's procedure: the layer with the largest MLP indirect effect at the last subject token (causal tracing over
    ten facts); MEMIT takes it and the layer before it."""
    from plm_lightning.corpus.world import prompt_of
    from plm_lightning.knowledge.tracing import locate_layer

    facts = [f for f in world.facts if not f.alias_only][:10]
    layer = locate_layer(lm, [(prompt_of(world.relations[f.relation].templates[0]).format(f.subject), f.subject,
                               f.object) for f in facts])
    return list(range(max(0, layer - 1), layer + 1)) if name == "memit" else [layer]


def build_editor(name: str, texts: list[str], layers: list[int] | None, args: argparse.Namespace):  # noqa: ANN201
    from plm_lightning.knowledge.constrained import ConstrainedFinetune
    from plm_lightning.knowledge.rome import MEMIT, ROME

    if name == "rome":
        if layers is not None and len(layers) != 1:
            raise ConfigError(f"edit: ROME edits one layer; --layers {layers} names {len(layers)}")
        return ROME(texts, layers[0] if layers else None, contexts=args.contexts, seed=args.seed,
                    through_update=not args.paper_values)
    if name == "memit":
        return MEMIT(texts, layers, contexts=args.contexts, mom2_weight=args.mom2_weight, seed=args.seed,
                     through_update=not args.paper_values)
    if name == "ft":
        return ConstrainedFinetune(layers, delta=args.delta, steps=args.steps)
    if name == "kn":
        from plm_lightning.knowledge.neurons import KnowledgeNeuronEditor

        return KnowledgeNeuronEditor(args.kn_strength)
    raise ConfigError(f"edit: --editor {name!r} is not one of rome, memit, ft, kn, mend")


def _mend_editor(lm, args: argparse.Namespace, world, cases: list[dict], layers: list[int] | None):  # noqa: ANN001, ANN202
    """A trained MEND editor: loaded from --mend-net, or trained on the world's requests for every fact not being
    edited, then saved to --mend-save when given."""
    from plm_lightning.knowledge.mend import MEND, TrainConfig, training_requests

    if args.mend_net:
        return MEND.load(args.mend_net, lm)
    if world is None:
        raise ConfigError("edit: --editor mend needs a trained editor (--mend-net FILE) or --world to train one on")
    train = training_requests(world, {c["fact_id"] for c in cases})
    if not train:
        raise ConfigError("edit: MEND has no requests left to train on (every fact of the world is being edited)")
    editor, history = MEND.train(lm, train, world.texts(), layers, TrainConfig(steps=args.mend_steps, seed=args.seed))
    print(f"MEND trained on {len(train)} requests for {args.mend_steps} steps: edit loss "
          f"{history[0]['edit_loss']:.3f} -> {history[-1]['edit_loss']:.3f}, locality KL "
          f"{history[0]['locality_kl']:.3f} -> {history[-1]['locality_kl']:.3f}")
    if args.mend_save:
        editor.save(args.mend_save)
    return editor


def run_edit(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning edit",
                           description="Edit facts in a causal LM (ROME, MEMIT, constrained fine-tuning, knowledge "
                                       "neurons, MEND) and score the edit CounterFact-style.")
    parser.add_argument("checkpoint", help="a CausalLM checkpoint of ours or a transformers directory")
    parser.add_argument("--editor", default="rome", choices=["rome", "memit", "ft", "kn", "mend"],
                        help="ROME, MEMIT, constrained fine-tuning, knowledge-neuron editing or MEND")
    parser.add_argument("--world", default=None, help="take requests and unrelated facts from this world spec")
    parser.add_argument("--requests", default=None, help="a CounterFact-style JSON list (or JSONL) of edit requests")
    parser.add_argument("--corpus", default=None, help="text for the key statistics E[kk^T] (default: the world's)")
    parser.add_argument("--count", type=int, default=10, help="edits to make (from the world's requests)")
    parser.add_argument("--curve", default=None, help="comma-separated batch sizes, e.g. 1,10,100: score each")
    parser.add_argument("--layers", default=None,
                        help="comma-separated layers to edit; default with --world: located by causal tracing (the "
                             "largest MLP effect at the last subject token; MEMIT adds the layer before), otherwise "
                             "ROME's relative depth (17 of 48)")
    parser.add_argument("--contexts", type=int, default=10,
                        help="ROME / MEMIT: context prefixes sampled from the model to average keys and targets over "
                             "(ROME: 10; 0 = the bare prompt only)")
    parser.add_argument("--paper-values", action="store_true",
                        help="ROME / MEMIT: find v* (z_i) as the papers do, as a shift at the subject's last token "
                             "alone, instead of through the update that will be written (the default)")
    parser.add_argument("--mom2-weight", type=float, default=100.0,
                        help="MEMIT's lambda (15,000 for GPT-J's 16,384-dimensional keys; 100 for the 512 of the tiny "
                             "world models)")
    parser.add_argument("--delta", type=float, default=5e-3, help="constrained fine-tuning: the l-inf radius")
    parser.add_argument("--steps", type=int, default=50, help="constrained fine-tuning: optimisation steps")
    parser.add_argument("--kn-strength", type=float, default=1.0, help="knowledge-neuron editing: lambda")
    parser.add_argument("--mend-net", default=None, help="MEND: a trained editor file (default: train one on --world)")
    parser.add_argument("--mend-steps", type=int, default=600, help="MEND: training steps (4 edits each)")
    parser.add_argument("--mend-save", default=None, help="MEND: write the trained editor to this file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=None, help="write the edited model (the largest batch) to this checkpoint")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    from plm_lightning.knowledge.edit_metrics import evaluate_edit
    from plm_lightning.knowledge.lm import LanguageModel

    if (args.world is None) == (args.requests is None):
        raise ConfigError("edit: give exactly one of --world SPEC or --requests FILE")
    lm = LanguageModel.load(args.checkpoint)
    layers = _layers(args.layers)
    for layer in layers or []:
        if not 0 <= layer < lm.num_layers:
            raise ConfigError(f"--layers: layer {layer} is out of range; this model has layers 0..{lm.num_layers - 1}")
    unrelated, texts, world = None, None, None
    if args.world:
        from plm_lightning.corpus.world import world_from_spec

        world = world_from_spec(args.world)
        cases, texts = world.edit_requests(args.count, seed=args.seed), world.texts()
        edited = {c["fact_id"] for c in cases}
        subjects = {c["subject"] for c in cases}
        rows = [r for r in world.probes("train") if r["fact_id"] not in edited]
        unrelated = {"other_subjects": [r for r in rows if r["sub_label"] not in subjects],
                     "same_subject_other_relations": [r for r in rows if r["sub_label"] in subjects]}
    else:
        text = read_user_text(args.requests, "--requests")
        if text.lstrip().startswith("["):
            try:
                cases = json.loads(text)
            except json.JSONDecodeError as err:
                raise ConfigError(f"--requests: '{args.requests}' is not JSON ({err.msg}, line {err.lineno})") from err
        else:
            cases = _read_jsonl(args.requests, "--requests", text)
        cases = cases[: args.count]
    if args.corpus:
        from plm_lightning.corpus.sources import load_documents

        texts = load_documents(args.corpus)[0]
    if texts is None and args.editor in ("rome", "memit"):
        raise ConfigError(f"edit: --editor {args.editor} needs --corpus (or --world) for its key statistics")
    if layers is None and args.world and args.editor in ("rome", "memit", "ft"):
        layers = _auto_layers(lm, world, args.editor)
    if args.editor == "mend":
        editor = _mend_editor(lm, args, world, cases, layers)
    else:
        editor = build_editor(args.editor, texts or [], layers, args)
    sizes = sorted({min(int(n), len(cases)) for n in args.curve.split(",")}) if args.curve else [len(cases)]
    if not cases or not sizes or min(sizes) < 1:
        raise ConfigError("edit: the batch of edit requests is empty")
    results = []
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        result = evaluate_edit(lm, editor, cases[:n], unrelated, restore=not (last and args.save))
        if "edit" in result:
            _save_edited(args.checkpoint, lm, args.save)
            result.pop("edit").restore()
        results.append(result)
    payload = {"checkpoint": args.checkpoint, "results": results}
    _emit(payload, args.out)
    if args.json:
        print(json.dumps(payload))
        return
    fmt = lambda v: "  -  " if v is None else f"{v:.3f}"  # noqa: E731
    print("edits  editor            ES     PS     PS(held-out)  NS     S      fluency  (before the edit: ES, fluency)")
    for r in results:
        a, b = r["after"], r["before"]
        print(f"{r['cases']:>5}  {r['editor']['editor']:<16}  {fmt(a['efficacy'])}  {fmt(a['paraphrase'])}  "
              f"{fmt(a['heldout_paraphrase'])}         {fmt(a['neighborhood'])}  {fmt(a['score'])}  {fmt(a['fluency'])}"
              f"    ({fmt(b['efficacy'])}, {fmt(b['fluency'])})")
        for name in r["p@1_before"]:
            print(f"       P@1 of {name.replace('_', ' ')}: {fmt(r['p@1_before'][name])} -> {fmt(r['p@1_after'][name])}")
        print("       changed (rank): " + ", ".join(f"{k} ({v})" for k, v in r["changed"].items()))


def _save_edited(source: str, lm, out: str) -> None:  # noqa: ANN001
    """The source checkpoint with the edited weights, written atomically."""
    import torch

    from plm_lightning.interop.hf_files import is_hf_directory, load_checkpoint
    from plm_lightning.objectives.loading import hf_to_checkpoint

    ckpt = hf_to_checkpoint(source) if is_hf_directory(source) else load_checkpoint(source)
    ckpt["state_dict"] = {k: v.detach().cpu().clone() for k, v in lm.module.state_dict().items()}
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    torch.save(ckpt, tmp)
    tmp.replace(target)


def run_neurons(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning neurons",
                           description="Knowledge neurons: integrated-gradients attribution, refinement, suppress/amplify.")
    parser.add_argument("checkpoint", help="a CausalLM / MaskedLM checkpoint of ours or a transformers directory")
    parser.add_argument("--world", default="world", help="world spec whose facts to attribute")
    parser.add_argument("--facts", type=int, default=20, help="facts to analyse (the first N stated under their name)")
    parser.add_argument("--steps", type=int, default=20, help="Riemann steps of integrated gradients (m)")
    parser.add_argument("--threshold", type=float, default=0.2, help="coarse threshold t (x the largest attribution)")
    parser.add_argument("--share", type=float, default=0.7, help="refinement: kept by more than this share of prompts")
    parser.add_argument("--random-sets", type=int, default=5, help="random neuron sets to compare against")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not 0 < args.threshold < 1 or not 0 <= args.share < 1:
        raise ConfigError(f"neurons: --threshold {args.threshold} must lie in (0, 1) and --share {args.share} in [0, 1)")
    from plm_lightning.knowledge.lm import LanguageModel
    from plm_lightning.knowledge.neurons import knowledge_neurons, neuron_effects
    from plm_lightning.knowledge.probing import probe_queries

    lm = LanguageModel.load(args.checkpoint)
    world = _world_or_fail(args.world, "neurons")
    rows = world.probes("train", "train")
    by_fact: dict[int, list[dict]] = {}
    for row in rows:
        by_fact.setdefault(row["fact_id"], []).append(row)
    results = []
    for fid in list(by_fact)[: args.facts]:
        queries, _ = probe_queries(lm, by_fact[fid])
        neurons = knowledge_neurons(lm, queries, args.steps, args.threshold, args.share)
        effects = neuron_effects(lm, queries, neurons, args.random_sets)
        results.append({"fact_id": fid, **effects, "neurons": sorted(neurons)})
    found = [r for r in results if r["neurons"]]
    keys = ("suppress", "amplify", "random_suppress", "random_amplify")
    summary = {"facts": len(results), "facts_with_neurons": len(found),
               "mean_neurons": float(sum(len(r["neurons"]) for r in results) / max(1, len(results))),
               **{k: (sum(r[k] for r in found) / len(found) if found else None) for k in keys}}
    payload = {"checkpoint": args.checkpoint, "summary": summary, "facts": results}
    _emit(payload, args.out)
    if args.json:
        print(json.dumps(payload))
        return
    print(f"{summary['facts']} facts, {summary['facts_with_neurons']} with refined neurons "
          f"({summary['mean_neurons']:.1f} per fact on average)")
    if found:
        print("relative change of P(correct)   knowledge neurons   random neurons (same size and layers)")
        print(f"  suppressed (x0)               {summary['suppress']:+.3f}             {summary['random_suppress']:+.3f}")
        print(f"  amplified  (x2)               {summary['amplify']:+.3f}             {summary['random_amplify']:+.3f}")


def run_trace_facts(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning trace-facts",
                           description="Rank training documents for facts: TracIn, embedding similarity and BM25.")
    parser.add_argument("checkpoints", nargs="+", help="checkpoints of one run (TracIn sums over them; the last one "
                                                       "serves the embedding ranker)")
    parser.add_argument("--world", default="world", help="world spec: the corpus the checkpoints were trained on")
    parser.add_argument("--facts", type=int, default=50, help="facts stated under their name to trace")
    parser.add_argument("--alias-facts", type=int, default=20, help="alias-only facts to trace")
    parser.add_argument("--methods", default="tracin,embedding,bm25")
    parser.add_argument("--distractors", type=int, default=100, help="reranking setup: random documents per query")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from plm_lightning.knowledge.attribution import METHODS, trace_world

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(f"trace-facts: --methods {args.methods!r}: use some of {', '.join(METHODS)}")
    from plm_lightning.knowledge.lm import LanguageModel

    lms = [LanguageModel.load(c) for c in args.checkpoints]
    world = _world_or_fail(args.world, "trace-facts")
    table = trace_world(lms, world, methods, args.facts, args.alias_facts, args.distractors, args.seed)
    payload = {"checkpoints": args.checkpoints, "results": table}
    _emit(payload, args.out)
    if args.json:
        print(json.dumps(payload))
        return
    print("facts   setting   method      MRR    R@1    R@10   R@25")
    for row in table:
        print(f"{row['facts']:<7} {row['setting']:<9} {row['method']:<10} {row['mrr']:.3f}  {row['recall@1']:.3f}  "
              f"{row['recall@10']:.3f}  {row['recall@25']:.3f}")


