"""ERNIE (Tsinghua; Zhang et al. 2019): the knowledge graph and entity linking, TransE, the dEA's alignment noise,
the knowledge-fusion layers and the recipe's refusals."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus.graph import EntityLinker, KnowledgeGraph, graph_from_world, load_graph
from plm_lightning.corpus.transe import TransE, TransEConfig, corrupt, link_prediction, train_transe
from plm_lightning.corpus.world import WorldConfig, build_world
from plm_lightning.data.corruption import row_keys
from plm_lightning.data.corruption.entity_alignment import (
    NO_ENTITY,
    AlignmentNoise,
    candidate_entities,
    corrupt_alignments,
)
from plm_lightning.errors import ConfigError
from plm_lightning.nn.fusion import KnowledgeFusionLayer
from tests.conftest import ROOT, cli_error

GRAPH = KnowledgeGraph.from_triples([("New York City", "in", "United States"), ("New York", "in", "United States"),
                                     ("Paris", "capital of", "France")], {"NYC": "New York City"})


def test_linking_takes_the_longest_name_at_word_boundaries_and_aliases():
    linker = EntityLinker(GRAPH)
    text = "New York City, NYC, New Yorker and Parisian Paris."
    found = [(text[m.start:m.end], GRAPH.entities[m.entity]) for m in linker.link(text)]
    assert found == [("New York City", "New York City"), ("NYC", "New York City"), ("Paris", "Paris")]
    # ERNIE aligns an entity with the first token of its mention
    offsets = [(0, 3), (4, 8), (9, 13), (13, 14), (15, 18)]
    aligned = linker.align(offsets, linker.link(text[:18]))
    assert aligned.tolist() == [0, -1, -1, -1, 0]


def test_world_graph_links_every_stated_fact():
    world = build_world(WorldConfig(subjects=6))
    graph = graph_from_world(world)
    assert len(graph.triples) == len(world.facts) and graph.num_entities == len({*world.subjects, *(
        f.object for f in world.facts)})
    linker = EntityLinker(graph)
    for doc in world.documents:
        names = {graph.entities[m.entity] for m in linker.link(doc.text)}
        stated = {world.facts[i].object for i in doc.fact_ids}
        assert stated <= names  # every object a document states is linked
        if doc.alias:  # "The Crimson Mason ..." links to the subject it names
            assert names & set(world.aliases)


def test_a_saved_world_loads_as_its_graph(tmp_path):
    world = build_world(WorldConfig(subjects=6))
    files = world.save(tmp_path)
    loaded = load_graph(files["graph.tsv"], files["graph_aliases.tsv"])
    expected = graph_from_world(world)
    assert loaded.entities == expected.entities and loaded.surfaces == expected.surfaces
    assert np.array_equal(loaded.triples, expected.triples)


def test_graph_files_load_and_bad_lines_are_named(tmp_path):
    triples, aliases = tmp_path / "kg.tsv", tmp_path / "aliases.tsv"
    GRAPH.save(triples, aliases)
    loaded = load_graph(triples, aliases)
    assert loaded.entities == GRAPH.entities and loaded.surfaces == GRAPH.surfaces
    assert np.array_equal(loaded.triples, GRAPH.triples)
    bad = tmp_path / "bad.tsv"
    bad.write_text("# comment\nParis\tcapital of\tFrance\nBerlin capital of Germany\n")
    with pytest.raises(ConfigError, match="line 3 of .* has 1 tab-separated field; each line must be head"):
        load_graph(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_graph(tmp_path / "missing.tsv")
    aliases.write_text("Atlantis\tthe lost city\n")
    with pytest.raises(ConfigError, match="'Atlantis' .* is not an entity of the graph"):
        load_graph(triples, aliases)


@pytest.mark.slow
def test_bad_triples_file_is_a_one_line_cli_error(tmp_path, capsys):
    bad = tmp_path / "kg.tsv"
    bad.write_text("Paris\tcapital of\n")
    line = cli_error(["fit", "--config", str(ROOT / "configs" / "ernie-thu.yaml"), "--data.graph", str(bad)], capsys)
    assert "data.graph: line 1" in line and "head<TAB>relation<TAB>tail" in line


def test_transe_ranks_the_true_entity_of_its_graph_first():
    graph = graph_from_world(build_world(WorldConfig(subjects=24)))
    untrained = link_prediction(TransE(graph.num_entities, len(graph.relations)), graph)
    trained = train_transe(graph, TransEConfig(epochs=200))
    scores = link_prediction(trained, graph)
    assert untrained["mrr"] < 0.2 and scores["mrr"] > 0.9 and scores["hits@10"] == 1.0, (untrained, scores)
    norms = trained.entities.detach().norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)  # Algorithm 1 keeps entities on the sphere


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 50))
def test_transe_negatives_change_exactly_one_end(seed, entities):
    triples = torch.randint(entities, (64, 3), generator=torch.Generator().manual_seed(seed))
    triples[:, 1] = triples[:, 1] % 3
    negative = corrupt(triples, entities, torch.Generator().manual_seed(seed + 1))
    assert torch.equal(negative[:, 1], triples[:, 1])
    assert not ((negative[:, 0] != triples[:, 0]) & (negative[:, 2] != triples[:, 2])).any()
    assert negative.min() >= 0 and negative.max() < entities


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 40), st.floats(0, 0.5), st.floats(0, 0.5))
def test_alignment_noise_touches_only_alignments(seed, entities, replace, mask):
    rng = np.random.default_rng(seed)
    ids = np.where(rng.random((4, 30)) < 0.3, rng.integers(0, entities, (4, 30)), NO_ENTITY)
    keys = rng.integers(0, 2**63, 4, dtype=np.uint64)
    seen, noised = corrupt_alignments(ids, keys, entities, AlignmentNoise(replace, mask))
    again, _ = corrupt_alignments(ids, keys, entities, AlignmentNoise(replace, mask))
    assert np.array_equal(seen, again)  # a pure function of the keys
    unaligned = ids == NO_ENTITY
    assert (seen[unaligned] == NO_ENTITY).all() and not noised[unaligned].any()
    assert np.array_equal(seen[~noised], ids[~noised])
    replaced = noised & (seen != NO_ENTITY)
    assert (seen[replaced] != ids[replaced]).all() and (seen[replaced] < entities).all()


def test_alignment_noise_rates_and_candidates():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (400, 64))
    keys = row_keys(1234, np.zeros(400, dtype=np.int64), np.arange(400))  # as the collator seeds rows
    seen, noised = corrupt_alignments(ids, keys, 50)
    assert abs((noised & (seen == NO_ENTITY)).mean() - 0.15) < 0.01 and abs((noised & (seen >= 0)).mean() - 0.05) < 0.01
    candidates, labels = candidate_entities(np.array([[7, -1, 3, 7], [-1, -1, -1, -1]]))
    assert candidates.tolist() == [[3, 7], [-1, -1]] and labels.tolist() == [[1, -100, 0, 1], [-100] * 4]
    with pytest.raises(ConfigError, match="sum to at most 1"):
        AlignmentNoise(0.6, 0.6)


def test_fusion_sees_only_the_aligned_entities():
    torch.manual_seed(0)
    layer = KnowledgeFusionLayer(32, 20, 4, 4, 64, dropout=0.0, attention_dropout=0.0).eval()
    tokens, entities = torch.randn(2, 9, 32), torch.randn(2, 9, 20)
    attention = torch.ones(2, 9, dtype=torch.long)
    aligned = torch.zeros(2, 9, dtype=torch.bool)
    aligned[0, [2, 5]] = True  # row 1 has no entity at all
    out, ent = layer(tokens, entities, attention, aligned)
    other = entities.clone()
    other[~aligned] = torch.randn(int((~aligned).sum()), 20)  # what lies at unaligned positions is never read
    out2, ent2 = layer(tokens, other, attention, aligned)
    assert torch.equal(out, out2) and torch.equal(ent, ent2)
    assert (ent[~aligned] == 0).all() and torch.isfinite(out).all()
    moved = entities.clone()
    moved[0, 5] += 1.0  # within a layer an entity reaches the aligned tokens (itself, and 2 through entity attention)
    out3, _ = layer(tokens, moved, attention, aligned)
    changed = (out3 - out).abs().amax(-1) > 0
    assert changed[0].nonzero().flatten().tolist() == [2, 5] and not changed[1].any()
    # a row without entities is eq. 4: the entity weights take no part
    out[1].sum().backward()
    assert layer.fuse_entity.weight.grad is None or (layer.fuse_entity.weight.grad == 0).all()


def test_entity_table_stays_the_transe_embeddings(tmp_path):
    from plm_lightning.data.entity_fusion import ERNIETHUDataModule
    from plm_lightning.objectives import ERNIETHU

    data = ERNIETHUDataModule(source="world:subjects=8", tokenizer="wordpiece", tokenizer_vocab_size=512, seq_len=48,
                              batch_size=4, transe_epochs=20, cache_dir=str(tmp_path))
    model = ERNIETHU(backbone="tiny", backbone_overrides={"num_layers": 1}, fusion_layers=1)
    trainer = type("T", (), {"datamodule": data, "world_size": 1, "global_rank": 0})()
    model.trainer = trainer
    data.setup("fit")
    model.setup("fit")
    assert torch.equal(model.entity_table.weight, data.entity_embeddings)
    assert not model.entity_table.weight.requires_grad
    batch = next(iter(data.train_dataloader()))
    out = model.compute_loss(batch)
    out["loss"].backward()
    assert out["entity_loss"] > 0 and model.knowledge_encoder.layers[0].fuse_entity.weight.grad.abs().sum() > 0
    assert model.hparams.num_entities == data.graph.num_entities
    with pytest.raises(ConfigError, match="needs data.graph"):
        ERNIETHUDataModule(graph_aliases=str(tmp_path / "a.tsv"))
    with pytest.raises(ConfigError, match="data.graph is required"):
        _ = ERNIETHUDataModule(source=None).graph


@pytest.mark.parametrize("option", [{"sentence_prediction": "nsp"}, {"span_boundary_objective": True},
                                    {"enhanced_mask_decoder": True}])
def test_masked_lm_heads_erniethu_does_not_train_are_refused(option):
    from plm_lightning.objectives import ERNIETHU

    key = next(iter(option))
    with pytest.raises(ConfigError, match=f"model.{key}=.* is not supported by ERNIETHU"):
        ERNIETHU(backbone="tiny", **option)
    ERNIETHU(backbone="tiny", sentence_prediction="none", span_boundary_objective=False)  # what a checkpoint holds
