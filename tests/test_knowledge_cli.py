"""The knowledge subcommands end to end on the world-trained GPT-2 (`world_gpt`), and their one-line errors."""

import json
import math

import pytest

from tests.conftest import ROOT, cli_error, run_cli

# one xdist worker runs every test of the world-trained GPT-2 (pyproject: --dist loadgroup): the other never
# idles waiting on the `world_gpt` fixture's lock while the model trains
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("world_gpt")]


def test_world_command_writes_the_files(tmp_path) -> None:
    result = run_cli(["world", str(tmp_path), "--world", "world:seed=2,subjects=10"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert {"corpus.jsonl", "probes.jsonl", "counterfact.json", "facts.jsonl"} <= {p.name for p in tmp_path.iterdir()}


def test_probe_trace_and_edit_commands(world_gpt: dict, tmp_path) -> None:
    ckpt, world = world_gpt["last"], world_gpt["world"]
    result = run_cli(["probe", ckpt, "--world", world, "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    layers = json.loads(result.stdout)["readers"][0]["layers"]
    assert layers[-1]["p@1"] >= 0.85 and len(layers) == 5
    png = tmp_path / "trace.png"
    result = run_cli(["causal-trace", ckpt, "--world", world, "--facts", "2", "--samples", "2", "--png", str(png)],
                     cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert png.stat().st_size > 1000 and "last subject token" in result.stdout
    result = run_cli(["edit", ckpt, "--world", world, "--editor", "rome", "--count", "1", "--contexts", "0", "--json",
                      "--save", str(tmp_path / "edited.ckpt")], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["results"][0]
    assert report["before"]["efficacy"] == 0.0 and report["after"]["magnitude"] > report["before"]["magnitude"] + 0.05
    assert list(report["changed"].values()) == [1]  # one rank-one matrix
    result = run_cli(["probe", str(tmp_path / "edited.ckpt"), "--world", world, "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr  # the saved edited model loads and answers
    result = run_cli(["edit", ckpt, "--world", world, "--editor", "memit", "--count", "2", "--contexts", "0",
                      "--paper-values", "--layers", "0,1", "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["results"][0]
    assert report["editor"]["layers"] == [0, 1] and all(0 < rank <= 2 for rank in report["changed"].values())


def test_neurons_and_trace_facts_commands(world_gpt: dict) -> None:
    ckpt, world = world_gpt["last"], world_gpt["world"]
    result = run_cli(["neurons", ckpt, "--world", world, "--facts", "3", "--share", "0.5", "--random-sets", "2",
                      "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    assert summary["facts"] == 3 and summary["mean_neurons"] > 0
    result = run_cli(["trace-facts", *world_gpt["checkpoints"][-2:], "--world", world, "--facts", "4",
                      "--alias-facts", "2", "--methods", "bm25,embedding", "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert {(r["facts"], r["setting"], r["method"]) for r in rows} >= {("named", "full", "bm25"),
                                                                     ("alias", "rerank", "random")}


def test_probe_classifier_and_memories_commands(world_gpt: dict) -> None:
    """``probe --classifier``: a linear probe and its online code per layer (embeddings + 4 blocks) on the world's
    P19 facts; ``probe --memories``: each key's top prefixes by coefficient, and the value/next-token agreement."""
    from plm_lightning.corpus.world import world_from_spec

    ckpt, world = world_gpt["last"], world_gpt["world"]
    result = run_cli(["probe", ckpt, "--world", world, "--classifier", "P19", "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    facts = [f for f in world_from_spec(world).facts if f.relation == "P19" and not f.alias_only]
    assert payload["examples"] == len(facts) and payload["classes"] == 12 and len(payload["layers"]) == 5
    for row in payload["layers"]:
        assert 0.0 <= row["accuracy"] <= 1.0 and row["uniform_bits"] == pytest.approx(len(facts) * math.log2(12))
        assert row["compression"] == pytest.approx(row["uniform_bits"] / row["online_bits"])
    result = run_cli(["probe", ckpt, "--world", world, "--memories", "1", "--keys", "0,3", "--json"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    memories = json.loads(result.stdout)["memories"]
    assert [(m["layer"], m["key"]) for m in memories] == [(1, 0), (1, 3)]
    for m in memories:
        coefficients = [p["coefficient"] for p in m["prefixes"]]
        assert len(coefficients) == 10 and coefficients == sorted(coefficients, reverse=True)
        top = m["value_top_tokens"][0][0]
        assert m["agreement"] == pytest.approx(sum(p["next"] == top for p in m["prefixes"]) / 10)


@pytest.mark.parametrize("args, words", [
    (["edit", "{ckpt}", "--world", "{world}", "--layers", "7"], "layer 7 is out of range"),
    (["edit", "{ckpt}", "--world", "{world}", "--count", "0"], "empty"),
    (["edit", "{ckpt}", "--requests", "{bad}", "--corpus", "{world}"], "not in the prompt"),
    (["edit", "{ckpt}", "--requests", "{bad}", "--editor", "mend"], "needs a trained editor"),
    (["edit", "{ckpt}", "--requests", "{bad}", "--editor", "mend", "--mend-net", "{missing}"], "no such editor file"),
    (["probe", "{ckpt}", "--probes", "{missing}"], "no such file"),
    (["probe", "no/such.ckpt", "--world", "world"], "no such checkpoint"),
    (["probe", "{ckpt}", "--world", "{world}", "--classifier", "P99"], "is not one of"),
    (["probe", "{ckpt}", "--world", "{world}", "--memories", "1", "--keys", "9999"], "out of range"),
    (["trace-facts", "{ckpt}", "--world", "{world}", "--methods", "bm26"], "use some of"),
    (["causal-trace", "{ckpt}", "--prompt", "Someone was born in", "--subject", "Nobody"], "does not occur"),
])
def test_knowledge_errors_are_one_line(world_gpt: dict, tmp_path, args: list[str], words: str, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"prompt": "Someone was born in", "subject": "Nobody", "target_new": "Lorjun"}]))
    fill = {"{ckpt}": world_gpt["last"], "{world}": world_gpt["world"], "{bad}": str(bad),
            "{missing}": str(tmp_path / "missing.jsonl")}
    assert words in cli_error([fill.get(a, a) for a in args], capsys)  # in-process: exit 2, one line, no traceback
