"""The synthetic knowledge world: the ground truth the knowledge tools are measured against."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus import RELATIONS, WorldConfig, build_world, prompt_of
from plm_lightning.corpus.sources import load_documents, source_fingerprint
from plm_lightning.errors import ConfigError


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), subjects=st.integers(2, 30), alias=st.sampled_from([0.0, 0.2, 0.5]),
       mentions=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_documents_state_exactly_their_facts(seed: int, subjects: int, alias: float, mentions: list[int]) -> None:
    world = build_world(WorldConfig(seed=seed, subjects=subjects, objects=4, mentions=tuple(mentions),
                                    alias_fraction=alias))
    facts = {f.id: f for f in world.facts}
    assert len(world.facts) == subjects * len(RELATIONS)
    assert len(set(world.subjects)) == subjects
    docs_of = world.fact_documents()
    for fact in world.facts:  # each fact is stated by exactly `mentions` documents (its frequency bucket)
        assert len(docs_of[fact.id]) == fact.mentions
        assert fact.mentions in mentions
    paraphrases = [t.replace("{s}", "").replace("{o}", "") for r in RELATIONS for t in r.paraphrases]
    for doc in world.documents:
        sentences = [s for s in doc.text.split(". ") if s]
        assert len(sentences) == len(doc.fact_ids) or (doc.alias and not doc.fact_ids)
        for fid in doc.fact_ids:
            fact = facts[fid]
            assert fact.object in doc.text
            if fact.alias_only:  # stated without the query's words: the alias instead of the subject's name
                assert doc.alias and world.aliases[fact.subject].split()[-1] in doc.text
                assert fact.subject not in doc.text
            else:
                assert fact.subject in doc.text
        assert not any(p.strip(" .") and p.strip(" .") in doc.text for p in paraphrases if len(p.strip(" .")) > 12)


def test_world_is_deterministic_and_seeded() -> None:
    a, b = build_world(WorldConfig(seed=1, subjects=10)), build_world(WorldConfig(seed=1, subjects=10))
    c = build_world(WorldConfig(seed=2, subjects=10))
    assert a.texts() == b.texts() and a.texts() != c.texts()


def test_probes_and_edit_requests() -> None:
    world = build_world(WorldConfig(seed=0, subjects=40))
    train, alias = world.probes("train"), world.probes("alias")
    assert len(train) + len(alias) == len(world.facts) and alias
    assert all(r["template"].rstrip(".").endswith("[Y]") and "[X]" in r["template"] for r in train)
    assert len(world.probes("train", "train")) == 3 * len(train)
    paraphrased = {r["template"] for r in world.probes("train", "paraphrase")}
    assert not paraphrased & {r["template"] for r in world.probes("train", "train")}
    facts = {f.id: f for f in world.facts}
    for case in world.edit_requests(20):
        fact = facts[case["fact_id"]]
        assert not fact.alias_only and case["subject"] == fact.subject and case["target_true"] == fact.object
        assert case["target_new"] != fact.object and case["target_new"] in world.objects[
            next(r.object_type for r in RELATIONS if r.id == fact.relation)]
        # CounterFact's new object holds for another subject of the relation (an object the model read in that role)
        assert any(f.relation == fact.relation and f.object == case["target_new"] and not f.alias_only
                   for f in world.facts)
        assert case["attribute_prompts"]
        assert case["prompt"].format(case["subject"]) + f" {fact.object}." in {
            t.format(s=fact.subject, o=fact.object) for r in RELATIONS for t in r.templates}
        for prompt in case["neighborhood_prompts"]:  # other subjects that hold the true object
            other = prompt[: -len(case["prompt"].format("").rstrip()) - 0].strip()
            assert any(f.subject == other and f.relation == fact.relation and f.object == fact.object
                       for f in world.facts)
        assert all(case["subject"] in p for p in case["paraphrase_prompts"])


def test_world_as_a_data_source_and_its_files(tmp_path) -> None:
    docs, fingerprint = load_documents("world:seed=3,subjects=12")
    assert docs == build_world(WorldConfig(seed=3, subjects=12)).texts()
    assert fingerprint.startswith("world:seed=3,subjects=12") and source_fingerprint("world:seed=3,subjects=12") == fingerprint
    files = build_world(WorldConfig(seed=3, subjects=12)).save(tmp_path)
    probes = [json.loads(line) for line in open(files["probes.jsonl"])]
    assert {"relation", "template", "sub_label", "obj_label"} <= set(probes[0])
    assert json.loads(open(files["counterfact.json"]).read())[0]["target_new"]


@pytest.mark.parametrize("spec, words", [("world:seeds=3", "seeds"), ("world:subjects=x", "not a number"),
                                         ("world:mentions=0", "mentions"), ("world:subjects=1", "subjects")])
def test_bad_world_specs(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        WorldConfig.parse(spec)


def test_templates_end_in_the_object() -> None:
    assert prompt_of("{s} was born in {o}.") == "{} was born in"
    with pytest.raises(ConfigError, match="must end with its object"):
        prompt_of("{o} is where {s} was born.")
