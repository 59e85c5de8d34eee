"""The knowledge tools on a tiny GPT-2 trained on the synthetic world (the `world_gpt` fixture): each test checks an
effect the paper reports, on a model whose facts are known."""

import numpy as np
import pytest
import torch

from plm_lightning.corpus import build_world
from plm_lightning.corpus.world import WorldConfig, prompt_of
from plm_lightning.errors import ConfigError

# one xdist worker runs every test of the world-trained GPT-2 (pyproject: --dist loadgroup): the other never
# idles waiting on the `world_gpt` fixture's lock while the model trains
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("world_gpt")]


@pytest.fixture(scope="module")
def lm(world_gpt: dict):
    from plm_lightning.knowledge.lm import LanguageModel

    return LanguageModel.load(world_gpt["last"])


@pytest.fixture(scope="module")
def world(world_gpt: dict):
    return build_world(WorldConfig.parse(world_gpt["world"]))


@pytest.fixture(scope="module")
def layer(lm, world) -> int:
    """The layer ROME edits, located by causal tracing (ROME's procedure)."""
    from plm_lightning.knowledge.tracing import locate_layer

    facts = [f for f in world.facts if not f.alias_only][:5]
    return locate_layer(lm, [(prompt_of(world.relations[f.relation].templates[0]).format(f.subject), f.subject,
                              f.object) for f in facts], samples=3)


def test_the_world_recipe_learns_its_facts(lm, world) -> None:
    from plm_lightning.knowledge.probing import probe

    report = probe(lm, world.probes("train"))
    assert report.skipped == 0
    assert report.last["p@1"] >= 0.95, report.layers  # the bar; measured 0.963 (1 thread), 0.976 (2)
    assert report.layers[0]["p@1"] < 0.2  # the embeddings alone do not know the facts
    alias = probe(lm, world.probes("alias"))  # facts stated only under an alias are not answered by name
    assert alias.last["p@1"] < report.last["p@1"] - 0.3


def test_bertnesia_layer_heads_read_facts_the_logit_lens_misses(lm, world) -> None:
    """Per-layer heads trained on the frozen states (BERTnesia) read an intermediate layer's knowledge, which the
    model's own head applied there (the logit lens) mostly misses; the model is left untouched."""
    from plm_lightning.knowledge.probing import probe, train_layer_heads

    rows = world.probes("train")
    before = {k: v.clone() for k, v in lm.module.state_dict().items()}
    lens = probe(lm, rows)
    heads = train_layer_heads(lm, world.texts(), steps=150)
    trained = probe(lm, rows, heads=heads)
    assert len(heads) == len(trained.layers) == lm.num_layers + 1
    # after the first block: trained 0.70 vs lens 0.43 (P@1) on the recipe model; 0.82 vs 0.59 after the second
    assert trained.layers[1]["p@1"] > lens.layers[1]["p@1"] + 0.15, (trained.layers, lens.layers)
    assert trained.last["p@1"] >= lens.last["p@1"] - 0.1  # the last layer's head starts as the model's own
    assert 0.0 <= trained.forgotten() <= 1.0 and trained.summary()["forgotten"] == trained.forgotten()
    assert all(torch.equal(before[k], v) for k, v in lm.module.state_dict().items())


def test_causal_trace_restoring_every_state_recovers_the_clean_run(lm, world) -> None:
    from plm_lightning.knowledge.tracing import KINDS, _record, causal_trace, run_patched

    fact = next(f for f in world.facts if not f.alias_only)
    prompt = prompt_of(world.relations[fact.relation].templates[0]).format(fact.subject)
    trace = causal_trace(lm, prompt, fact.subject, fact.object, samples=3)
    assert trace.clean > 0.5 and trace.corrupted < trace.clean
    query = lm.query(prompt, fact.object, subject=fact.subject)
    noise = torch.randn(3, query.subject_span[1] - query.subject_span[0], lm.backbone.cfg.hidden_size)
    states = _record(lm, torch.tensor([query.ids]))
    every = range(len(query.ids))
    for kind in ("hidden",):
        restored = run_patched(lm, query, noise, {(kind, 0): every}, states)
        assert torch.allclose(restored[1:], restored[0].expand(3), atol=1e-5)
    last = lm.num_layers - 1  # the last layer's hidden state at the answer position restores p* exactly
    assert trace.effects["hidden"][-1, last] == pytest.approx(trace.clean - trace.corrupted, abs=1e-5)
    assert set(trace.effects) == set(KINDS)
    # before the subject, nothing was corrupted: restoring those states changes nothing
    assert np.abs(trace.effects["hidden"][: query.subject_span[0]]).max() < 1e-6


def test_rome_writes_its_optimised_value_with_a_rank_one_update_and_restores_exactly(lm, world, layer: int) -> None:
    """ROME's update makes ``W' k* = v*`` (eq. 2): after the edit, the MLP output at the subject's last token is the
    original one shifted by the optimised ``v* - W k*``. With ``v*`` optimised through the rank-one update, all 10
    edits of facts the model holds succeed (the issue's efficacy 1.0; measured 10/10 on the recipe model trained at
    1 and at 2 threads, against 6/10 with ROME's shift at the subject's token alone, issue 7's note)."""
    from plm_lightning.knowledge.edit_metrics import evaluate_edit, target_log_probs
    from plm_lightning.knowledge.editing import EditRequest
    from plm_lightning.knowledge.rome import ROME

    def known(case: dict) -> bool:  # an edit changes a fact the model holds
        prompt = [case["prompt"].format(case["subject"])]
        return target_log_probs(lm, prompt, case["target_true"])[0] > target_log_probs(lm, prompt, case["target_new"])[0]

    cases = [c for c in world.edit_requests(14, seed=1) if known(c)][:10]
    assert len(cases) == 10
    before = {k: v.clone() for k, v in lm.module.state_dict().items()}
    # contexts=0: on a 4-layer model the sampled prefixes (other facts of the world) pull the averaged key away
    # from the prompt's own (measured in the closing note of issue 7)
    editor = ROME(world.texts(), layer, contexts=0)

    def mlp_output(prompt: str, subject: str) -> torch.Tensor:
        query = lm.query(prompt, subject=subject)
        captured: list[torch.Tensor] = []
        hook = lm.ffn(layer).register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
        try:
            with torch.no_grad():
                lm.backbone(torch.tensor([query.ids]))
        finally:
            hook.remove()
        return captured[0][0, query.subject_span[1] - 1]

    results = []
    for i, case in enumerate(cases):
        request, prompt = EditRequest.from_dict(case), case["prompt"].format(case["subject"])
        unrelated = [r for r in world.probes("train") if r["sub_label"] != case["subject"]]
        if i < 3:
            delta, _ = editor.rank_one(lm, request)
            value = mlp_output(prompt, case["subject"]) + delta  # v*
        result = evaluate_edit(lm, editor, [case], unrelated, restore=False)
        if i < 3:
            written = mlp_output(prompt, case["subject"])
            assert torch.allclose(written, value, atol=1e-4 * float(value.norm()))  # W' k* = v*
        result["edit"].restore()
        results.append(result)
    assert all(r["before"]["efficacy"] == 0.0 for r in results)
    assert all(r["after"]["efficacy"] == 1.0 for r in results), [r["after"]["efficacy"] for r in results]
    assert all(r["after"]["magnitude"] > r["before"]["magnitude"] for r in results)  # every edit moves toward the new
    paraphrase = [np.mean([r[when]["paraphrase"] for r in results]) for when in ("before", "after")]
    assert paraphrase[1] >= paraphrase[0] + 0.4, paraphrase  # the edit reaches the relation's other templates
    # the accuracy on every other subject's facts (459 probes, macro-averaged over relations): the bound
    # (<= 2 points) on average, with slack for a single edit. Measured on the recipe model (block 0 located):
    # paraphrase 0 -> 0.85 and 0 -> 0.65, drop mean 0.97 / max 1.98 points (trained at 1 thread, as in CI) and
    # mean 0.83 / max 2.63 (2 threads)
    drops = [r["unrelated_p@1_before"] - r["unrelated_p@1_after"] for r in results]
    assert np.mean(drops) <= 0.02 and max(drops) <= 0.05, drops
    for r in results:
        assert len(r["changed"]) == 1 and list(r["changed"].values()) == [1]  # one matrix, rank one
    after = lm.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # restore() is exact


def test_memit_writes_twenty_facts_at_once(lm, world, layer: int) -> None:
    from plm_lightning.knowledge.edit_metrics import evaluate_edit
    from plm_lightning.knowledge.rome import MEMIT

    cases = world.edit_requests(20, seed=2)
    assert len({c["subject"] for c in cases}) == 20  # one fact per subject: they share no key
    layers = sorted({max(0, layer - 1), layer})
    before = {k: v.clone() for k, v in lm.module.state_dict().items()}
    result = evaluate_edit(lm, MEMIT(world.texts(), layers, contexts=0), cases)
    # the values optimised through the batch's updates: efficacy 1.0 and paraphrase 0.8 / 0.75 on the recipe model
    # (1 / 2 threads; MEMIT's closed-form spread of one-token targets: 0.45 and 0.25 on the smaller world, issue 7's
    # note)
    assert result["before"]["efficacy"] <= 0.1 and result["after"]["efficacy"] >= 0.9, result["after"]
    assert result["after"]["paraphrase"] >= result["before"]["paraphrase"] + 0.4, (result["before"], result["after"])
    assert len(result["changed"]) == len(layers) and all(rank <= 20 for rank in result["changed"].values())
    assert all(torch.equal(before[k], v) for k, v in lm.module.state_dict().items())


def test_constrained_finetuning_stays_in_its_ball(lm, world) -> None:
    from plm_lightning.knowledge.constrained import ConstrainedFinetune
    from plm_lightning.knowledge.editing import EditRequest

    requests = [EditRequest.from_dict(c) for c in world.edit_requests(3, seed=3)]
    edit = ConstrainedFinetune(layers=[1], delta=2e-3, steps=20).apply(lm, requests)
    try:
        deltas = edit.delta()
        assert deltas and all(name.startswith("backbone.layers.1.ffn") for name in deltas)
        largest = max(float(d.abs().max()) for d in deltas.values())
        assert 1e-3 < largest <= 2e-3 + 1e-7
    finally:
        edit.restore()
    assert all(float(d.abs().max()) == 0 for d in edit.delta().values())


def test_mend_learns_to_edit_held_out_facts_with_per_token_rank_one_updates(lm, world, tmp_path) -> None:
    from plm_lightning.knowledge.edit_metrics import evaluate_edit, update_ranks
    from plm_lightning.knowledge.editing import EditRequest
    from plm_lightning.knowledge.mend import MEND, MENDConfig, MENDNetwork, TrainConfig, default_targets, training_requests

    cases = world.edit_requests(5, seed=1)
    train = training_requests(world, {c["fact_id"] for c in cases})
    assert train and not {r["fact_id"] for r in train} & {c["fact_id"] for c in cases}  # edits it never trained on
    untrained = MEND(MENDNetwork(lm, MENDConfig(default_targets(lm))))  # U = 0: one plain gradient step
    editor, history = MEND.train(lm, train, world.texts(), config=TrainConfig(steps=150))
    # the training edit loss (50-step means) is learnt within the first window and then only fluctuates (2.4-3.2 on
    # the fixture), so learning is judged on held-out edits against the untrained editor below
    assert [h["step"] for h in history] == [50, 100, 150]
    assert all(np.isfinite(h["edit_loss"]) and np.isfinite(h["locality_kl"]) for h in history)
    before = {k: v.clone() for k, v in lm.module.state_dict().items()}
    plain = [evaluate_edit(lm, untrained, [c]) for c in cases]
    results = [evaluate_edit(lm, editor, [c]) for c in cases]
    assert np.mean([r["after"]["efficacy"] for r in plain]) <= 0.2
    assert np.mean([r["after"]["efficacy"] for r in results]) >= 0.8  # measured 1.0 (issue 7's note)
    assert np.mean([r["after"]["paraphrase"] for r in results]) >= 0.6
    assert all(torch.equal(before[k], v) for k, v in lm.module.state_dict().items())  # restore() is exact
    # the update of each matrix is a sum of one rank-one term per token of the edit, on the last 3 blocks' MLPs only
    request = EditRequest.from_dict(cases[0])
    edit = editor.apply(lm, request)
    try:
        tokens = edit.info["tokens"]
        ranks = update_ranks(edit.delta(), tol=1e-4)
        assert set(ranks) == set(editor.network.config.targets) and all(1 <= r <= tokens for r in ranks.values())
        assert all(".layers.1." in n or ".layers.2." in n or ".layers.3." in n for n in ranks)
        delta = edit.delta()
    finally:
        edit.restore()
    editor.save(tmp_path / "mend.pt")  # a saved editor makes the same update
    again = MEND.load(tmp_path / "mend.pt", lm).apply(lm, request)
    try:
        assert all(torch.allclose(again.delta()[k], delta[k], atol=1e-6) for k in delta)
    finally:
        again.restore()
    with pytest.raises(ConfigError, match="no such editor file"):
        MEND.load(tmp_path / "missing.pt", lm)


def test_suppressing_knowledge_neurons_hurts_more_than_random_neurons(lm, world) -> None:
    from plm_lightning.knowledge.neurons import knowledge_neurons, neuron_effects
    from plm_lightning.knowledge.probing import probe_queries

    rows = world.probes("train", "train")
    suppress, random_suppress = [], []
    for fid in sorted({r["fact_id"] for r in rows})[:6]:
        queries, _ = probe_queries(lm, [r for r in rows if r["fact_id"] == fid])
        neurons = knowledge_neurons(lm, queries, steps=20, threshold=0.2, share=0.5)
        if neurons:
            effects = neuron_effects(lm, queries, neurons, random_sets=3)
            suppress.append(effects["suppress"])
            random_suppress.append(effects["random_suppress"])
    assert len(suppress) >= 3
    assert np.mean(suppress) < np.mean(random_suppress) - 0.1


def test_tracin_beats_random_and_bm25_fails_on_alias_only_facts(world_gpt: dict, world) -> None:
    from plm_lightning.knowledge.attribution import trace_world
    from plm_lightning.knowledge.lm import LanguageModel

    lms = [LanguageModel.load(p) for p in world_gpt["checkpoints"][-2:]]
    rows = trace_world(lms, world, ["tracin", "bm25"], facts=16, alias_facts=8)
    get = {(r["facts"], r["setting"], r["method"]): r for r in rows}
    # recall@10 (of each fact's several documents) against the random ranking, over the whole corpus (953
    # documents) and in the reranking setup; measured on the recipe model trained at 1 / 2 threads: full 0.078 / 0.203
    # vs 0.0 (MRR 0.18 / 0.33 vs 0.008), rerank 0.203 / 0.367 vs 0.062
    for setting in ("full", "rerank"):
        tracin, random = get[("named", setting, "tracin")], get[("named", setting, "random")]
        assert tracin["recall@10"] > random["recall@10"] + 0.05, (setting, tracin, random)
    assert get[("named", "full", "tracin")]["mrr"] > 5 * get[("named", "full", "random")]["mrr"]
    assert get[("named", "full", "bm25")]["recall@10"] > 0.8  # the subject's name finds its documents
    assert get[("alias", "full", "bm25")]["recall@10"] < 0.3  # without the name, it cannot


def test_bad_knowledge_inputs_fail_in_one_line(lm) -> None:
    from plm_lightning.knowledge.editing import EditRequest
    from plm_lightning.knowledge.rome import ROME

    with pytest.raises(ConfigError, match="not in the prompt"):
        EditRequest.from_dict({"prompt": "Someone was born in", "subject": "Nobody", "target_new": "X"})
    with pytest.raises(ConfigError, match="layer 9 is out of range"):
        ROME(["text"], layer=9).apply(lm, EditRequest("{} was born in", "A B", "C"))
    with pytest.raises(ConfigError, match="empty"):
        ROME(["text"]).apply(lm, [])
    with pytest.raises(ConfigError, match="does not occur"):
        lm.query("Someone was born in", subject="Nobody")
