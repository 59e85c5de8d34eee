"""The synthetic-world tables of issue 7: per-layer P@1 (logit lens), knowledge-neuron effects, fact-tracing MRR per
method and editing scores per editor, for checkpoints trained with configs/knowledge/*.yaml. Run by hand; the
figures go to the issue note.

    python -m plm_lightning fit --config configs/knowledge/gpt2-world.yaml      # and bert-world.yaml
    python -m benchmarks.knowledge --gpt runs/gpt2-world/version_0/checkpoints/last.ckpt \
        --bert runs/bert-world/version_0/checkpoints/last.ckpt \
        --gpt-checkpoints runs/gpt2-world/version_0/checkpoints/step0*.ckpt
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from plm_lightning.corpus import build_world
from plm_lightning.corpus.world import WorldConfig, prompt_of
from plm_lightning.knowledge.attribution import trace_world
from plm_lightning.knowledge.constrained import ConstrainedFinetune
from plm_lightning.knowledge.edit_metrics import evaluate_edit
from plm_lightning.knowledge.editing import TargetConfig
from plm_lightning.knowledge.lm import LanguageModel
from plm_lightning.knowledge.neurons import KnowledgeNeuronEditor, knowledge_neurons, neuron_effects
from plm_lightning.knowledge.probing import probe, probe_queries
from plm_lightning.knowledge.rome import MEMIT, ROME
from plm_lightning.knowledge.tracing import locate_layer


def probing_table(path: str, world) -> dict:  # noqa: ANN001
    lm = LanguageModel.load(path)
    out = {}
    for split, templates in (("train", "canonical"), ("train", "train"), ("train", "paraphrase"), ("alias", "canonical")):
        report = probe(lm, world.probes(split, templates))
        out[f"{split}/{templates}"] = {"p@1 per layer": [round(x["p@1"], 3) for x in report.layers],
                                       "p@10 last": round(report.last["p@10"], 3), "mrr last": round(report.last["mrr"], 3),
                                       "forgotten": round(report.forgotten(), 3),
                                       "p@1 by mentions": {k: round(v["p@1"], 3) for k, v in report.by("mentions").items()}}
    return out


def neuron_table(lm: LanguageModel, world, facts: int) -> dict:  # noqa: ANN001
    rows = world.probes("train", "train")
    effects = []
    for fid in sorted({r["fact_id"] for r in rows})[:facts]:
        queries, _ = probe_queries(lm, [r for r in rows if r["fact_id"] == fid])
        neurons = knowledge_neurons(lm, queries, 20, 0.2, 0.5)
        if neurons:
            effects.append(neuron_effects(lm, queries, neurons, 5))
    keys = ("neurons", "suppress", "amplify", "random_suppress", "random_amplify")
    return {"facts": facts, "with_neurons": len(effects),
            **{k: round(float(np.mean([e[k] for e in effects])), 3) for k in keys if effects}}


def editing_table(lm: LanguageModel, world, layer: int) -> list[dict]:  # noqa: ANN001
    texts = world.texts()
    rows = world.probes("train")
    table = []

    def score(name: str, editor, cases: list[dict]) -> None:  # noqa: ANN001
        subjects = {c["subject"] for c in cases}
        edited = {c["fact_id"] for c in cases}
        groups = {"other_subjects": [r for r in rows if r["sub_label"] not in subjects],
                  "same_subject": [r for r in rows if r["sub_label"] in subjects and r["fact_id"] not in edited]}
        start = time.perf_counter()
        r = evaluate_edit(lm, editor, cases, groups)
        a = r["after"]
        table.append({"editor": name, "edits": len(cases), **{k: round(a[k], 3) for k in
                      ("efficacy", "paraphrase", "heldout_paraphrase", "neighborhood", "score", "fluency")},
                      "fluency_before": round(r["before"]["fluency"], 3),
                      "p@1 other subjects": (f"{r['p@1_before']['other_subjects']:.3f} -> "
                                             f"{r['p@1_after']['other_subjects']:.3f}"
                                             if "other_subjects" in r["p@1_before"] else None),  # 100 edits: none left
                      "p@1 same subject": (f"{r['p@1_before']['same_subject']:.3f} -> {r['p@1_after']['same_subject']:.3f}"
                                           if "same_subject" in r["p@1_before"] else None),
                      "changed": r["changed"], "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(table[-1]), flush=True)

    single = world.edit_requests(10, seed=1)
    for name, make in (("ROME (10 prefixes)", lambda: ROME(texts, layer)),
                       ("ROME (bare prompt)", lambda: ROME(texts, layer, contexts=0)),
                       ("ROME (bare prompt, v* at the subject only)",
                        lambda: ROME(texts, layer, contexts=0, through_update=False)),
                       ("ROME (original keys)", lambda: ROME(texts, layer, contexts=10, consistent_keys=False)),
                       ("constrained FT", lambda: ConstrainedFinetune([layer])),
                       ("knowledge neurons", lambda: KnowledgeNeuronEditor())):
        for case in single:  # one edit at a time, restored in between
            score(name, make(), [case])
        edits = [t for t in table if t["editor"] == name]
        table[-len(edits):] = [{"editor": name, "edits": "1 x 10",
                                **{k: round(float(np.mean([e[k] for e in edits])), 3) for k in
                                   ("efficacy", "paraphrase", "heldout_paraphrase", "neighborhood", "score", "fluency")}}]
    layers = sorted({max(0, layer - 1), layer})
    for n in (1, 10, 20, 100):
        score("MEMIT (bare prompt)", MEMIT(texts, layers, contexts=0), world.edit_requests(n, seed=2))
    score("MEMIT (bare prompt, stop at NLL 1)", MEMIT(texts, layers, contexts=0, target=TargetConfig(stop_loss=1.0)),
          world.edit_requests(20, seed=2))
    score("MEMIT (bare prompt, paper values)", MEMIT(texts, layers, contexts=0, through_update=False),
          world.edit_requests(20, seed=2))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpt", required=True)
    parser.add_argument("--bert", default=None)
    parser.add_argument("--gpt-checkpoints", nargs="*", default=[])
    parser.add_argument("--world", default="world")
    parser.add_argument("--neuron-facts", type=int, default=20)
    parser.add_argument("--trace-facts", type=int, default=20)
    args = parser.parse_args()
    world = build_world(WorldConfig.parse(args.world))
    results = {"probing": {"gpt2": probing_table(args.gpt, world)}}
    if args.bert:
        results["probing"]["bert"] = probing_table(args.bert, world)
    print(json.dumps(results["probing"], indent=1), flush=True)
    lm = LanguageModel.load(args.gpt)
    facts = [f for f in world.facts if not f.alias_only][:10]
    layer = locate_layer(lm, [(prompt_of(world.relations[f.relation].templates[0]).format(f.subject), f.subject, f.object)
                              for f in facts])
    results["located_layer"] = layer
    results["neurons"] = {"gpt2": neuron_table(lm, world, args.neuron_facts)}
    if args.bert:
        results["neurons"]["bert"] = neuron_table(LanguageModel.load(args.bert), world, args.neuron_facts)
    print(json.dumps(results["neurons"]), flush=True)
    if args.gpt_checkpoints:
        lms = [LanguageModel.load(p) for p in args.gpt_checkpoints]
        results["attribution"] = trace_world(lms, world, ["tracin", "embedding", "bm25"], args.trace_facts,
                                             args.trace_facts)
        for row in results["attribution"]:
            print(json.dumps(row), flush=True)
    results["editing"] = editing_table(lm, world, layer)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
