"""The lm-evaluation-harness model type (``plm_lightning.evaluation.harness``) and the ``evaluate`` command: equal to
lm-eval's own ``hf`` model on the exported directory of the same checkpoint, pseudo-log-likelihood for masked LMs
(Salazar et al. 2020; Kauf & Ivanova 2023's within_word_l2r), local task YAMLs scored above chance by models trained
so that they should, and one-line errors for what cannot be asked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, WORLD_SPEC, cli_error, run_cli, tiny_pretrained

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

from plm_lightning.evaluation.harness import HarnessLM, generation_settings  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> tuple[str, str]:
    """A tiny random-weights GPT-2 of ours and its exported transformers directory."""
    from plm_lightning.interop import export_checkpoint

    root = tmp_path_factory.mktemp("lm_eval_gpt2")
    ckpt = tiny_pretrained(root / "gpt2.ckpt", "gpt2")
    export_checkpoint(ckpt, root / "hf")
    return ckpt, str(root / "hf")


def test_our_model_type_scores_what_lm_eval_hf_scores_on_the_exported_directory(gpt2) -> None:
    pytest.importorskip("accelerate")
    from lm_eval.models.huggingface import HFLM

    ckpt, exported = gpt2
    ours = HarnessLM(ckpt, batch_size=3)
    hf = HFLM(pretrained=exported, backend="causal", device="cpu", batch_size=3)
    pairs = [("The module", " is imported."), ("", "Hello world"), ("A function returns ", "a value"),
             ("x " * 200, "y z"),  # longer than the model's 256 positions: cut from the left alike
             ("Call it", " with two arguments and a keyword")]
    ll_ours = ours.loglikelihood(_requests("loglikelihood", pairs))
    ll_hf = hf.loglikelihood(_requests("loglikelihood", pairs))
    text = "The Python documentation describes the standard library and its modules. " * 25  # several windows
    rolling = _requests("loglikelihood_rolling", [(text,), ("short text here",)])
    roll_ours, roll_hf = ours.loglikelihood_rolling(rolling), hf.loglikelihood_rolling(rolling)
    gen = _requests("generate_until", [("The module", {"until": ["."], "max_gen_toks": 12, "do_sample": False}),
                                       ("Return", {"until": ["\n", " the"], "max_gen_toks": 6})])
    assert ours.generate_until(gen) == hf.generate_until(gen)
    differences = [abs(a[0] - b[0]) for a, b in zip(ll_ours, ll_hf)] + [abs(a - b) for a, b in zip(roll_ours, roll_hf)]
    assert max(differences) < 1e-4, differences
    assert [a[1] for a in ll_ours] == [b[1] for b in ll_hf]
    assert roll_ours[0] < -1000 and math.isfinite(roll_ours[0])  # a long text, every token scored once
    # a rolling score is the loglikelihood of the whole text after the end-of-text token
    assert ours.loglikelihood_rolling(_requests("loglikelihood_rolling", [("short text here",)]))[0] == \
        pytest.approx(ours.loglikelihood(_requests("loglikelihood", [("", "short text here")]))[0][0], abs=1e-5)


def test_pseudo_log_likelihood_masks_each_token_and_within_word_l2r_its_later_pieces(tmp_path) -> None:
    from plm_lightning.evaluation.minimal_pairs import pseudo_log_likelihood
    from plm_lightning.knowledge.lm import LanguageModel
    from plm_lightning.nn.stack_inputs import StackInputs

    ckpt = tiny_pretrained(tmp_path / "bert.ckpt", "bert")
    original, l2r = HarnessLM(ckpt, batch_size=4), HarnessLM(ckpt, batch_size=4, pll="within_word_l2r")
    sentence = "The interpreter raises an exception immediately"
    lm = LanguageModel.load(ckpt)
    # no context: Salazar et al.'s PLL of the sentence, as `acceptability` computes it
    (score, _), = original.loglikelihood(_requests("loglikelihood", [("", sentence)]))
    assert score == pytest.approx(pseudo_log_likelihood(lm, sentence), abs=1e-4)
    # with a context: only the continuation's tokens are scored, the context stays visible
    context, continuation = "The interpreter", " raises an exception immediately"
    ids, words, _ = lm.tokenizer.encode_batch_with_words([context + continuation])[0]
    n_context = len(lm.tokenizer.encode_batch([context])[0])
    cls, sep, mask = (lm.tokenizer.ids[k] for k in ("cls", "sep", "mask"))
    row = torch.tensor([cls, *ids, sep])

    def manual(hide_later_pieces: bool) -> float:
        total = 0.0
        for p in range(1 + n_context, 1 + len(ids)):
            masked = row.clone()
            masked[p] = mask
            q = p + 1
            while hide_later_pieces and q <= len(ids) and words[q - 1] == words[p - 1]:
                masked[q] = mask
                q += 1
            with torch.no_grad():
                hidden = lm.backbone(masked[None], StackInputs()).last_hidden_state[0, p]
                total += float(lm.logits(hidden).float().log_softmax(-1)[row[p]])
        return total

    split = [w for w in set(words[n_context:]) if words[n_context:].count(w) > 1]
    assert split, "the sentence must hold a word of several pieces for the two variants to differ"
    (a, _), = original.loglikelihood(_requests("loglikelihood", [(context, continuation)]))
    (b, _), = l2r.loglikelihood(_requests("loglikelihood", [(context, continuation)]))
    assert a == pytest.approx(manual(False), abs=1e-4) and b == pytest.approx(manual(True), abs=1e-4)
    assert abs(a - b) > 1e-5  # random weights: the variants differ, a little
    text = "The documentation of the standard library. " * 30  # longer than the model's positions: windows
    (rolled,) = original.loglikelihood_rolling(_requests("loglikelihood_rolling", [(text,)]))
    assert math.isfinite(rolled) and rolled < 0
    with pytest.raises(Exception, match="cannot generate_until"):
        original.generate_until(_requests("generate_until", [("The", {"until": ["."]})]))


def test_encoder_decoders_score_in_the_decoder_and_generate(tmp_path) -> None:
    from plm_lightning.generation import sequence_logprob
    from plm_lightning.objectives.loading import load_pretrained

    ckpt = tiny_pretrained(tmp_path / "t5.ckpt", "t5")
    lm = HarnessLM(ckpt)
    (score, _), = lm.loglikelihood(_requests("loglikelihood", [("Translate the module", " into text")]))
    model, tok = load_pretrained(ckpt)
    context, target = tok.encode_batch(["Translate the module"])[0], tok.encode_batch([" into text"])[0]
    reference = sequence_logprob(model, torch.tensor([[*context, tok.ids["eos"]]]), target, lm.start_id)
    assert score == pytest.approx(reference, abs=1e-4)
    (text,) = lm.generate_until(_requests("generate_until", [("Translate the module", {"max_gen_toks": 5})]))
    assert isinstance(text, str)


def test_generation_settings_follow_the_task_or_refuse_it() -> None:
    config, until = generation_settings({"until": "\n\n", "max_gen_toks": 7, "do_sample": False}, "<eos>")
    assert config.strategy == "greedy" and config.max_new_tokens == 7 and until == ["\n\n", "<eos>"]
    config, _ = generation_settings({"do_sample": True, "temperature": 0.7, "top_p": 0.9}, "<eos>")
    assert config.strategy == "sample" and config.temperature == 0.7 and config.top_p == 0.9
    assert generation_settings({"do_sample": True, "temperature": 0.0}, "e")[0].strategy == "greedy"
    with pytest.raises(Exception, match="num_beams of the task are not followed here; supported: until"):
        generation_settings({"num_beams": 4}, "e")


def world_tasks(directory: Path, world_spec: str) -> Path:
    """Local lm-eval tasks over a synthetic world's facts (data files and YAMLs in ``directory``):
    ``world_order`` (multiple choice: a fact's sentence and three orders of its words drawn at random; a model that
    read the world's documents knows the sentence: chance is 0.25), ``world_complete`` (generate_until: a fact's
    prompt, the object the answer; a model must have learnt the fact) and ``world_text``
    (loglikelihood_rolling: the facts' sentences)."""
    from plm_lightning.corpus.world import prompt_of, world_from_spec

    world = world_from_spec(world_spec)
    rng = np.random.default_rng(0)
    rows, texts = [], []
    for fact in world.facts:
        if fact.alias_only:
            continue
        relation = world.relations[fact.relation]
        sentence = relation.templates[0].format(s=fact.subject, o=fact.object)
        words, choices = sentence.rstrip(".").split(), [sentence]
        while len(choices) < 4:
            shuffled = " ".join(words[i] for i in rng.permutation(len(words))) + "."
            if shuffled not in choices:
                choices.append(shuffled)
        order = rng.permutation(4)
        rows.append({"context": prompt_of(relation.templates[0]).format(fact.subject), "answer": fact.object,
                     "choices": [choices[i] for i in order], "label": int(np.flatnonzero(order == 0)[0])})
        texts.append({"text": sentence})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "facts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:60]))
    (directory / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in texts[:20]))
    data = lambda name: f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    validation: {directory / name}\n" \
                        "validation_split: validation\n"  # noqa: E731
    (directory / "world_order.yaml").write_text(
        "task: world_order\n" + data("facts.jsonl") + "output_type: multiple_choice\ndoc_to_text: ''\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    (directory / "world_complete.yaml").write_text(
        "task: world_complete\n" + data("facts.jsonl") + "output_type: generate_until\ndoc_to_text: '{{context}}'\n"
        "doc_to_target: '{{answer}}'\ngeneration_kwargs:\n  until: ['.']\n  max_gen_toks: 8\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n    regexes_to_ignore: [' ']\n")
    (directory / "world_text.yaml").write_text(
        "task: world_text\n" + data("text.jsonl") + "output_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n")
    return directory


@pytest.mark.slow
def test_evaluate_scores_a_trained_gpt2_above_chance_on_local_tasks(world_gpt, tmp_path) -> None:
    tasks = world_tasks(tmp_path / "tasks", world_gpt["world"])
    out = tmp_path / "results.json"
    result = run_cli(["evaluate", world_gpt["last"], "--tasks", "world_order,world_complete,world_text",
                      "--include-path", str(tasks), "--only-include-path", "--bootstrap-iters", "100",
                      "--out", str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["objective"] == "CausalLM" and report["n_samples"]["world_order"]["effective"] == 60
    assert report["tasks"]["world_order"]["acc,none"] > 0.6  # chance: 0.25
    assert report["tasks"]["world_complete"]["exact_match,none"] > 0.3  # the world's facts, seen in pretraining
    assert 0 < report["tasks"]["world_text"]["bits_per_byte,none"] < 3
    assert "world_order" in result.stdout and "acc" in result.stdout


@pytest.mark.slow
def test_evaluate_scores_a_trained_bert_above_chance_by_pseudo_log_likelihood(tmp_path, capsys) -> None:
    run = tmp_path / "bert"
    result = run_cli(["fit", "--config", str(ROOT / "configs/knowledge/bert-world.yaml"), "--data.source", WORLD_SPEC,
                      "--trainer.max_steps", "300", "--model.backbone_overrides",
                      "{hidden_size: 64, num_layers: 2, num_heads: 2, intermediate_size: 256, dropout: 0.0, "
                      "attention_dropout: 0.0}", "--trainer.default_root_dir", str(run),
                      "--trainer.logger.init_args.save_dir", str(run)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    (ckpt,) = run.rglob("last.ckpt")
    tasks = world_tasks(tmp_path / "tasks", WORLD_SPEC)
    result = run_cli(["evaluate", str(ckpt), "--tasks", "world_order,world_text", "--include-path", str(tasks),
                      "--only-include-path", "--bootstrap-iters", "100", "--pll", "within_word_l2r", "--json"],
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["objective"] == "MaskedLM" and report["settings"]["pll"] == "within_word_l2r"
    assert report["tasks"]["world_order"]["acc,none"] > 0.6  # chance: 0.25
    assert math.isfinite(report["tasks"]["world_text"]["word_perplexity,none"])
    assert json.loads(ckpt.with_name("last.lm-eval.json").read_text()) == report  # beside it: the model card's
    # bad input, one line each, before a request is scored
    error = cli_error(["evaluate", str(ckpt), "--tasks", "world_complete", "--include-path", str(tasks),
                       "--only-include-path"], capsys)
    assert "world_complete ask generate_until, which a MaskedLM checkpoint cannot answer" in error
    error = cli_error(["evaluate", str(ckpt), "--tasks", "world_ordr", "--include-path", str(tasks),
                       "--only-include-path"], capsys)
    assert "unknown task 'world_ordr'" in error and "did you mean world_order" in error


def test_evaluate_bad_input_is_one_line(tmp_path, capsys) -> None:
    assert "no such checkpoint" in cli_error(["evaluate", str(tmp_path / "none.ckpt"), "--tasks", "x",
                                              "--include-path", str(tmp_path), "--only-include-path"], capsys)
    assert "--include-path" in cli_error(["evaluate", "x.ckpt", "--tasks", "a", "--only-include-path"], capsys)
    assert "is not a directory" in cli_error(["evaluate", __file__, "--tasks", "a", "--include-path",
                                              str(tmp_path / "missing")], capsys)
    assert "--limit=0.0 must be > 0" in cli_error(["evaluate", "x.ckpt", "--tasks", "a", "--limit", "0"], capsys)
