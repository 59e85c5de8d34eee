"""Generation: KV-cache decoding equals full recomputation (causal LM and encoder-decoder, every strategy), beam
search finds sequences at least as probable as greedy, top-k/top-p filtering, greedy parity with transformers' T5 and
BART, and the `predict` command."""

import numpy as np
import pytest
import torch

from plm_lightning.generation import GenerationConfig, filter_logits, generate, sequence_logprob
from plm_lightning.objectives import CausalLM, Seq2SeqLM


def _models():
    """Random models, their weights spread out so greedy decoding does not repeat one token (a cache bug that
    only mattered on varied text would hide behind a constant output)."""
    torch.manual_seed(0)
    models = {"gpt": CausalLM(backbone="tiny-gpt", vocab_size=97), "t5": Seq2SeqLM(backbone="tiny-t5", vocab_size=97),
              "t5-v1_1": Seq2SeqLM(backbone="tiny-t5-v1_1", vocab_size=97),
              "bart": Seq2SeqLM(backbone="tiny-bart", vocab_size=97, decoder_start_token="eos"),
              # GPT-3's alternating dense and locally banded layers: the cache must keep the band
              "gpt-banded": CausalLM(backbone="tiny-gpt", vocab_size=97,
                                     backbone_overrides={"local_attention_window": 4, "global_attention_every": 2})}
    for model in models.values():
        _spread(model)
    # Transformer-XL, whose segment memory is the cache: drawn after the others (their weights stay as they were)
    models["gpt-xl"] = _spread(CausalLM(backbone="tiny-transformer-xl", vocab_size=97))
    return {k: m.eval() for k, m in models.items()}


@torch.no_grad()
def _spread(model):
    for name, p in model.named_parameters():
        if p.ndim == 1:
            p.add_(torch.randn_like(p) * 0.1)
        elif "embeddings.token" not in name:  # tied tables would make every step repeat its input
            p.mul_(4.0)
    return model


MODELS = _models()


def _prompt(kind, rows=2, length=9):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (rows, length), generator=g)
    mask = torch.ones_like(ids)
    if not kind.startswith("gpt") and rows > 1:
        mask[1, 6:] = 0
        ids[1, 6:] = 0
    return ids, mask


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_cache_gives_the_same_tokens_as_recomputation(kind, strategy):
    model = MODELS[kind]
    ids, mask = _prompt(kind)
    start = None if kind.startswith("gpt") else 0
    runs = [generate(model, ids, mask, GenerationConfig(strategy, max_new_tokens=12, num_beams=3, top_k=20,
                                                        top_p=0.9, seed=5, use_cache=cache), None, start)
            for cache in (True, False)]
    assert runs[0] == runs[1] and all(len(r) == 12 for r in runs[0])


@pytest.mark.parametrize("kind", list(MODELS))
def test_beam_search_with_every_token_as_a_beam_is_exact(kind):
    """With as many beams as tokens, two steps of beam search find the most probable two-token continuation (checked
    by brute force over all V^2 of them); with one beam it is greedy decoding."""
    from plm_lightning.generation import Decoding

    model = MODELS[kind]
    ids, _ = _prompt(kind, rows=1)
    start = None if kind.startswith("gpt") else 0
    beam = generate(model, ids, None, GenerationConfig("beam", max_new_tokens=2, num_beams=97, length_penalty=0.0),
                    None, start)[0]
    state = Decoding(model, use_cache=False)
    sequence = state.start(ids, torch.ones_like(ids), start)
    with torch.no_grad():
        first = state.step(sequence, sequence.shape[1]).log_softmax(-1)[0]
        grown = torch.cat([sequence.expand(97, -1), torch.arange(97)[:, None]], dim=1)
        state.encoder_out = None if state.encoder_out is None else state.encoder_out.expand(97, -1, -1)
        state.encoder_mask = None if state.encoder_mask is None else state.encoder_mask.expand(97, -1)
        second = state.step(grown, grown.shape[1]).log_softmax(-1)
    total = first[:, None] + second
    best = divmod(int(total.argmax()), 97)
    assert beam == list(best)
    greedy = generate(model, ids, None, GenerationConfig("greedy", max_new_tokens=6), None, start)[0]
    assert generate(model, ids, None, GenerationConfig("beam", max_new_tokens=6, num_beams=1), None, start)[0] == greedy
    assert abs(sequence_logprob(model, ids, beam, start) - float(total.max())) < 1e-4


def test_eos_stops_each_row():
    model = MODELS["t5"]
    ids, mask = _prompt("t5")
    first = generate(model, ids, mask, GenerationConfig("greedy", max_new_tokens=8), None, 0)
    eos = first[0][-1]  # pretend row 0's last token is EOS: each row stops at its first EOS, which it keeps
    out = generate(model, ids, mask, GenerationConfig("greedy", max_new_tokens=8), eos, 0)
    for row, full in zip(out, first):
        assert row == (full[: full.index(eos) + 1] if eos in full else full)


def test_filter_logits_top_k_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    assert torch.isinf(filter_logits(logits, top_k=2)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 needs the second; 0.75 >= 0.7 stops
    assert (~torch.isinf(filter_logits(logits, top_p=0.5))).tolist() == [[True, False, False, False]]


def test_sampling_follows_the_distribution():
    model = MODELS["gpt"]
    ids, _ = _prompt("gpt", rows=1)
    with torch.no_grad():
        probs = model.lm_head(model.backbone(ids).last_hidden_state[:, -1]).softmax(-1)[0]
    draws = [generate(model, ids, None, GenerationConfig("sample", max_new_tokens=1, seed=s), None)[0][0]
             for s in range(400)]
    top = int(probs.argmax())
    assert abs(np.mean(np.array(draws) == top) - float(probs[top])) < 0.08


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("kind,architecture,start", [("t5", "T5ForConditionalGeneration", 0),
                                                     ("bart", "BartForConditionalGeneration", 2)])
def test_greedy_generation_matches_transformers(kind, architecture, start, tmp_path):
    """Exported to transformers, the same model decodes the same tokens with its ``generate`` (every forced-token
    and n-gram rule of the transformers generation config switched off)."""
    from plm_lightning.checkpoint_format import CHECKPOINT_KEY
    from plm_lightning.interop import export_checkpoint

    model = MODELS[kind]
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                CHECKPOINT_KEY: {"objective": "Seq2SeqLM", "backbone": model.config.to_dict()}}, tmp_path / "m.ckpt")
    export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    hf = getattr(transformers, architecture).from_pretrained(tmp_path / "hf").eval()
    ids, mask = _prompt(kind)
    theirs = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False, num_beams=1,
                         eos_token_id=None, forced_eos_token_id=None, forced_bos_token_id=None, min_new_tokens=10,
                         no_repeat_ngram_size=0, decoder_start_token_id=start)
    ours = generate(model, ids, mask, GenerationConfig("greedy", max_new_tokens=10), None, start)
    assert [row[1:].tolist() for row in theirs] == ours
    assert len({tuple(row) for row in ours}) == len(ours)  # each prompt its own continuation


@pytest.mark.parametrize("kind", list(MODELS))
def test_cached_step_logits_equal_recomputed_ones(kind):
    from plm_lightning.generation import Decoding

    model = MODELS[kind]
    ids, mask = _prompt(kind)
    forced = torch.randint(3, 97, (2, 7), generator=torch.Generator().manual_seed(3))
    runs = []
    for cache in (True, False):
        state = Decoding(model, cache)
        sequence = state.start(ids, mask, None if kind.startswith("gpt") else 0)
        steps, new = [], sequence.shape[1]
        with torch.no_grad():
            for t in range(forced.shape[1]):
                steps.append(state.step(sequence, new))
                sequence, new = torch.cat([sequence, forced[:, t:t + 1]], dim=1), 1
        runs.append(torch.stack(steps))
    assert (runs[0] - runs[1]).abs().max() <= 1e-4 * max(1.0, float(runs[1].abs().max()))


def _left_padded(lengths, vocab=97, pad=0):
    g = torch.Generator().manual_seed(4)
    rows = [torch.randint(3, vocab, (n,), generator=g) for n in lengths]
    width = max(lengths)
    ids = torch.full((len(rows), width), pad)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
    return rows, ids, mask


@pytest.mark.parametrize("kind", ["gpt", "gpt-banded"])
@pytest.mark.parametrize("cache", [True, False])
def test_left_padded_prompts_continue_as_each_prompt_alone(kind, cache):
    model = MODELS[kind]
    rows, ids, mask = _left_padded([9, 4, 6])
    for strategy in ("greedy", "beam"):
        config = GenerationConfig(strategy, max_new_tokens=8, num_beams=3, use_cache=cache)
        batched = generate(model, ids, mask, config, None)
        alone = [generate(model, row[None], None, config, None)[0] for row in rows]
        assert batched == alone
    with pytest.raises(Exception, match="on the left"):
        generate(model, ids.flip(1), mask.flip(1), GenerationConfig("greedy", max_new_tokens=2), None)


def test_left_padded_generation_matches_transformers_generate(tmp_path):
    from plm_lightning.checkpoint_format import CHECKPOINT_KEY
    from plm_lightning.interop import export_checkpoint

    model = MODELS["gpt"]
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                CHECKPOINT_KEY: {"objective": "CausalLM", "backbone": model.config.to_dict()}}, tmp_path / "m.ckpt")
    export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    _, ids, mask = _left_padded([9, 4, 6])
    theirs = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, num_beams=1,
                         eos_token_id=None, pad_token_id=0, min_new_tokens=8, no_repeat_ngram_size=0)
    ours = generate(model, ids, mask, GenerationConfig("greedy", max_new_tokens=8), None)
    assert [row[ids.shape[1]:].tolist() for row in theirs] == ours
    assert len({tuple(row) for row in ours}) == len(ours)  # each prompt its own continuation


def test_sampling_a_file_gives_each_prompt_its_own_draws(tmp_path, monkeypatch):
    """One stream of draws per file (seeded by --seed): the same prompt twice samples two continuations, and the file
    samples the same again with the same seed; ``-`` reads the prompts from standard input."""
    import io

    from plm_lightning.prediction import predict_file
    from tests.conftest import tiny_pretrained

    ckpt = tiny_pretrained(tmp_path / "gpt2.ckpt", "gpt2")
    (tmp_path / "p.txt").write_text("The list of\nThe list of\n")
    config = GenerationConfig("sample", max_new_tokens=8, seed=3)
    first = [r["output"] for r in predict_file(ckpt, str(tmp_path / "p.txt"), config)]
    assert first[0] != first[1]
    assert [r["output"] for r in predict_file(ckpt, str(tmp_path / "p.txt"), config)] == first
    monkeypatch.setattr("sys.stdin", io.StringIO("The list of\nThe list of\n"))
    assert [r["output"] for r in predict_file(ckpt, "-", config)] == first
