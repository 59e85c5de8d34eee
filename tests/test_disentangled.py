"""DeBERTa's disentangled attention (He et al. 2021, eq. 4), log-bucketed distances (v2), the convolution beside
the first layer, and the Enhanced Mask Decoder."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.nn import BackboneConfig, Encoder
from plm_lightning.nn.disentangled import DisentangledSelfAttention, log_bucket_position, relative_positions
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.objectives import MaskedLM
from tests.conftest import masked_batch


@settings(max_examples=50, deadline=None)
@given(bucket=st.sampled_from([8, 16, 256]), max_position=st.sampled_from([32, 128, 512]),
       length=st.integers(2, 300))
def test_log_buckets_are_odd_monotone_and_exact_near_zero(bucket, max_position, length):
    max_position = max(max_position, bucket + 2)
    distances = torch.arange(-length, length + 1)
    buckets = log_bucket_position(distances, bucket, max_position)
    assert torch.equal(buckets, -log_bucket_position(-distances, bucket, max_position))  # odd
    near = distances.abs() < bucket // 2
    assert torch.equal(buckets[near], distances[near])  # exact inside (-k/2, k/2)
    assert (buckets[1:] >= buckets[:-1]).all()  # monotone
    # distances up to max_position land inside the table of 2k rows
    inside = distances.abs() <= max_position
    assert buckets[inside].abs().max() <= bucket


def _naive_scores(attn, x, table, k):
    """Eq. 4 written out pair by pair, rows clip(i - j + k) of the projected table, over sqrt(3d)."""
    h, heads, d = attn.hidden_size, attn.num_heads, attn.head_dim
    q, kk, _ = attn.qkv_proj(x).split(h, dim=-1)
    k_r, q_r = attn.pos_key_proj(table[: 2 * k]), attn.pos_query_proj(table[: 2 * k])
    n = x.shape[1]
    scores = torch.zeros(x.shape[0], heads, n, n)
    for i in range(n):
        for j in range(n):
            row = min(max(i - j + k, 0), 2 * k - 1)
            for a in range(heads):
                sl = slice(a * d, (a + 1) * d)
                c2c = (q[:, i, sl] * kk[:, j, sl]).sum(-1)
                c2p = (q[:, i, sl] * k_r[row, sl]).sum(-1)
                p2c = (kk[:, j, sl] * q_r[row, sl]).sum(-1)
                scores[:, a, i, j] = (c2c + c2p + p2c) / math.sqrt(3 * d)
    return scores


def test_disentangled_attention_matches_equation_4_written_out():
    torch.manual_seed(0)
    k = 3  # clipping matters at length 9
    attn = DisentangledSelfAttention(16, 2, 0.0, True, "eager", span=k, share_key=False, position_dropout=0.0)
    x, table = torch.randn(2, 9, 16), torch.randn(2 * k, 16)
    positions = relative_positions(9, 0, k)
    h = attn.hidden_size
    q, kk, v = (attn._heads(t) for t in attn.qkv_proj(x).split(h, dim=-1))
    scores = torch.matmul(q, kk.transpose(-1, -2)) * attn.scale + attn.relative_bias(q, kk, table, positions)
    assert torch.allclose(scores, _naive_scores(attn, x, table, k), atol=1e-5)
    expected = attn.o_proj((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(2, 9, h))
    assert torch.allclose(attn(x, LayerAttention(relative=(table, positions))), expected, atol=1e-5)


def test_relative_table_is_shared_and_v2_options_build():
    cfg = BackboneConfig(hidden_size=32, num_layers=3, num_heads=2, intermediate_size=64, vocab_size=50,
                         position_embedding="disentangled", relative_position_buckets=8, share_attention_key=True,
                         relative_embedding_norm=True, conv_kernel_size=3)
    enc = Encoder(cfg)
    assert enc.relative_embeddings.weight.shape == (16, 32) and enc.conv is not None
    assert not any(hasattr(b.self_attn, "pos_key_proj") for b in enc.layers)  # shared with the content projections
    assert enc.embeddings.position is None  # no absolute positions at the input
    ids = torch.randint(0, 50, (2, 12))
    out = enc(ids, StackInputs(attention_mask=torch.ones_like(ids))).last_hidden_state
    shifted = enc(torch.roll(ids, 1, dims=1)).last_hidden_state
    assert out.shape == (2, 12, 32) and not torch.allclose(out[:, 1:], shifted[:, 1:], atol=1e-3)


def _batch():
    return masked_batch(seed=0)


def test_enhanced_mask_decoder_sparse_equals_dense_and_reads_absolute_positions():
    torch.manual_seed(0)
    sparse = MaskedLM(vocab_size=101, backbone="tiny-deberta", enhanced_mask_decoder=True).eval()
    dense = MaskedLM(vocab_size=101, backbone="tiny-deberta", enhanced_mask_decoder=True,
                     sparse_final_layer=False).eval()
    dense.load_state_dict(sparse.state_dict())
    a, b = sparse.compute_loss(_batch()), dense.compute_loss(_batch())
    assert torch.allclose(a["lm_token_losses"], b["lm_token_losses"], atol=1e-5)
    with torch.no_grad():  # the decoder's queries carry absolute positions: changing them changes the prediction
        sparse.emd_positions.weight.normal_()
    assert not torch.allclose(sparse.compute_loss(_batch())["lm_token_losses"], a["lm_token_losses"], atol=1e-3)


def test_enhanced_mask_decoder_needs_a_disentangled_backbone():
    with pytest.raises(ConfigError, match="enhanced_mask_decoder needs a disentangled-attention backbone"):
        MaskedLM(vocab_size=101, backbone="tiny", enhanced_mask_decoder=True)
