"""Block-diagonal (varlen) attention for padded and packed batches: xformers' bias built on CPU and compared with the
dense mask applied by SDPA, then whole stacks on the xformers path (its kernel stood in for by SDPA over the
materialised bias, since xformers has no CPU kernels) against the same stacks on SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.nn import Decoder, Encoder, get_preset
from plm_lightning.nn.masks import causal_mask, combine, document_mask, padding_mask, sliding_window_mask
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.nn.varlen import Segments

xformers_ops = pytest.importorskip("xformers.ops")


@st.composite
def packed_batches(draw):
    """Rows of length L with 1..3 contiguous documents each, right- or left-padded (padding: document -1)."""
    b, n = draw(st.integers(1, 3)), draw(st.integers(3, 12))
    attention, documents = torch.zeros(b, n, dtype=torch.long), torch.full((b, n), -1)
    for row in range(b):
        real = draw(st.integers(1, n))
        start = draw(st.sampled_from([0, n - real]))
        attention[row, start:start + real] = 1
        cuts = sorted(draw(st.sets(st.integers(1, real - 1), max_size=2))) if real > 1 else []
        for doc, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, real])):
            documents[row, start + lo:start + hi] = doc
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.integers(2, 5))) if causal else None
    return attention, documents, causal, window


def dense_reference(attention: torch.Tensor, documents: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    """``[B, 1, L, L]``: the masks the dense path combines."""
    n = attention.shape[1]
    return combine(padding_mask(attention), document_mask(documents), causal_mask(n) if causal else None,
                   sliding_window_mask(n, window, causal=True) if window is not None else None).expand(-1, 1, n, n)


def real_token_block(dense: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The dense ``[B, 1, L, L]`` mask as ``[T, T]`` over the batch's real tokens, flattened row after row."""
    b, _, n, _ = dense.shape
    flat = torch.zeros(b * n, b * n, dtype=torch.bool)
    for row in range(b):
        flat[row * n:(row + 1) * n, row * n:(row + 1) * n] = dense[row, 0]
    keep = attention.reshape(-1).bool()
    return flat[keep][:, keep]


@settings(max_examples=60, deadline=None)
@given(packed_batches())
def test_xformers_block_diagonal_bias_is_the_dense_mask_on_the_real_tokens(case):
    attention, documents, causal, window = case
    segments = Segments.of_batch(attention, documents, tuple(attention.shape), causal)
    if window is not None:
        segments = segments.banded(window)
    assert segments.total == int(attention.sum())
    expected = real_token_block(dense_reference(attention, documents, causal, window), attention)
    bias = segments.xformers_bias().materialize((segments.total, segments.total))
    assert torch.equal(bias == 0, expected)


@settings(max_examples=25, deadline=None)
@given(packed_batches(), st.integers(0, 2**16))
def test_sdpa_over_the_flat_stream_with_xformers_bias_equals_sdpa_with_the_dense_mask(case, seed):
    attention, documents, causal, window = case
    b, n = attention.shape
    torch.manual_seed(seed)
    q, k, v = torch.randn(3, b, 2, n, 8).unbind(0)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=dense_reference(attention, documents, causal, window))
    segments = Segments.of_batch(attention, documents, (b, n), causal)
    segments = segments.banded(window) if window is not None else segments
    keep = attention.reshape(-1).bool()

    def stream(t: torch.Tensor) -> torch.Tensor:  # [B, H, L, D] -> [1, H, T, D]
        return t.transpose(1, 2).reshape(b * n, 2, 8)[keep].transpose(0, 1)[None]

    bias = segments.xformers_bias().materialize((segments.total, segments.total))
    flat = F.scaled_dot_product_attention(stream(q), stream(k), stream(v), attn_mask=bias)
    assert torch.allclose(flat, stream(dense), atol=1e-5)


def test_documents_split_by_another_one_have_no_block_diagonal_form():
    documents = torch.tensor([[0, 0, 1, 0], [0, 1, 1, 2]])
    assert Segments.of_batch(None, documents, (2, 4)) is None
    assert Segments.of_batch(None, documents[1:], (1, 4)).lengths == (1, 2, 1)
    assert Segments.of_batch(torch.tensor([[1, 1, 0], [1, 1, 1]]), None, (2, 3)).lengths == (2, 3)
    with pytest.raises(ValueError, match="bidirectional banded"):
        Segments((3,)).banded(2)


def sdpa_standing_in_for_xformers(calls: list[str]):
    """``xformers.ops.memory_efficient_attention`` computed by SDPA over the materialised bias (``[B, M, H, K]``)."""

    def attention(q, k, v, attn_bias=None, p=0.0, scale=None):  # noqa: ANN001, ANN202 - xformers' signature
        calls.append(type(attn_bias).__name__)
        bias = attn_bias
        if bias is not None and not isinstance(bias, torch.Tensor):
            bias = bias.materialize((q.shape[1], k.shape[1]), dtype=q.dtype)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias,
                                             dropout_p=p, scale=scale)
        return out.transpose(1, 2)

    return attention


@pytest.fixture
def xformers_on_cpu(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(xformers_ops, "memory_efficient_attention", sdpa_standing_in_for_xformers(calls))
    monkeypatch.setattr("plm_lightning.nn.attention.resolve_backend", lambda backend, device: backend)
    monkeypatch.setattr("plm_lightning.nn.attention_plan.resolve_backend", lambda backend, device: backend)
    return calls


STACKS = {
    "gpt2 (learned positions)": (Decoder, "tiny-gpt", {}),
    "gpt3-style banded layers (causal local window, rotary)": (
        Decoder, "tiny-gpt", {"local_attention_window": 3, "global_attention_every": 2, "position_embedding": "rope",
                              "local_rope_theta": 100.0}),
    "modernbert (unpadded, bidirectional local window, two rotary bases)": (
        Encoder, "tiny-modernbert", {"local_attention_window": 4, "pad_token_id": 0}),
    "bert (padded, no unpadding of its own)": (Encoder, "tiny", {}),
}


@pytest.mark.parametrize(("name", "sparse"), [(name, False) for name in STACKS]
                         + [(name, True) for name, (stack, *_) in STACKS.items() if stack is Encoder])
def test_stacks_on_the_xformers_path_equal_the_dense_sdpa_path(name, sparse, xformers_on_cpu):
    """Outputs at the real tokens and every gradient; ``sparse``: the MLM's last layer at a few positions only."""
    stack, preset, overrides = STACKS[name]
    cfg = get_preset(preset).replace(vocab_size=97, dropout=0.0, attention_dropout=0.0, **overrides)
    torch.manual_seed(0)
    reference = stack(cfg.replace(attention_backend="sdpa"))
    varlen = stack(cfg.replace(attention_backend="xformers"))
    varlen.load_state_dict(reference.state_dict())
    b, n = 3, 10
    ids = torch.randint(1, 97, (b, n))
    attention = torch.ones(b, n, dtype=torch.long)
    attention[0, 7:] = attention[2, 4:] = 0
    documents = torch.tensor([[0] * 4 + [1] * 3 + [-1] * 3, [0] * 2 + [1] * 5 + [2] * 3, [0] * 4 + [-1] * 6])
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 0, 0], [0, 1, 0, 1, 2, 3, 4, 0, 1, 2], list(range(10))])
    output = torch.tensor([[1, 5], [0, 9], [2, 3]]) if sparse else None
    real = attention.bool() if not sparse else attention.gather(1, output).bool()
    outs = []
    for model in (reference, varlen):
        hidden = model(ids, StackInputs(attention_mask=attention, position_ids=positions, document_ids=documents,
                                        output_positions=output)).last_hidden_state
        hidden[real].square().sum().backward()
        outs.append(hidden.detach())
    assert torch.allclose(outs[0][real], outs[1][real], atol=1e-5)
    grads = dict(reference.named_parameters())
    for param_name, p in varlen.named_parameters():
        if p.grad is not None or grads[param_name].grad is not None:
            assert torch.allclose(p.grad, grads[param_name].grad, atol=1e-4), param_name
    blocks = {"BlockDiagonalMask", "BlockDiagonalCausalMask", "BlockDiagonalCausalLocalAttentionMask"}
    assert blocks & set(xformers_on_cpu)  # the block-diagonal path ran, not only the dense fallback


def test_packed_rows_without_padding_attend_within_their_documents_only(xformers_on_cpu):
    """A packed GPT-2 batch (no padding): one flat stream of documents, one BlockDiagonalCausalMask call per layer."""
    cfg = get_preset("tiny-gpt").replace(vocab_size=97, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    reference, varlen = Decoder(cfg), Decoder(cfg.replace(attention_backend="xformers"))
    varlen.load_state_dict(reference.state_dict())
    ids, documents = torch.randint(1, 97, (2, 8)), torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1]])
    with torch.no_grad():
        a = reference(ids, StackInputs(document_ids=documents)).last_hidden_state
        b = varlen(ids, StackInputs(document_ids=documents)).last_hidden_state
    assert torch.allclose(a, b, atol=1e-5)
    assert xformers_on_cpu == ["BlockDiagonalCausalMask"] * cfg.num_layers
