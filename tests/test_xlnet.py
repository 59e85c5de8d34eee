"""XLNet: permutation masks mean what the paper says (property tests), the two streams see what they should, parity
with transformers' XLNetLMHeadModel both ways (two streams, padding, segments, memory, bidirectional data), and the
recipe's data, inspect view and CLI errors."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.corruption.permutation import (
    factorization_ranks,
    ngram_spans,
    permutation_mask,
    sample_span_targets,
)
from plm_lightning.data.xlnet import PermutationLMCollator, xlnet_layout
from plm_lightning.nn import get_preset
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.nn.xl_stack import XLStack
from plm_lightning.objectives import PermutationLM
from tests.conftest import ROOT, run_cli, spread_biases


def _order(length: int, perm_size: int, n_targets: int, n_functional: int, seed: int):
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(length)
    targets = np.zeros(length, bool)
    targets[chosen[:n_targets]] = True
    functional = np.zeros(length, bool)
    functional[chosen[n_targets:n_targets + n_functional]] = True
    ranks = factorization_ranks(length, perm_size, rng)
    return targets, functional, ranks, permutation_mask(targets, functional, ranks)


ORDERS = st.tuples(st.integers(1, 8), st.sampled_from([1, 2, 4]), st.integers(0, 10_000)).flatmap(
    lambda t: st.tuples(st.just(t[0] * t[1] * 2), st.just(t[0] * 2), st.integers(0, t[0] * t[1]),
                        st.integers(0, 2), st.just(t[2])))


@settings(max_examples=200, deadline=None)
@given(ORDERS)
def test_streams_see_exactly_what_precedes_them_in_the_order(case):
    length, perm_size, n_targets, n_functional, seed = case
    targets, functional, ranks, perm = _order(length, perm_size, n_targets, min(n_functional, length - n_targets), seed)
    order = np.where(~targets & ~functional, -1, ranks)  # context first, then the permuted rest
    content = ~perm | np.eye(length, dtype=bool)  # the content stream adds its own position
    assert (content == (order[None, :] <= order[:, None])).all()
    query = ~perm[targets]  # the query stream, at the targets
    assert (query == (order[None, :] < order[targets][:, None])).all()
    assert not query[np.arange(targets.sum()), np.flatnonzero(targets)].any()  # never its own content
    context = order == -1
    assert (~perm[:, context]).all() and not (~perm[np.ix_(context, targets)]).any()  # context: seen by all, sees no target


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.sampled_from([2, 4, 8]), st.integers(0, 10_000))
def test_local_permutation_is_one_permutation_per_chunk_in_sequence(chunks, perm_size, seed):
    ranks = factorization_ranks(chunks * perm_size, perm_size, np.random.default_rng(seed))
    assert sorted(ranks.tolist()) == list(range(chunks * perm_size))
    blocks = ranks.reshape(chunks, perm_size)
    assert (blocks - blocks[:1] == np.arange(chunks)[:, None] * perm_size).all()  # same pattern, chunk after chunk
    assert (ranks == factorization_ranks(chunks * perm_size, perm_size, np.random.default_rng(seed))).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(8, 200), st.integers(1, 60), st.integers(0, 10_000), st.sampled_from(["word", "token"]))
def test_span_targets_hit_the_budget_and_start_at_words(length, goal, seed, unit):
    rng = np.random.default_rng(seed)
    starts = rng.random(length) < 0.7
    starts[0] = True
    mask = sample_span_targets(starts, goal, np.random.default_rng(seed + 1), unit=unit)
    assert mask.sum() == min(goal, length)
    again = sample_span_targets(starts, goal, np.random.default_rng(seed + 1), unit=unit)
    assert (mask == again).all()


def test_spans_are_whole_word_ngrams_with_the_papers_lengths():
    """Long rows, K = 6: every span but a last one cut by the budget starts at a word and ends before one, spans never
    touch, and their lengths follow P(n) ~ 1/n over 1..5 words (mean 5 / H_5 = 2.19 words)."""
    rng = np.random.default_rng(0)
    starts = rng.random(600) < 0.6
    starts[0] = True
    words = []
    for seed in range(40):
        spans = ngram_spans(starts, 100, np.random.default_rng(seed))
        assert sum(e - b for b, e in spans) <= 100
        for k, (b, e) in enumerate(spans):
            assert starts[b] and (k == len(spans) - 1 or (e == 600 or starts[e]))
            if k:
                assert b > spans[k - 1][1]
            if k < len(spans) - 1:
                words.append(int(starts[b:e].sum()))
    assert abs(np.mean(words) - 5 / sum(1 / n for n in range(1, 6))) < 0.25


def _pair_sample(length: int = 40, b_start: int = 18, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 90, length)
    ids[0], ids[b_start - 1], ids[-1] = 2, 3, 3  # [CLS] A [SEP] B [SEP]
    return {"index": seed, "epoch": 0, "input_ids": ids, "document_ids": np.zeros(length, np.int64),
            "segment_b_start": b_start, "word_starts": rng.random(length) < 0.7}


def test_collator_rows_are_xlnet_pairs_with_uncorrupted_inputs():
    collate = PermutationLMCollator(seq_len=48, pad_id=0, sep_id=3, cls_id=2, partial_prediction_k=6, perm_size=24)
    samples = [_pair_sample(seed=s) for s in range(4)]
    batch = collate(samples)
    tokens, types = xlnet_layout(samples[0]["input_ids"], 18, 2)
    assert tokens[-1] == 2 and tokens[16] == 3 and types.tolist() == [0] * 17 + [1] * 22 + [2]
    assert batch["input_ids"][0, :40].tolist() == tokens.tolist()
    labels, ids = batch["labels"], batch["input_ids"]
    targets = labels != -100
    assert (labels[targets] == ids[targets]).all()  # the input is not corrupted
    assert targets.sum(1).tolist() == [round(40 / 6)] * 4  # the last 1/K of each row's order
    assert not (targets & ((ids == 3) | (ids == 2) | ~batch["attention_mask"])).any()  # never <sep>, <cls>, padding
    assert batch["perm_mask"].shape == (4, 48, 48)
    again = collate(samples)
    assert all(torch.equal(batch[k], again[k]) for k in batch)


def test_bidirectional_data_reverses_the_second_half_of_the_batch():
    collate = PermutationLMCollator(seq_len=40, pad_id=0, sep_id=3, cls_id=2, partial_prediction_k=6, perm_size=20,
                                    bidirectional_data=True)
    batch = collate([_pair_sample(seed=s) for s in range(4)])
    forward, _ = xlnet_layout(_pair_sample(seed=3)["input_ids"], 18, 2)
    assert batch["input_ids"][3].tolist() == forward[::-1].tolist() and batch["input_ids"][3, 0] == 2


def _model(seed: int = 0, **overrides) -> PermutationLM:
    torch.manual_seed(seed)
    model = PermutationLM(vocab_size=101, backbone_overrides={"dropout": 0.0, "attention_dropout": 0.0,
                                                              "ffn_dropout": 0.0, **overrides})
    return spread_biases(model)


def test_query_stream_never_reads_its_own_token_but_the_content_stream_does():
    model = _model()
    ids = torch.randint(5, 100, (1, 16))
    targets_np, _, _, perm_np = _order(16, 8, 4, 0, 3)
    perm, targets = torch.from_numpy(perm_np)[None], torch.from_numpy(np.flatnonzero(targets_np))[None]
    t = int(targets[0, 0])
    changed = ids.clone()
    changed[0, t] = (changed[0, t] + 7) % 100
    with torch.no_grad():
        a = model.backbone(ids, StackInputs(mask=~perm.bool(), output_positions=targets))
        b = model.backbone(changed, StackInputs(mask=~perm.bool(), output_positions=targets))
    assert torch.allclose(a.query_state[0, 0], b.query_state[0, 0], atol=1e-6)  # g at t: blind to x_t
    assert not torch.allclose(a.last_hidden_state[0, t], b.last_hidden_state[0, t])  # h at t: sees x_t
    for row, i in enumerate(targets[0].tolist()[1:], start=1):  # the other targets: changed iff the order lets them see t
        moved = not torch.allclose(a.query_state[0, row], b.query_state[0, row], atol=1e-6)
        assert moved == (not perm_np[i, t]), (i, t)


def test_memory_extends_the_context_exactly():
    """Transformer-XL recurrence: a causal stack reading a segment with the previous one's memory computes what one
    forward over both computes for the second segment (memory covers the whole first segment)."""
    cfg = get_preset("tiny-transformer-xl").replace(vocab_size=101, mem_len=12, dropout=0.0, attention_dropout=0.0,
                                                    ffn_dropout=0.0)
    torch.manual_seed(0)
    stack = XLStack(cfg, causal=True).eval()
    ids = torch.randint(0, 101, (2, 24))
    with torch.no_grad():
        whole = stack.__class__(cfg.replace(mem_len=0), causal=True).eval()
        whole.load_state_dict(stack.state_dict())
        full = whole(ids).last_hidden_state
        first = stack(ids[:, :12])
        second = stack(ids[:, 12:], StackInputs(memory=first.memory))
    assert torch.allclose(second.last_hidden_state, full[:, 12:], atol=1e-5)
    assert all(m.shape == (2, 12, cfg.hidden_size) and not m.requires_grad for m in second.memory)


transformers = pytest.importorskip("transformers")


def _hf_xlnet(**config):
    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=101, d_model=32, n_layer=2, n_head=4, d_inner=48, **config)
    model = transformers.XLNetLMHeadModel(cfg)
    with torch.no_grad():  # biases, norms, u/v/b/s and the query embedding off their initial values
        for name, p in model.named_parameters():
            if p.ndim != 2 or "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def _inputs(batch: int = 2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (batch, 12), generator=g)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    mask = torch.ones_like(ids)
    mask[-1, 10:] = 0
    perm = torch.from_numpy(np.stack([_order(12, 6, 3, 1, s)[3] for s in range(batch)]))
    targets = torch.stack([torch.from_numpy(np.flatnonzero(_order(12, 6, 3, 1, s)[0])) for s in range(batch)])
    mapping = torch.zeros(batch, 3, 12)
    mapping[torch.arange(batch)[:, None], torch.arange(3)[None], targets] = 1
    return ids, types, mask, perm, targets, mapping


def _ours_logits(model, ids, types, mask, perm, targets, memory=None):
    with torch.no_grad():
        inputs = StackInputs(attention_mask=mask, ids={} if types is None else {"token_type_ids": types},
                             mask=None if perm is None else ~perm.bool(), output_positions=targets, memory=memory)
        out = model.backbone(ids, inputs)
        return model.lm_head(out.query_state if targets is not None else out.last_hidden_state), out


@pytest.mark.parametrize("bi_data", [False, True])
def test_import_then_export_matches_xlnet_lm_head_model(bi_data, tmp_path):
    from plm_lightning.interop import export_checkpoint
    from plm_lightning.objectives.loading import import_hf
    from tests.test_parity import _load_module

    hf = _hf_xlnet(bi_data=bi_data)
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ours = _load_module(tmp_path / "ours.ckpt")
    ids, types, mask, perm, targets, mapping = _inputs(4 if bi_data else 2)
    with torch.no_grad():
        expected = hf(input_ids=ids, token_type_ids=types, attention_mask=mask, perm_mask=perm.float(),
                      target_mapping=mapping).logits
    got, _ = _ours_logits(ours, ids, types, mask, perm, targets)
    assert (got - expected).abs().max() <= 1e-4
    export_checkpoint(tmp_path / "ours.ckpt", tmp_path / "exported")
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["architectures"] == ["XLNetLMHeadModel"]
    again = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        back = again(input_ids=ids, token_type_ids=types, attention_mask=mask, perm_mask=perm.float(),
                     target_mapping=mapping).logits
    assert (back - expected).abs().max() <= 1e-4


def test_memory_matches_xlnet_mems(tmp_path):
    """Two consecutive segments with mem_len 8: our memory and transformers' ``mems`` give the same logits."""
    hf = _hf_xlnet(mem_len=8)
    from plm_lightning.interop.xlnet import xlnet_from_config, xlnet_from_hf

    cfg = xlnet_from_config(hf.config.to_dict())
    ours = PermutationLM(backbone="tiny-xlnet", vocab_size=101, backbone_overrides=cfg.to_dict()).eval()
    ours.load_state_dict(xlnet_from_hf(hf.state_dict(), cfg), strict=False)
    ids, types, *_ = _inputs()
    with torch.no_grad():
        first = hf(input_ids=ids, token_type_ids=types, use_mems=True)
        expected = hf(input_ids=ids.flip(1), token_type_ids=types, mems=first.mems, use_mems=True).logits
    _, out = _ours_logits(ours, ids, types, None, None, None)
    got, _ = _ours_logits(ours, ids.flip(1), types, None, None, None, memory=out.memory)
    assert (got - expected).abs().max() <= 1e-4


@pytest.mark.slow
def test_xlnet_inspect_statistics(tmp_path):
    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "xlnet.yaml"), "--json", "--batches", "2"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["objective"] == "PermutationLM" and stats["corruption"] == "permutation_lm"
    assert abs(stats["loss_fraction"] - 1 / 6) < 0.02 and stats["context_before_targets"] == 1.0
    assert stats["num_predict"] == round(128 / 6) and 1.3 < stats["mean_span_length"] < 3.5
    view = run_cli(["inspect", "--config", str(ROOT / "configs" / "xlnet.yaml")], cwd=tmp_path)
    assert "query stream g" in view.stdout and "content stream h" in view.stdout


@pytest.mark.parametrize("args,needles", [
    (["--data.seq_len", "129"], ["data.seq_len=129", "multiple of data.perm_size=64", "even seq_len"]),
    (["--model.backbone_overrides", "{mem_len: -1}"], ["mem_len=-1 must be >= 0"]),
    (["--model.backbone", "tiny"], ["PermutationLM needs an XLNet backbone"]),
    (["--model.backbone_overrides", "{bidirectional_data: true}"], ["data.bidirectional_data=False"]),
])
def test_xlnet_bad_input_is_one_line(args, needles, tmp_path):
    from tests.test_cli import _one_line_error

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "xlnet.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)
