"""The fused, chunked linear cross-entropy equals ``F.cross_entropy(F.linear(h, W, b), y)`` in value, gradients and
by-products, for any chunking, with and without a bias, under autocast, and inside every objective."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.nn.losses import linear_cross_entropy


def _inputs(n: int, h: int, v: int, bias: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, requires_grad=True)
    weight = (torch.randn(v, h, generator=g) * 0.5).requires_grad_()
    b = (torch.randn(v, generator=g) * 0.5).requires_grad_() if bias else None
    targets = torch.randint(0, v, (n,), generator=g)
    return hidden, weight, b, targets


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 70), st.integers(1, 24), st.integers(2, 90), st.booleans(), st.integers(1, 4000),
       st.integers(1, 100), st.integers(0, 2**16), st.sampled_from([1, 8, 64]))
def test_fused_equals_unfused_in_value_gradients_and_byproducts(n, h, v, bias, chunk, vocab_block, seed, pad):
    """Any chunking, vocabulary blocks and vocabulary padding (``pad``: the GEMMs' rows padded to a multiple; the
    padded logits, zeros before masking, would add probability mass and win the argmax of rows whose logits are all
    negative)."""
    hidden, weight, b, targets = _inputs(n, h, v, bias, seed)
    logits = F.linear(hidden, weight, b)
    reference = F.cross_entropy(logits, targets)
    (3.0 * reference).backward()
    expected = [t.grad.clone() for t in (hidden, weight, b) if t is not None]
    for t in (hidden, weight, b):
        if t is not None:
            t.grad = None
    out = linear_cross_entropy(hidden, weight, b, targets, chunk_elements=chunk, vocab_block=vocab_block,
                               pad_vocab_multiple=pad)
    (3.0 * out.loss).backward()  # the incoming gradient scales the precomputed ones
    assert weight.grad.shape == weight.shape and (b is None or b.grad.shape == b.shape)
    assert torch.allclose(out.loss, reference, atol=1e-5)
    for got, want in zip([t.grad for t in (hidden, weight, b) if t is not None], expected):
        assert torch.allclose(got, want, atol=1e-5)
    assert torch.equal(out.predictions, logits.argmax(-1))
    assert torch.allclose(out.token_losses, F.cross_entropy(logits, targets, reduction="none"), atol=1e-5)


def test_no_grad_gives_the_loss_and_refuses_backward():
    hidden, weight, b, targets = _inputs(9, 8, 30, True, 0)
    with torch.no_grad():
        out = linear_cross_entropy(hidden, weight, b, targets, chunk_elements=60)
    assert torch.allclose(out.loss, F.cross_entropy(F.linear(hidden, weight, b), targets), atol=1e-5)
    detached = linear_cross_entropy(hidden.detach(), weight.detach(), None, targets)
    assert not detached.loss.requires_grad


@pytest.mark.parametrize("vocab_block", [7, 50])
def test_autocast_matches_the_unfused_head_under_autocast(vocab_block):
    hidden, weight, b, targets = _inputs(40, 16, 50, True, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = F.cross_entropy(F.linear(hidden, weight, b).float(), targets)
        out = linear_cross_entropy(hidden, weight, b, targets, chunk_elements=500, vocab_block=vocab_block)
    assert abs(float(out.loss) - float(reference)) < 2e-2
    out.loss.backward()
    assert hidden.grad.dtype == torch.float32 and weight.grad.dtype == torch.float32
    want = torch.autograd.grad(F.cross_entropy(F.linear(hidden, weight, b), targets), (hidden, weight, b))
    for got, expected in zip((hidden.grad, weight.grad, b.grad), want):
        assert (got - expected).abs().max() < 2e-2


@pytest.mark.parametrize("objective,backbone", [("MaskedLM", "tiny"), ("CausalLM", "tiny-gpt"),
                                                ("Seq2SeqLM", "tiny-t5")])
def test_objectives_give_the_same_loss_and_gradients_fused_or_not_padded_or_not(objective, backbone):
    """The plain head on the real vocabulary is the reference; the fused head, and both heads with the vocabulary
    padded (101 -> 128 rows in the GEMMs), give its loss, predictions and gradients, with unchanged parameters."""
    from plm_lightning import objectives

    cls = getattr(objectives, objective)
    overrides = {"dropout": 0.0, "attention_dropout": 0.0, "ffn_dropout": 0.0}
    plain = cls(backbone=backbone, vocab_size=101, backbone_overrides=overrides, fused_cross_entropy=False,
                pad_vocab_multiple=1)
    variants = [cls(backbone=backbone, vocab_size=101, backbone_overrides=overrides, fused_cross_entropy=fused,
                    pad_vocab_multiple=pad) for fused, pad in ((True, 1), (True, 64), (False, 64))]
    for module in variants:
        module.load_state_dict(plain.state_dict())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 101, (6, 24), generator=g)
    labels = torch.where(torch.rand(6, 24, generator=g) < 0.6, ids, torch.full_like(ids, -100))  # > 64 loss rows
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    if objective == "Seq2SeqLM":
        batch.update(decoder_input_ids=ids.roll(1, 1), labels=ids, decoder_attention_mask=torch.ones_like(ids))
    outs = []
    for module in (plain, *variants):
        out = module.compute_loss(batch)
        out["loss"].backward()
        outs.append(out)
    grads = dict(plain.named_parameters())
    for module, out in zip(variants, outs[1:]):
        assert torch.allclose(out["loss"], outs[0]["loss"], atol=1e-5)
        assert torch.equal(out["lm_predictions"], outs[0]["lm_predictions"])
        for name, p in module.named_parameters():
            assert p.shape == grads[name].shape and torch.allclose(p.grad, grads[name].grad, atol=1e-5), name


def test_padded_head_returns_the_real_vocabulary_and_never_predicts_padding():
    """Logits of the padded head (rows all negative, so zero padding would win an unmasked argmax) have the real
    width and equal the plain head's; a bad multiple is one line."""
    from plm_lightning.errors import ConfigError
    from plm_lightning.nn import LMHead, get_preset

    head = LMHead(get_preset("tiny").replace(vocab_size=50), transform=False)
    with torch.no_grad():
        head.bias.fill_(-100.0)
    hidden = torch.randn(80, head.weight.shape[1])
    plain = head(hidden)
    head.pad_vocab_multiple = 64
    padded = head(hidden)
    assert padded.shape == (80, 50) and torch.allclose(padded, plain, atol=1e-5)
    out = head(hidden, targets=torch.zeros(80, dtype=torch.long))
    assert int(out.predictions.max()) < 50 and torch.equal(out.predictions, plain.argmax(-1))
    from plm_lightning.objectives import CausalLM

    with pytest.raises(ConfigError, match="pad_vocab_multiple=0"):
        CausalLM(backbone="tiny-gpt", vocab_size=50, pad_vocab_multiple=0)


def test_no_rows_give_zero_gradients():
    hidden, weight, b, _ = _inputs(3, 8, 30, True, 0)
    out = linear_cross_entropy(hidden[:0], weight, b, torch.zeros(0, dtype=torch.long))
    (grad,) = torch.autograd.grad(out.loss, weight, torch.tensor(1.0))  # the loss is NaN (a mean of nothing)
    assert torch.equal(grad, torch.zeros_like(weight))


def test_a_second_backward_through_the_same_forward_is_refused_not_double_scaled():
    hidden, weight, b, targets = _inputs(6, 8, 30, True, 0)
    out = linear_cross_entropy(hidden, weight, b, targets)
    (2.0 * out.loss).backward(retain_graph=True)
    first = weight.grad.clone()
    with pytest.raises(RuntimeError, match="once per forward"):
        out.loss.backward()
    reference = F.cross_entropy(F.linear(hidden, weight, b), targets)
    (want,) = torch.autograd.grad(2.0 * reference, weight)
    assert torch.allclose(first, want, atol=1e-5)
