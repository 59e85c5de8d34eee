"""Zero/few-shot prompting: the demonstrations are a function of the seed, the candidate log-likelihood of one
forward pass equals token-by-token recomputation, the model's choice is the argmax of the (normalised) scores,
generation is scored by exact match and ROUGE-L, and bad settings are one-line errors."""

import json

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.evaluation import (
    PromptExample,
    PromptScorer,
    build_prompt,
    demonstrations,
    evaluate_prompts,
    load_prompt_task,
)
from plm_lightning.generation import sequence_logprob
from plm_lightning.prediction import load_generator
from tests.conftest import cli_error, run_cli, tiny_pretrained

CHOICES = [{"context": "The function returns", "choices": ["a list.", "the value of x plus one.", "None."], "label": 1},
           {"context": "Open the file and", "choices": ["read it.", "close it later."], "label": 0},
           {"context": "A dictionary maps", "choices": ["keys to values.", "nothing."], "label": 0}]


@pytest.fixture(scope="module")
def scorers(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompt")
    paths = {family: tiny_pretrained(root / f"{family}.ckpt", family) for family in ("gpt2", "t5")}
    return paths, {family: PromptScorer(*load_generator(path)) for family, path in paths.items()}


def test_demonstrations_are_seeded_and_k_is_checked() -> None:
    train = [PromptExample(f"Q{i}:", (" a", " b"), i % 2) for i in range(10)]
    assert demonstrations(train, 3, seed=1) == demonstrations(train, 3, seed=1)
    assert demonstrations(train, 3, seed=1) != demonstrations(train, 3, seed=2)
    assert len(set(demonstrations(train, 10, seed=0))) == 10  # without replacement
    prompt = build_prompt(train[0], demonstrations(train, 2, seed=1))
    assert prompt.count("\n\n") == 2 and prompt.endswith("Q0:") and (" a" in prompt or " b" in prompt)
    with pytest.raises(ConfigError, match="--shots=11 is more than the 10 examples of the training split"):
        demonstrations(train, 11, seed=0)


@pytest.mark.parametrize("family", ["gpt2", "t5"])
def test_one_pass_log_likelihood_equals_recomputation(scorers, family) -> None:
    scorer = scorers[1][family]
    prompt, candidate = "The function returns", " the value of x plus one."
    total, tokens = scorer.continuation_logprobs(prompt, candidate)
    full, before = scorer.encode(prompt + candidate), scorer.encode(prompt)
    context = before + [scorer.eos] if scorer.encoder_decoder else [scorer.eos, *before]
    with torch.no_grad():
        ref = sequence_logprob(scorer.model, torch.tensor([context]), full[len(before):], scorer.start)
    assert tokens == len(full) - len(before) and total == pytest.approx(ref, rel=1e-4)


def test_the_choice_is_the_argmax_of_the_normalised_scores(scorers, tmp_path) -> None:
    scorer = scorers[1]["gpt2"]
    for normalization in ("none", "token", "char"):
        for row in CHOICES:
            candidates = tuple(" " + c for c in row["choices"])
            choice, scores = scorer.choose(row["context"], candidates, normalization)
            raw = [scorer.continuation_logprobs(row["context"], c) for c in candidates]
            divide = {"none": lambda t, n, c: t, "token": lambda t, n, c: t / n, "char": lambda t, n, c: t / len(c)}
            expected = [divide[normalization](t, n, c) for (t, n), c in zip(raw, candidates)]
            assert scores == pytest.approx(expected) and choice == max(range(len(scores)), key=scores.__getitem__)
    path = tmp_path / "choices.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CHOICES))
    report = evaluate_prompts(scorer, f"choices:{path}", shots=1, seed=0)
    choices = [p["choice"] for p in report.predictions]
    assert report.metrics["accuracy"] == pytest.approx(sum(c == r["label"] for c, r in zip(choices, CHOICES)) / 3)


def test_generation_tasks_score_exact_match_and_rouge(scorers, tmp_path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"input": "Q: What does len return?", "target": "the length"}) + "\n"
                    + json.dumps({"input": "Long text about files.", "target": "files", "task": "summarize"}) + "\n")
    examples = load_prompt_task(f"generation:{path}")["validation"]
    assert examples[0].prompt.endswith("\nA:") and examples[1].prompt.endswith("\nTL;DR:")
    report = evaluate_prompts(scorers[1]["t5"], f"generation:{path}", max_new_tokens=4)
    assert set(report.metrics) == {"exact_match", "rougeL"} and 0 <= report.metrics["rougeL"] <= 1
    assert all(isinstance(p["output"], str) and "\n" not in p["output"] for p in report.predictions)


def test_offline_tasks_and_cli(scorers, tmp_path, capsys) -> None:
    splits = load_prompt_task("offline:code_or_prose")
    assert splits["train"][0].candidates == (" prose", " code") and "Is this code or prose?" in splits["train"][0].prompt
    with pytest.raises(ConfigError, match="is not one of offline:code_or_prose"):
        load_prompt_task("offline:nope")
    path = scorers[0]["gpt2"]
    res = run_cli(["prompt", path, "--task", "offline:next_sentence", "--shots", "2", "--limit", "4", "--json"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["examples"] == 4 and summary["shots"] == 2 and 0 <= summary["accuracy"] <= 1
    (tmp_path / "one.jsonl").write_text(json.dumps(CHOICES[0]) + "\n")
    error = cli_error(["prompt", path, "--task", f"choices:{tmp_path / 'one.jsonl'}", "--shots", "5"], capsys)
    assert "--shots=5 is more than the 1 examples" in error
