"""The bidirectionality continuum: at its end points the batch is exactly the causal LM's and the masked LM's (and so
is the loss, the bidirectional end computed by an Encoder with the decoder's weights); in between, only positions
that cannot see their target carry next-token loss, and the budgets are exact."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.collators import CausalLMCollator, MaskedLMCollator, MaskedLMSettings
from plm_lightning.data.continuum import ContinuumCollator, check_continuum
from plm_lightning.data.corruption import IGNORE_INDEX, MaskingConfig
from plm_lightning.errors import ConfigError
from plm_lightning.nn import Encoder
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.objectives import CausalLM

SPECIAL = np.array([0, 1, 2, 3, 4])  # pad, eos, ..., mask = 4
VOCAB = 60


def _samples(lengths: list[int], width: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(lengths):
        ids = np.zeros(width, dtype=np.int64)
        ids[:n] = rng.integers(5, VOCAB, n)
        docs = np.where(np.arange(width) < n, 0, -1)
        out.append({"input_ids": ids, "document_ids": docs, "epoch": 0, "index": i})
    return out


def _collator(f: float, p: float, prediction: str = "next_token", seed: int = 0) -> ContinuumCollator:
    return ContinuumCollator(SPECIAL, 4, VOCAB, f, p, prediction, seed=seed)


@given(st.lists(st.integers(2, 24), min_size=1, max_size=5), st.floats(0.0, 0.99), st.floats(0.05, 1.0),
       st.integers(0, 1000))
@settings(max_examples=80, deadline=None)
def test_next_token_loss_only_where_the_target_is_unseen(lengths, f, p, seed) -> None:
    samples = _samples(lengths, 24, seed)
    batch = _collator(f, p, seed=seed)(samples)
    ids, labels, prefix = batch["input_ids"].numpy(), batch["labels"].numpy(), batch["prefix_lengths"].numpy()
    for row, n in enumerate(lengths):
        assert prefix[row] == round(f * n)
        labelled = np.flatnonzero(labels[row] != IGNORE_INDEX)
        assert (labels[row, labelled] == ids[row, labelled + 1]).all()  # the next token
        assert (labelled >= max(prefix[row] - 1, 0)).all() and (labelled <= n - 2).all()  # never a seen target
        candidates = n - 1 - max(prefix[row] - 1, 0)
        assert len(labelled) == min(candidates, max(1, round(p * n)))  # the exact budget
    assert (batch["input_ids"].numpy() == np.stack([s["input_ids"] for s in samples])).all()  # no corruption


@given(st.lists(st.integers(2, 24), min_size=1, max_size=5), st.floats(0.0, 1.0), st.floats(0.05, 0.95),
       st.integers(0, 1000))
@settings(max_examples=60, deadline=None)
def test_masked_prediction_corrupts_only_what_it_predicts(lengths, f, p, seed) -> None:
    samples = _samples(lengths, 24, seed)
    batch = _collator(f, p, "masked", seed)(samples)
    original = np.stack([s["input_ids"] for s in samples])
    labels, ids = batch["labels"].numpy(), batch["input_ids"].numpy()
    changed = ids != original
    assert not (changed & (labels == IGNORE_INDEX)).any()
    labelled = labels != IGNORE_INDEX
    assert (labels[labelled] == original[labelled]).all()  # predicted in place
    assert (labelled.sum(1) == [max(1, round(p * n)) if n else 0 for n in lengths]).all()


def test_end_points_are_exactly_the_causal_and_masked_lm_batches() -> None:
    samples = _samples([24, 17, 9], 24)
    causal, ours = CausalLMCollator()(samples), _collator(0.0, 1.0)(samples)
    for key in ("input_ids", "labels", "attention_mask"):
        assert torch.equal(causal[key], ours[key]), key
    assert (ours["prefix_lengths"] == 0).all()
    mlm = MaskedLMCollator(MaskedLMSettings(SPECIAL, 4, VOCAB, MaskingConfig(0.15, 0.8, 0.1), seed=7))(samples)
    ours = _collator(1.0, 0.15, "masked", seed=7)(samples)
    for key in ("input_ids", "labels", "attention_mask"):
        assert torch.equal(mlm[key], ours[key]), key
    assert ours["prefix_lengths"].tolist() == [24, 17, 9]


def test_end_point_losses_are_the_causal_and_the_bidirectional_mlm_losses() -> None:
    torch.manual_seed(0)
    model = CausalLM(backbone="tiny-gpt", vocab_size=VOCAB).eval()
    samples = _samples([24, 24, 24], 24)
    with torch.no_grad():
        causal = model.compute_loss(CausalLMCollator()(samples))["loss"]
        ours = model.compute_loss(_collator(0.0, 1.0)(samples))["loss"]
        torch.testing.assert_close(ours, causal, atol=1e-5, rtol=1e-5)
        batch = _collator(1.0, 0.15, "masked", seed=3)(samples)
        ours = model.compute_loss(batch)["loss"]
        encoder = Encoder(model.config).eval()  # the same blocks with an encoder's (bidirectional) mask
        encoder.load_state_dict(model.backbone.state_dict())
        hidden = encoder(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"])).last_hidden_state
        labels = batch["labels"]
        logits = model.lm_head(hidden)[labels != IGNORE_INDEX]
        mlm = torch.nn.functional.cross_entropy(logits.float(), labels[labels != IGNORE_INDEX])
        torch.testing.assert_close(ours, mlm, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(ours, model.compute_loss({**batch, "prefix_lengths": batch["prefix_lengths"] * 0})
                                  ["loss"])  # the same tokens under a causal mask score differently


@pytest.mark.parametrize("args, words", [
    ((1.0, 0.5, "next_token"), "every position sees the next token"),
    ((0.5, 0.0, "masked"), "predict_fraction=0.0 must lie in (0, 1]"),
    ((0.5, 1.0, "masked"), "masks every token"),
    ((1.5, 0.5, "masked"), "bidirectional_fraction=1.5 must lie in [0, 1]"),
    ((0.5, 0.5, "both"), "prediction='both' is not one of next_token, masked"),
])
def test_bad_settings_are_one_line_errors(args, words) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_continuum(*args)


@pytest.mark.parametrize("fraction,causal", [(0.0, True), (0.5, False), (1.0, False)])
def test_fine_tuning_reads_the_input_as_the_pretrained_prefix(fraction, causal, tmp_path) -> None:
    """A continuum model pretrained with a bidirectional prefix is fine-tuned with its input as that prefix (every
    token sees every token, pooled as an encoder); the causal end stays causal, pooled at the last token."""
    from plm_lightning.finetune import SequenceClassifier
    from tests.conftest import tiny_pretrained

    path = tiny_pretrained(tmp_path / "gpt.ckpt", "gpt2")
    ckpt = torch.load(path, weights_only=True)
    ckpt["datamodule_hyper_parameters"] = {"bidirectional_fraction": fraction, "prediction": "next_token"}
    torch.save(ckpt, path)
    model = SequenceClassifier(init_from=path, num_labels=2).eval()
    assert model.causal is causal and model.backbone.causal is causal
    ids = torch.randint(10, 100, (1, 12))
    changed = ids.clone()
    changed[0, -1] = 5  # the last token: a causal first position never sees it, a bidirectional one does
    first = [model.backbone(x, StackInputs(attention_mask=torch.ones_like(x))).last_hidden_state[0, 0] for x in (ids, changed)]
    assert torch.equal(first[0], first[1]) is causal
    from plm_lightning.interop.task_heads import finetuned_to_hf

    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(checkpoint)
    if causal:  # GPT2ForSequenceClassification attends as this model does
        assert finetuned_to_hf(checkpoint, tmp_path / "hf") == "GPT2ForSequenceClassification"
    else:  # no transformers GPT-2 reads bidirectionally: refused, not exported wrong
        with pytest.raises(ConfigError, match="fine-tuned reading its input bidirectionally"):
            finetuned_to_hf(checkpoint, tmp_path / "hf")


def _continuum_checkpoint(tmp_path, fraction: float, prediction: str = "next_token") -> str:
    from tests.conftest import tiny_pretrained

    path = tiny_pretrained(tmp_path / f"gpt-{fraction}-{prediction}.ckpt", "gpt2")
    ckpt = torch.load(path, weights_only=True)
    ckpt["datamodule_hyper_parameters"] = {"bidirectional_fraction": fraction, "prediction": prediction}
    torch.save(ckpt, path)
    return path


def test_a_prefix_lm_is_prompted_and_continues_with_the_prompt_as_its_prefix(tmp_path) -> None:
    """A continuum decoder pretrained with a bidirectional prefix reads a prompt as that prefix (Artetxe et al. 2022,
    sec. 3): a candidate's log-likelihood and a generation's first step are those of one pass under the prefix-LM mask
    over the prompt, with and without the KV cache; the causal end point keeps the causal mask. A checkpoint pretrained
    with masked prediction never learnt the next token: refused in one line."""
    from plm_lightning.evaluation.prompting import PromptScorer
    from plm_lightning.generation import Decoding, GenerationConfig, generate
    from plm_lightning.nn.masks import prefix_lm_mask
    from plm_lightning.prediction import load_generator

    prompt, candidate = "The function returns", " the value of x plus one."
    for fraction in (0.0, 0.5):
        scorer = PromptScorer(*load_generator(_continuum_checkpoint(tmp_path, fraction)))
        assert scorer.prefix_lm is (fraction > 0)
        context = [scorer.eos, *scorer.encode(prompt)]
        cand = scorer.encode(prompt + candidate)[len(context) - 1:]
        ids = torch.tensor([[*context, *cand]])
        with torch.no_grad():
            shapes = {"prefix": {"mask": prefix_lm_mask(torch.tensor([len(context)]), ids.shape[1]), "causal": False},
                      "causal": {}}
            logprobs = {k: scorer.model.lm_head(scorer.model.backbone(ids, StackInputs(**v)).last_hidden_state[0]).log_softmax(-1)
                        for k, v in shapes.items()}
        expected = {k: float(v[len(context) - 1:-1].gather(1, torch.tensor(cand)[:, None]).sum())
                    for k, v in logprobs.items()}
        total, _ = scorer.continuation_logprobs(prompt, candidate)
        assert total == pytest.approx(expected["prefix" if fraction else "causal"], rel=1e-5)
        assert (abs(expected["prefix"] - expected["causal"]) > 1e-3) is True  # the two masks differ on this prompt
        prompt_ids = torch.tensor([context])
        with torch.no_grad():
            state = Decoding(scorer.model, True)
            first = state.step(state.start(prompt_ids, torch.ones_like(prompt_ids), None), prompt_ids.shape[1])
        reference = logprobs["prefix" if fraction else "causal"][len(context) - 1]
        assert torch.allclose(first[0].log_softmax(-1), reference, atol=1e-4)
        runs = [generate(scorer.model, prompt_ids, None, GenerationConfig("greedy", max_new_tokens=6, use_cache=c),
                         None) for c in (True, False)]
        assert runs[0] == runs[1]
    with pytest.raises(ConfigError, match="data.prediction=masked: its head fills masked positions"):
        load_generator(_continuum_checkpoint(tmp_path, 1.0, "masked"))
