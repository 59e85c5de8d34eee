"""Minimal-pair acceptability: the pseudo-log-likelihood is the sum over positions of the masked-position
log-probabilities, the causal log-likelihood is the chain rule over growing prefixes, the built-in pairs differ in
one word and are seeded, the model's choice is the higher score, and bad input is a one-line error."""

import json

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.evaluation import (
    MinimalPair,
    evaluate_pairs,
    pseudo_log_likelihood,
    read_pairs,
    sentence_log_likelihood,
    template_pairs,
)
from plm_lightning.knowledge.lm import LanguageModel
from tests.conftest import cli_error, run_cli, tiny_pretrained

SENTENCE = "The function returns a new list of values."


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    paths = {family: tiny_pretrained(root / f"{family}.ckpt", family) for family in ("bert", "gpt2")}
    return paths, {family: LanguageModel.load(path) for family, path in paths.items()}


@torch.no_grad()
def test_pseudo_log_likelihood_is_the_sum_of_masked_position_log_probs(models) -> None:
    lm = models[1]["bert"]
    ids = lm.encode(SENTENCE)
    ref = 0.0
    for t in range(len(ids)):  # one forward per masked position, nothing batched
        row = [lm.tokenizer.ids["cls"], *ids, lm.tokenizer.ids["sep"]]
        row[t + 1] = lm.tokenizer.ids["mask"]
        logits = lm.module.lm_head(lm.module.backbone(torch.tensor([row])).last_hidden_state)[0, t + 1]
        ref += float(logits.float().log_softmax(-1)[ids[t]])
    assert pseudo_log_likelihood(lm, SENTENCE) == pytest.approx(ref, rel=1e-5)
    assert pseudo_log_likelihood(lm, SENTENCE, batch_size=3) == pytest.approx(ref, rel=1e-5)


@torch.no_grad()
def test_causal_log_likelihood_is_the_chain_rule_over_prefixes(models) -> None:
    lm = models[1]["gpt2"]
    ids = [lm.tokenizer.ids["eos"], *lm.encode(SENTENCE)]
    ref = 0.0
    for t in range(1, len(ids)):  # p(x_t | x_<t) from the prefix alone
        logits = lm.module.lm_head(lm.module.backbone(torch.tensor([ids[:t]])).last_hidden_state)[0, -1]
        ref += float(logits.float().log_softmax(-1)[ids[t]])
    assert sentence_log_likelihood(lm, SENTENCE) == pytest.approx(ref, rel=1e-5)


def test_template_pairs_differ_in_one_word_and_are_seeded() -> None:
    pairs = template_pairs(50, seed=3)
    assert pairs == template_pairs(50, seed=3) and pairs != template_pairs(50, seed=4)
    assert {p.phenomenon for p in pairs} == {"subject_verb_agreement", "determiner_noun_agreement"} and len(pairs) == 100
    for pair in pairs:
        good, bad = pair.good.split(), pair.bad.split()
        assert len(good) == len(bad) and sum(a != b for a, b in zip(good, bad)) == 1, pair
    assert any(" near the " in p.good for p in pairs)  # agreement across an attractor


def test_the_choice_is_the_higher_score_per_phenomenon(models) -> None:
    lm = models[1]["gpt2"]
    pairs = template_pairs(6, seed=0)
    report = evaluate_pairs(lm, pairs)
    expected = [sentence_log_likelihood(lm, p.good) > sentence_log_likelihood(lm, p.bad) for p in pairs]
    assert report.correct() == expected
    summary = report.summary()
    assert summary["scoring"] == "log-likelihood" and summary["accuracy"] == pytest.approx(sum(expected) / 12)
    assert summary["phenomena"]["subject_verb_agreement"]["pairs"] == 6
    assert evaluate_pairs(models[1]["bert"], pairs[:2]).scoring == "pseudo-log-likelihood"


def test_blimp_files_and_bad_input(tmp_path, models, capsys) -> None:
    good = tmp_path / "anaphor.jsonl"
    good.write_text(json.dumps({"sentence_good": "Mary saw herself.", "sentence_bad": "Mary saw himself.",
                                "UID": "anaphor_gender_agreement"}) + "\n\n")
    assert read_pairs(good) == [MinimalPair("Mary saw herself.", "Mary saw himself.", "anaphor_gender_agreement")]
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "broken.jsonl").write_text('{"sentence_good": "A."}\n')
    for name, words in (("empty.jsonl", "holds no pair"), ("broken.jsonl", "line 1 needs non-empty sentence_good"),
                        ("missing.jsonl", "no such file")):
        with pytest.raises(ConfigError, match=words):
            read_pairs(tmp_path / name)
    path = models[0]["bert"]
    res = run_cli(["acceptability", path, "--pairs", str(good), "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["pairs"] == 1 and list(report["phenomena"]) == ["anaphor_gender_agreement"]
    assert "holds no pair" in cli_error(["acceptability", path, "--pairs", str(tmp_path / "empty.jsonl")], capsys)
