"""CLI subcommands of the knowledge tools that read a model: ``world``, ``probe`` and ``causal-trace`` (the ones that
attribute or change it, ``neurons``, ``trace-facts`` and ``edit``, are in ``edit_commands``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from plm_lightning.errors import CommandParser, ConfigError
from plm_lightning.files import read_user_text


def _read_jsonl(path: str, what: str, text: str | None = None) -> list[dict]:
    """The JSON objects of the JSON-lines file ``path`` (its ``text`` when already read)."""
    rows = []
    for n, line in enumerate((read_user_text(path, what) if text is None else text).splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ConfigError(f"{what}: '{path}' line {n} is not JSON ({err.msg})") from err
    return rows


def _emit(payload: dict, out: str | None) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(payload, indent=1), encoding="utf-8")


def run_world(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning world",
                           description="Write the synthetic knowledge world: corpus, facts, LAMA probes, CounterFact requests.")
    parser.add_argument("out_dir")
    parser.add_argument("--world", default="world", help="world spec: world or world:seed=3,subjects=200,...")
    args = parser.parse_args(argv)
    from plm_lightning.corpus.world import world_from_spec

    world = world_from_spec(args.world)
    files = world.save(args.out_dir)
    print(f"{world.config.spec}: {len(world.facts)} facts, {len(world.documents)} documents -> "
          + ", ".join(Path(f).name for f in files.values()) + f" in {args.out_dir}")


def run_probe(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning probe",
                           description="LAMA-style probing at every layer of a causal or masked LM (ELECTRA: its generator), "
                                       "or at the answer slot of an encoder-decoder (T5 sentinel, BART mask) or XLNet.")
    parser.add_argument("checkpoint", help="a CausalLM / MaskedLM / ELECTRA / Seq2SeqLM / PermutationLM checkpoint of "
                                           "ours or a transformers directory")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--world", help="probe the facts of this world spec (e.g. world)")
    source.add_argument("--probes", help="a LAMA-format JSONL file (relation, template, sub_label, obj_label)")
    parser.add_argument("--split", default="train", choices=["train", "alias", "all"], help="world facts to ask")
    parser.add_argument("--templates", default="canonical", choices=["canonical", "train", "paraphrase"])
    parser.add_argument("--reader", default="lens", choices=["lens", "trained", "both"],
                        help="the model's own head at each layer (logit lens), per-layer heads trained on the frozen "
                             "model (BERTnesia), or both")
    parser.add_argument("--objects", default="one-token", choices=["one-token", "first-token"],
                        help="probes with one-token objects only (LAMA), or every probe ranked by its object's first "
                             "token (tokenizers that split the names)")
    parser.add_argument("--head-steps", type=int, default=300, help="training steps of the per-layer heads")
    parser.add_argument("--corpus", default=None, help="text to train the per-layer heads on (a .txt/.jsonl; default "
                                                       "the world's documents)")
    parser.add_argument("--classifier", default=None, metavar="RELATION",
                        help="with --world: linear and MDL (online code) probes per layer for the object of RELATION "
                             "(e.g. P19), read at the subject's last token")
    parser.add_argument("--memories", type=int, default=None, metavar="LAYER",
                        help="FFN key-value memories of LAYER: top-triggering prefixes and value distributions")
    parser.add_argument("--keys", default="0,1,2,3,4", help="with --memories: comma-separated key indices")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    from plm_lightning.knowledge.cloze import load_reader
    from plm_lightning.knowledge.probing import probe, train_layer_heads

    lm = load_reader(args.checkpoint)
    if (args.classifier or args.memories is not None or args.reader != "lens") and not lm.layerwise:
        raise ConfigError(f"probe: '{args.checkpoint}' is an encoder-decoder or XLNet model, asked through its own "
                          "head at the answer slot: only --reader lens applies (no --classifier, --memories or "
                          "per-layer heads)")
    if args.classifier or args.memories is not None:
        _probe_representations(lm, args)
        return
    if args.world:
        from plm_lightning.corpus.world import world_from_spec

        world = world_from_spec(args.world)
        rows, texts = world.probes(args.split, args.templates), world.texts()
    else:
        if not args.probes:
            raise ConfigError("probe: give --world SPEC or --probes FILE.jsonl")
        rows, texts = _read_jsonl(args.probes, "--probes"), None
    reports = []
    if args.reader in ("lens", "both"):
        reports.append(probe(lm, rows, first_token=args.objects == "first-token"))
    if args.reader in ("trained", "both"):
        if args.corpus:
            from plm_lightning.corpus.sources import load_documents

            texts = load_documents(args.corpus)[0]
        if texts is None:
            raise ConfigError("probe: --reader trained needs --corpus (or --world) to train the per-layer heads on")
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("training per-layer heads", total=args.head_steps)
            heads = train_layer_heads(lm, texts, args.head_steps, progress=lambda _: bar.advance(task))
        reports.append(probe(lm, rows, heads, first_token=args.objects == "first-token"))
    payload = {"checkpoint": args.checkpoint, "readers": [r.summary() for r in reports]}
    _emit(payload, args.out)
    if args.json:
        print(json.dumps(payload))
        return
    for report in reports:
        s = report.summary()
        print(f"[{s['reader']}] {s['probes']} probes ({s['skipped_multi_token']} with multi-token objects set aside), "
              f"macro over relations")
        print("layer   P@1    P@10   MRR")
        for row in s["layers"]:
            print(f"{row['layer']:>5}  {row['p@1']:.3f}  {row['p@10']:.3f}  {row['mrr']:.3f}")
        print(f"answered at an intermediate layer but not the last: {s['forgotten']:.3f}")
    sys.stdout.flush()

def _layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise ConfigError(f"--layers {text!r} must be comma-separated layer indices, e.g. 1,2") from err

def _world_or_fail(spec: str | None, command: str):  # noqa: ANN202
    if spec is None:
        raise ConfigError(f"{command}: give --world SPEC (the facts and documents with known ground truth)")
    from plm_lightning.corpus.world import world_from_spec

    return world_from_spec(spec)

def run_causal_trace(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning causal-trace",
                           description="ROME's causal tracing: indirect effects of hidden states, MLP and attention outputs.")
    parser.add_argument("checkpoint", help="a CausalLM checkpoint of ours or a transformers directory")
    parser.add_argument("--prompt", default=None, help="a factual prompt, e.g. 'Solren Vexgor was born in'")
    parser.add_argument("--subject", default=None, help="the subject inside --prompt")
    parser.add_argument("--answer", default=None, help="the object to trace (default: the model's top prediction)")
    parser.add_argument("--world", default=None, help="instead of --prompt: average over facts of this world spec")
    parser.add_argument("--facts", type=int, default=20, help="with --world: facts to trace and average by token role")
    parser.add_argument("--samples", type=int, default=10, help="noise draws per state (ROME: 10)")
    parser.add_argument("--noise", type=float, default=3.0, help="noise std as a multiple of the subject-embedding std")
    parser.add_argument("--window", type=int, default=1, help="layers restored together for MLP/attention (ROME: 10)")
    parser.add_argument("--png", default=None, help="write the heat maps to this PNG")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from plm_lightning.knowledge.lm import LanguageModel
    from plm_lightning.knowledge.tracing import ROLES, average_by_role, causal_trace, plot_roles, plot_trace, subject_noise_scale

    lm = LanguageModel.load(args.checkpoint)
    if args.world is None:
        if not args.prompt or not args.subject:
            raise ConfigError("causal-trace: give --prompt and --subject (or --world SPEC to average over its facts)")
        scale = subject_noise_scale(lm, [args.subject], args.noise)
        trace = causal_trace(lm, args.prompt, args.subject, args.answer, scale, args.samples, args.window)
        payload = {"tokens": trace.tokens, "subject_span": trace.subject_span, "answer": trace.answer,
                   "clean": trace.clean, "corrupted": trace.corrupted,
                   "effects": {k: v.tolist() for k, v in trace.effects.items()}}
        if args.png:
            plot_trace(trace, args.png)
    else:
        from plm_lightning.corpus.world import prompt_of, world_from_spec

        world = world_from_spec(args.world)
        scale = subject_noise_scale(lm, world.subjects, args.noise)
        facts = [f for f in world.facts if not f.alias_only][: args.facts]
        traces = [causal_trace(lm, prompt_of(world.relations[f.relation].templates[0]).format(f.subject), f.subject,
                               f.object, scale, args.samples, args.window) for f in facts]
        payload = {"facts": len(traces), "roles": list(ROLES), "clean": float(sum(t.clean for t in traces) / len(traces)),
                   "corrupted": float(sum(t.corrupted for t in traces) / len(traces)),
                   "effects": {k: average_by_role(traces, k).tolist() for k in traces[0].effects}}
        if args.png:
            plot_roles(payload, args.png)
    _emit(payload, args.out)
    if args.json:
        print(json.dumps(payload))
        return
    rows = payload["tokens"] if "tokens" in payload else payload["roles"]
    print(f"p* (clean) = {payload['clean']:.3f}, p_ (subject corrupted) = {payload['corrupted']:.3f}; indirect effects:")
    for kind, grid in payload["effects"].items():
        print(f"[{kind}] " + " ".join(f"L{i:<5}" for i in range(len(grid[0]))))
        for label, values in zip(rows, grid):
            print(f"  {label.strip()[:22]:<22} " + " ".join(f"{v:+.3f}" for v in values))
    if args.png:
        print(f"heat map written to {args.png}")

def _probe_representations(lm, args: argparse.Namespace) -> None:  # noqa: ANN001
    from plm_lightning.knowledge import representations as rep

    if args.classifier:
        if not args.world:
            raise ConfigError("probe --classifier needs --world (the facts give the labels)")
        from plm_lightning.corpus.world import world_from_spec

        queries, positions, labels, classes = rep.world_property(lm, world_from_spec(args.world), args.classifier)
        features = rep.layer_features(lm, queries, positions)
        accuracy = rep.classifier_probe(features, labels)
        mdl = [rep.online_code_length(f, labels, classes) for f in features]
        payload = {"relation": args.classifier, "examples": len(labels), "classes": classes,
                   "layers": [{"layer": i, "accuracy": a, **m} for i, (a, m) in enumerate(zip(accuracy, mdl))]}
        _emit(payload, args.out)
        if args.json:
            print(json.dumps(payload))
            return
        print(f"{args.classifier}: {len(labels)} subjects, {classes} objects (chance {1 / classes:.3f})")
        print("layer  accuracy  online bits  compression")
        for row in payload["layers"]:
            print(f"{row['layer']:>5}  {row['accuracy']:.3f}     {row['online_bits']:>9.1f}  {row['compression']:.2f}")
        return
    if args.world:
        from plm_lightning.corpus.world import world_from_spec

        texts = world_from_spec(args.world).texts()
    elif args.corpus:
        from plm_lightning.corpus.sources import load_documents

        texts = load_documents(args.corpus)[0]
    else:
        raise ConfigError("probe --memories needs --world or --corpus (the prefixes come from its text)")
    keys = _layers(args.keys) or [0]
    lm.block(args.memories)
    memories = rep.ffn_memories(lm, args.memories, texts, keys)
    _emit({"memories": memories}, args.out)
    if args.json:
        print(json.dumps({"memories": memories}))
        return
    for m in memories:
        print(f"layer {m['layer']} key {m['key']}: value's top tokens "
              + ", ".join(f"{t.strip()}:{p:.2f}" for t, p in m["value_top_tokens"])
              + f"; agreement with the next token {m['agreement']:.2f}")
        for p in m["prefixes"][:5]:
            print(f"    {p['coefficient']:+.2f}  ...{p['text']!s:<60} -> {p['next'].strip()}")
