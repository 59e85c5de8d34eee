"""The unified-mask objectives: GLM's blank infilling (property tests: recoverable, 2D positions, Part B layout),
UniLM's four LMs (the mask decides what a prediction sees), the decoder-only prefix-LM rows of T5/UL2, and the
attention shapes they share."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.glm import blank_infill, generation_span, nlu_spans
from plm_lightning.nn.masks import attention_shape, prefix_lm_mask
from plm_lightning.objectives import CausalLM, MaskedLM

MASK, START, END = 1, 2, 3


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 300), st.integers(0, 2**32), st.booleans())
def test_glm_blank_infilling_is_recoverable_with_2d_positions(length, seed, generation):
    rng = np.random.default_rng(seed)
    tokens = 100 + np.arange(length)
    spans = generation_span(length, rng) if generation else nlu_spans(length, 0.15, 3.0, rng)
    covered = sum(e - s for s, e in spans)
    if generation:
        assert spans[0][1] == length and length // 2 <= covered < length
    else:
        assert covered >= np.ceil(0.15 * length)  # at least 15%
        assert all(b[0] > a[1] for a, b in zip(spans, spans[1:]))  # a kept token between two spans
    out = blank_infill(tokens, spans, rng, MASK, START, END)
    a = out.part_a_length
    assert len(out.input_ids) == length + 2 * len(spans)
    assert (out.input_ids[:a] == MASK).sum() == len(spans) and (out.labels[:a] == IGNORE_INDEX).all()
    assert (out.position_ids[:a] == np.arange(a)).all() and (out.block_position_ids[:a] == 0).all()
    # Part B: [S] span -> span [E], every token at its [MASK]'s position, intra-span positions 1, 2, ...
    restored = {}
    cursor = a
    for start, end in out.spans:
        n = end - start
        assert out.input_ids[cursor] == START and (out.input_ids[cursor + 1: cursor + n + 1] == tokens[start:end]).all()
        assert (out.labels[cursor: cursor + n + 1] == [*tokens[start:end], END]).all()
        assert (out.block_position_ids[cursor: cursor + n + 1] == np.arange(1, n + 2)).all()
        mask_position = out.position_ids[cursor]
        assert out.input_ids[mask_position] == MASK and (out.position_ids[cursor: cursor + n + 1] == mask_position).all()
        restored[int(mask_position)] = tokens[start:end].tolist()
        cursor += n + 1
    rebuilt = [t for i, tok in enumerate(out.input_ids[:a].tolist()) for t in (restored[i] if tok == MASK else [tok])]
    assert rebuilt == tokens.tolist()


def test_glm_span_statistics():
    rng = np.random.default_rng(0)
    lengths = [e - s for _ in range(400) for s, e in nlu_spans(200, 0.15, 3.0, rng)]
    assert abs(np.mean(lengths) - 3.0 / (1 - np.exp(-3.0))) < 0.1 and min(lengths) >= 1


def test_attention_shapes():
    assert attention_shape("bidirectional", 4) is None
    l2r, r2l = attention_shape("left_to_right", 4)[0, 0], attention_shape("right_to_left", 4)[0, 0]
    assert torch.equal(l2r, torch.tril(torch.ones(4, 4, dtype=torch.bool))) and torch.equal(r2l, l2r.T)
    prefix = attention_shape("prefix", 5, torch.tensor([2]))[0, 0]
    assert prefix[0, 1] and not prefix[1, 2] and prefix[4, 0] and not prefix[2, 3]
    assert torch.equal(prefix, prefix_lm_mask(torch.tensor([2]), 5)[0, 0])
    with pytest.raises(ValueError, match="prefix_lengths"):
        attention_shape("prefix", 5)


def _unilm_batch(kind: int, prefix: int = 5):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 90, (1, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 6] = 7
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "attention_kind": torch.tensor(kind), "prefix_lengths": torch.tensor([prefix]),
            "token_type_ids": torch.zeros_like(ids)}


@pytest.mark.parametrize("kind,sees_left,sees_right", [(0, True, True), (1, True, False), (2, False, True),
                                                       (3, True, False)])
def test_unilm_prediction_sees_only_what_its_lm_allows(kind, sees_left, sees_right):
    """The loss at position 6 under each LM changes with a token on its left (2) / right (9) only if visible."""
    torch.manual_seed(0)
    model = MaskedLM(vocab_size=101, backbone_overrides={"dropout": 0.0, "attention_dropout": 0.0}).eval()
    base = model.compute_loss(_unilm_batch(kind))["loss"]
    for position, visible in ((2, sees_left), (9, sees_right)):
        batch = _unilm_batch(kind)
        batch["input_ids"][0, position] = 99
        changed = not torch.allclose(model.compute_loss(batch)["loss"], base, atol=1e-6)
        assert changed == visible, (kind, position)


def test_unilm_collator_draws_the_lm_mixture_and_sets_segments(tmp_path):
    from plm_lightning.data import UniLMDataModule

    dm = UniLMDataModule(seq_len=64, batch_size=4, tokenizer_vocab_size=2048, cache_dir=str(tmp_path))
    dm.setup()
    collate, loader = dm.collator(), dm.train_dataloader()
    kinds = []
    for i, batch in enumerate(loader):
        kind = int(batch["attention_kind"])
        kinds.append(kind)
        real = batch["attention_mask"].bool()
        assert set(batch["token_type_ids"][real].tolist()) == {0: {0, 1}, 1: {2}, 2: {3}, 3: {4, 5}}[kind]
        if kind in (0, 3):  # the target segment starts at the prefix length
            starts = (batch["token_type_ids"] == {0: 1, 3: 5}[kind]).int().argmax(1)
            assert torch.equal(starts, batch["prefix_lengths"])
        if i == 150:
            break
    shares = np.bincount(kinds, minlength=4) / len(kinds)
    assert abs(shares[0] - 1 / 3) < 0.1 and abs(shares[3] - 1 / 3) < 0.1 and abs(shares[1] - 1 / 6) < 0.08
    assert collate.objective == "unified_lm"
    with pytest.raises(ConfigError, match="data.lm_mixture"):
        UniLMDataModule(lm_mixture=[1, 1])
    with pytest.raises(ConfigError, match="continuation_pairs"):
        UniLMDataModule(packing="sentence_pairs")


def test_unilm_draws_one_lm_per_global_batch_on_every_rank(tmp_path):
    """The LM is a function of (seed, epoch, global batch number): each rank's share of a step asks for the same
    one, however the step's samples are split over ranks, and the steps draw the mixture."""
    from plm_lightning.data import UniLMDataModule

    dm = UniLMDataModule(seq_len=64, batch_size=4, tokenizer_vocab_size=2048, cache_dir=str(tmp_path))
    dm.setup()
    collate, dataset = dm.collator(), dm.train_dataloader().dataset
    collate.global_batch = 8  # two ranks of 4

    def kind(epoch: int, positions: list[int]) -> int:
        return int(collate([dataset[(epoch, p % len(dataset), p)] for p in positions])["attention_kind"])

    steps = [{kind(0, list(range(8 * t + r, 8 * t + 8, 2))) for r in (0, 1)} | {kind(0, list(range(8 * t, 8 * t + 8)))}
             for t in range(40)]
    assert all(len(kinds) == 1 for kinds in steps)  # rank 0, rank 1 and one process with the whole batch agree
    assert len({k for kinds in steps for k in kinds}) == 4
    assert [kind(1, list(range(8 * t, 8 * t + 8))) for t in range(40)] != [min(k) for k in steps]  # epochs redraw


def test_decoder_only_rows_label_the_target_only():
    from plm_lightning.data.seq2seq import concatenate_for_decoder

    pairs = [(np.array([10, 11, 12, 1]), np.array([20, 21, 1])), (np.array([30, 1]), np.array([40, 1]))]
    out = concatenate_for_decoder(pairs, pad_id=0)
    assert out["input_ids"][0].tolist() == [10, 11, 12, 1, 20, 21, 1]
    assert out["labels"][0].tolist() == [-100, -100, -100, 20, 21, 1, -100]
    assert out["labels"][1].tolist() == [-100, 40, 1, -100, -100, -100, -100]
    assert out["prefix_lengths"].tolist() == [4, 2] and out["attention_mask"][1].tolist() == [1, 1, 1, 1, 0, 0, 0]


def test_prefix_lm_loss_does_not_see_the_future_but_the_prefix_is_bidirectional():
    torch.manual_seed(0)
    model = CausalLM(vocab_size=101, backbone_overrides={"dropout": 0.0, "attention_dropout": 0.0}).eval()
    ids = torch.randint(5, 90, (1, 10))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 5] = 7  # the 6th position predicts a target token
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
             "prefix_lengths": torch.tensor([4])}
    base = model.compute_loss(batch)["loss"]
    for position, visible in ((1, True), (3, True), (8, False)):
        changed_ids = ids.clone()
        changed_ids[0, position] = 99
        loss = model.compute_loss({**batch, "input_ids": changed_ids})["loss"]
        assert (not torch.allclose(loss, base, atol=1e-6)) == visible
    # the prefix is bidirectional: position 1's state sees position 3 (it would not under a causal mask)
    hidden = model.run_stack(model.backbone, batch)
    changed_ids = ids.clone()
    changed_ids[0, 3] = 99
    assert not torch.allclose(model.run_stack(model.backbone, {**batch, "input_ids": changed_ids})[0, 1], hidden[0, 1])


def test_glm_block_positions_enter_the_embedding():
    torch.manual_seed(0)
    model = CausalLM(backbone="tiny-glm", vocab_size=101).eval()
    ids = torch.randint(5, 90, (1, 8))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(8)[None],
             "block_position_ids": torch.zeros_like(ids), "prefix_lengths": torch.tensor([5])}
    a = model.run_stack(model.backbone, batch)
    b = model.run_stack(model.backbone, {**batch, "block_position_ids": torch.arange(8)[None]})
    assert not torch.allclose(a, b)
