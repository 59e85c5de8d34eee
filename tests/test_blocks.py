"""Shared blocks: attention kernels agree, masks mean what they say, stacks and heads behave."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.nn import (
    BackboneConfig,
    Decoder,
    Encoder,
    FeedForward,
    LMHead,
    MultiHeadAttention,
    causal_mask,
    combine,
    document_mask,
    get_preset,
    init_weights,
    prefix_lm_mask,
    relative_position_bucket,
    resolve_backend,
    sliding_window_mask,
)
from plm_lightning.nn.positions import RotaryEmbedding
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import ATTENTION_CASES, attention_case


def _attention(backend):
    torch.manual_seed(0)
    return MultiHeadAttention(64, 4, backend=backend).eval()


@pytest.mark.parametrize("kind", ATTENTION_CASES)
def test_sdpa_matches_eager(kind):
    eager, sdpa = _attention("eager"), _attention("sdpa")
    x = torch.randn(3, 10, 64)
    case = attention_case(kind)
    assert torch.allclose(eager(x, case), sdpa(x, case), atol=1e-5)


def test_backend_resolution():
    assert resolve_backend("auto", torch.device("cpu")) == "sdpa"
    with pytest.raises(RuntimeError, match="xformers"):
        resolve_backend("xformers", torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_backend"):
        resolve_backend("flash9", torch.device("cpu"))


def test_causal_means_causal():
    cfg = get_preset("tiny-gpt")
    model = Decoder(cfg).eval()
    x = torch.randint(0, cfg.vocab_size, (1, 12))
    y = x.clone()
    y[0, 8:] = (y[0, 8:] + 1) % cfg.vocab_size  # change the future
    a, b = model(x).last_hidden_state, model(y).last_hidden_state
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not torch.allclose(a[:, 8:], b[:, 8:])
    m = causal_mask(5)[0, 0]
    assert torch.equal(m, torch.tril(torch.ones(5, 5, dtype=torch.bool)))


def test_packed_documents_never_attend_across_boundaries():
    cfg = get_preset("tiny").replace(dropout=0.0, attention_dropout=0.0)
    model = Encoder(cfg).eval()
    x = torch.randint(5, cfg.vocab_size, (1, 16))
    docs = torch.tensor([[0] * 6 + [1] * 10])
    y = x.clone()
    y[0, 6:] = torch.randint(5, cfg.vocab_size, (10,))  # rewrite document 1 entirely
    a = model(x, StackInputs(mask=document_mask(docs))).last_hidden_state
    b = model(y, StackInputs(mask=document_mask(docs))).last_hidden_state
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)  # document 0 cannot see document 1
    m = document_mask(docs)[0, 0]
    assert not m[:6, 6:].any() and not m[6:, :6].any() and m[:6, :6].all()


def test_prefix_and_window_masks():
    m = prefix_lm_mask(torch.tensor([3]), 6)[0, 0]
    assert m[:3, :3].all() and not m[0, 3:].any() and m[5].all() and not m[3, 4]
    w = sliding_window_mask(7, 3)[0, 0]
    assert w[3, 2] and w[3, 4] and not w[3, 5]
    assert combine(None, m) is m and combine(None, None) is None


def test_positions():
    rel = torch.arange(-200, 201)
    b = relative_position_bucket(rel, bidirectional=True)
    assert b.min() >= 0 and b.max() < 32 and b[200] == 0
    assert (relative_position_bucket(rel[rel > 0], False) == 0).all()  # causal: future offsets share bucket 0
    cos, sin = RotaryEmbedding(16)(torch.arange(8))
    assert cos.shape == (8, 16) and torch.allclose(cos[0], torch.ones(16))


@pytest.mark.parametrize("activation", ["gelu", "relu", "glu", "reglu", "geglu", "swiglu"])
def test_feedforward_variants(activation):
    ff = FeedForward(8, 16, activation)
    assert ff(torch.randn(2, 3, 8)).shape == (2, 3, 8)
    assert (ff.fc_gate is not None) == (activation in ("glu", "reglu", "geglu", "swiglu"))


def test_sparse_lm_head_equals_dense_at_positions():
    cfg = get_preset("tiny")
    head = LMHead(cfg)
    h = torch.randn(2, 10, cfg.hidden_size)
    pos = torch.rand(2, 10) < 0.3
    pos[0, 0] = True
    assert torch.allclose(head(h, pos), head(h)[pos], atol=1e-6)


def test_albert_factorization_and_sharing():
    cfg = get_preset("tiny").replace(embedding_size=16, layer_sharing="all", num_layers=4)
    enc = Encoder(cfg)
    init_weights(enc, cfg)
    assert len(enc.layers) == 1 and len(enc.blocks()) == 4
    assert enc.embeddings.token.weight.shape == (cfg.vocab_size, 16)
    out = enc(torch.randint(0, 100, (2, 8)))
    assert len(out.hidden_states) == 5


def test_pre_norm_stack_with_rope_rmsnorm_swiglu():
    cfg = BackboneConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                         position_embedding="rope", norm="rmsnorm", norm_position="pre", activation="swiglu",
                         embedding_norm=False, type_vocab_size=0, bias=False)
    out = Decoder(cfg)(torch.randint(0, 100, (2, 9)))
    assert out.last_hidden_state.shape == (2, 9, 32) and torch.isfinite(out.last_hidden_state).all()


def test_bad_config_errors():
    with pytest.raises(ValueError, match="divisible"):
        BackboneConfig(hidden_size=10, num_heads=3)
    with pytest.raises(ValueError, match="unknown backbone key"):
        get_preset("tiny").replace(num_layer=3)
    with pytest.raises(ValueError, match="valid presets"):
        get_preset("bert-gigantic")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Encoder(get_preset("tiny"))(torch.zeros(1, 300, dtype=torch.long))


def test_encoder_decoder_cross_attention():
    from plm_lightning.nn import EncoderDecoder

    cfg = get_preset("tiny").replace(dropout=0.0, attention_dropout=0.0)
    model = EncoderDecoder(cfg).eval()
    src, tgt = torch.randint(5, 100, (2, 9)), torch.randint(5, 100, (2, 7))
    enc, dec = model(src, tgt)
    assert dec.last_hidden_state.shape == (2, 7, cfg.hidden_size)
    assert model.decoder.embeddings.token is model.encoder.embeddings.token  # one shared vocabulary embedding
    src2 = src.clone()
    src2[:, 0] += 1
    assert not torch.allclose(model(src2, tgt)[1].last_hidden_state, dec.last_hidden_state)  # decoder reads encoder
    tgt2 = tgt.clone()
    tgt2[:, 5:] += 1
    assert torch.allclose(model(src, tgt2)[1].last_hidden_state[:, :5], dec.last_hidden_state[:, :5], atol=1e-6)
    with pytest.raises(ValueError, match="cross-attention needs kv"):
        model.decoder.layers[0].cross_attn(torch.randn(1, 3, cfg.hidden_size))


def test_flops_count_matches_six_n_rule():
    """Kaplan et al. 2020: training ~ 6 N FLOPs per token (+ attention); forward is a third of it."""
    from plm_lightning.nn.flops import block_matmul_params, training_flops

    cfg = get_preset("gpt2")
    n_block = cfg.num_layers * block_matmul_params(cfg)
    assert n_block == 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # 85M non-embedding matmul weights of GPT-2 small
    full = training_flops(cfg, 1, 1024, 1024, head_transform=False)
    per_token = full / 1024
    six_n = 6 * (n_block + cfg.vocab_size * cfg.hidden_size)
    attention = 6 * 2 * cfg.num_layers * 1024 * cfg.hidden_size
    assert per_token == six_n + attention
    assert training_flops(cfg, 1, 1024, 1024, head_transform=False, backward=False) * 3 == full


@pytest.mark.parametrize("sharing", ["none", "all", "attention", "ffn"])
def test_layer_sharing_parameter_counts(sharing):
    """ALBERT Table 4: sharing removes (L - 1) copies of the shared sub-layer, and nothing else."""
    cfg = get_preset("tiny").replace(num_layers=4, layer_sharing=sharing)
    enc = Encoder(cfg)
    block = Encoder(cfg.replace(num_layers=1, layer_sharing="none")).layers[0]
    attn = sum(p.numel() for p in block.self_attn.parameters())
    ffn = sum(p.numel() for p in block.ffn.parameters())
    whole = sum(p.numel() for p in block.parameters())
    per_block = {"none": 4 * whole, "all": whole, "attention": 4 * whole - 3 * attn, "ffn": 4 * whole - 3 * ffn}
    emb = sum(p.numel() for p in enc.embeddings.parameters())
    assert sum(p.numel() for p in enc.parameters()) == emb + per_block[sharing]
    assert len(enc.blocks()) == 4
    out = enc(torch.randint(0, 100, (2, 8)))
    assert torch.isfinite(out.last_hidden_state).all()
    if sharing in ("attention", "ffn"):
        name = "self_attn" if sharing == "attention" else "ffn"
        assert getattr(enc.layers[1], name) is getattr(enc.layers[0], name)
        assert enc.layers[1].ffn_norm is not enc.layers[0].ffn_norm  # norms stay per layer
    with pytest.raises(ValueError, match="layer_sharing"):
        cfg.replace(layer_sharing="everything")


def _loss_batch():
    from tests.conftest import masked_batch

    batch = masked_batch()
    docs = torch.zeros(3, 40, dtype=torch.long)
    docs[:, 20:] = 1
    docs[2, 30:] = -1
    return {**batch, "document_ids": docs, "token_type_ids": (torch.arange(40) >= 20).long().expand(3, 40),
            "sentence_label": torch.tensor([0, 1, 0])}


@pytest.mark.parametrize("kwargs", [
    {"objective": "MaskedLM", "backbone": "tiny", "sentence_prediction": "nsp"},
    {"objective": "MaskedLM", "backbone": "tiny-albert", "sentence_prediction": "sop"},
    {"objective": "MaskedLM", "backbone": "tiny", "backbone_overrides": {"norm_position": "pre", "position_embedding": "rope"}},
    {"objective": "ELECTRA", "backbone": "tiny"},
], ids=["bert-nsp", "albert-sop", "prenorm-rope", "electra"])
def test_sparse_final_layer_gives_the_same_loss_and_gradients(kwargs):
    """The last layer run only at the loss positions (+ [CLS]) is the dense computation restricted to them."""
    from plm_lightning import objectives

    kwargs = dict(kwargs)
    cls = getattr(objectives, kwargs.pop("objective"))
    overrides = {"dropout": 0.0, "attention_dropout": 0.0, **kwargs.pop("backbone_overrides", {})}
    sparse = cls(vocab_size=101, backbone_overrides=overrides, **kwargs)
    dense = cls(vocab_size=101, backbone_overrides=overrides, sparse_final_layer=False, **kwargs)
    dense.load_state_dict(sparse.state_dict())
    losses = []
    for module in (sparse, dense):
        torch.manual_seed(0)  # ELECTRA samples its replacements
        out = module.compute_loss(_loss_batch())
        out["loss"].backward()
        losses.append(out)
    assert torch.allclose(losses[0]["loss"], losses[1]["loss"], atol=1e-5)
    assert torch.allclose(losses[0]["lm_token_losses"], losses[1]["lm_token_losses"], atol=1e-5)
    grads = {n: p.grad for n, p in dense.named_parameters()}
    for name, p in sparse.named_parameters():
        assert (p.grad is None) == (grads[name] is None), name
        if p.grad is not None:
            assert torch.allclose(p.grad, grads[name], atol=1e-5), name


@pytest.mark.parametrize("sparse", [False, True])
def test_unpadding_matches_the_padded_computation(sparse):
    """ModernBERT's unpadding: the real tokens' outputs and every gradient equal the padded computation's."""
    from plm_lightning.objectives import MaskedLM

    overrides = {"local_attention_window": 8, "pad_token_id": 0}
    unpadded = MaskedLM(backbone="tiny-modernbert", vocab_size=101, sparse_final_layer=sparse,
                        backbone_overrides=overrides)
    padded = MaskedLM(backbone="tiny-modernbert", vocab_size=101, sparse_final_layer=sparse,
                      backbone_overrides={**overrides, "unpad": False})
    padded.load_state_dict(unpadded.state_dict())
    batch = _loss_batch()
    batch.pop("token_type_ids")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        a = unpadded.backbone(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"])).last_hidden_state
        b = padded.backbone(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"])).last_hidden_state
    assert torch.allclose(a[real], b[real], atol=1e-5) and not a[~real].any()
    for module in (unpadded, padded):
        module.compute_loss(batch)["loss"].backward()
    grads = dict(padded.named_parameters())
    for name, p in unpadded.named_parameters():
        assert torch.allclose(p.grad, grads[name].grad, atol=1e-5), name


def test_unpadded_hidden_states_are_padded_on_demand():
    """``hidden_states`` of an unpadded stack equal the padded stack's at every layer (padded back lazily)."""
    from plm_lightning.nn import get_preset

    cfg = get_preset("tiny-modernbert").replace(vocab_size=101, pad_token_id=0, local_attention_window=8)
    unpadded, padded = Encoder(cfg).eval(), Encoder(cfg.replace(unpad=False)).eval()
    padded.load_state_dict(unpadded.state_dict())
    batch = _loss_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        a = unpadded(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"]))
        b = padded(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"]))
    assert any(a.unpadded) and len(a.hidden_states) == len(b.hidden_states) == cfg.num_layers + 1
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert x.shape == y.shape and torch.allclose(x[real], y[real], atol=1e-5)


def test_fast_cpu_dropout_keeps_one_minus_p_scaled_and_passes_gradients_through_the_mask():
    from plm_lightning.nn.dropout import Dropout

    torch.manual_seed(0)
    layer = Dropout(0.3)
    x = torch.ones(200_000, requires_grad=True)
    y = layer(x)
    kept = y != 0
    assert abs(float(kept.float().mean()) - 0.7) < 0.005
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.7))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d y / d x = mask / (1 - p)
    assert torch.equal(layer.eval()(x), x) and torch.equal(Dropout(0.0)(x), x)
    layer.train()
    assert not torch.equal(layer(x), layer(x))  # a fresh mask each call


@settings(max_examples=12, deadline=None)
@given(st.floats(0.01, 0.99), st.integers(0, 2**16))
def test_cpu_keep_mask_keeps_one_minus_p_at_every_quarter_of_a_draw_independently(p, seed):
    from plm_lightning.nn.dropout import keep_mask

    torch.manual_seed(seed)
    n = 400_000
    keep = keep_mask(torch.Size([n // 400, 400]), p).reshape(-1).float()
    sigma = (p * (1 - p) / (n / 4)) ** 0.5
    for quarter in range(4):  # three 16-bit quarters of each 63-bit draw and its 15-bit top quarter
        assert abs(float(keep[quarter::4].mean()) - (1 - p)) < 5 * sigma + 2**-15
    both = keep[0::4] * keep[1::4]  # neighbours from one draw are independent
    assert abs(float(both.mean()) - (1 - p) ** 2) < 5 * (((1 - p) ** 2 * (1 - (1 - p) ** 2)) / (n / 4)) ** 0.5 + 2**-14
    assert keep_mask(torch.Size([3, 5]), p).shape == (3, 5)  # sizes that are not a multiple of 4


def test_fused_relu_dropout_equals_dropout_of_relu_in_values_and_gradients():
    from plm_lightning.nn.dropout import dropout, relu_dropout

    x = torch.randn(37, 53, requires_grad=True)
    fused, plain = [], []
    for fn, out in ((lambda t: relu_dropout(t, 0.2, True), fused), (lambda t: dropout(torch.relu(t), 0.2, True), plain)):
        torch.manual_seed(3)  # the same draws: the same keep mask
        y = fn(x)
        (y * torch.arange(y.numel()).view_as(y)).sum().backward()
        out += [y.detach(), x.grad.clone()]
        x.grad = None
    assert torch.equal(fused[0], plain[0]) and torch.equal(fused[1], plain[1])
    assert (fused[0] != 0).float().mean() < 0.5 and torch.equal(relu_dropout(x, 0.2, False), torch.relu(x))


def test_training_attention_dropout_on_cpu_runs_the_eager_kernel_with_the_same_statistics():
    from plm_lightning.nn.attention import MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, dropout=0.5, bias=True, backend="sdpa").train()
    x = torch.randn(2, 10, 32)
    outs = torch.stack([attn(x) for _ in range(400)])
    expected = attn.eval()(x)
    assert (outs.mean(0) - expected).abs().max() < 0.1  # inverted dropout is unbiased


def test_causal_band_mask_and_banded_layers_see_only_their_window():
    from plm_lightning.nn.layer_attention import LayerAttention
    from plm_lightning.nn.masks import sliding_window_mask

    rect = sliding_window_mask(2, 3, causal=True, key_length=5)[0, 0]  # queries 3, 4 of a cached sequence
    assert rect.tolist() == [[False, True, True, True, False], [False, False, True, True, True]]
    cfg = get_preset("tiny-gpt").replace(num_layers=1, local_attention_window=3, global_attention_every=2,
                                         dropout=0.0, attention_dropout=0.0)
    stack = Decoder(cfg.replace(num_layers=2)).eval()  # layer 0 dense, layer 1 banded
    x = torch.randn(1, 8, cfg.hidden_size)
    block = stack.blocks()[1]
    out = block(x, LayerAttention(mask=sliding_window_mask(8, 3, causal=True)))
    changed = x.clone()
    changed[0, 2] += 1.0
    again = block(changed, LayerAttention(mask=sliding_window_mask(8, 3, causal=True)))
    moved = (again - out).abs().amax(-1)[0] > 0  # exactly zero outside the band
    assert moved.tolist() == [False, False, True, True, True, False, False, False]  # positions 2..4 see token 2
    seen = {}
    stack.blocks()[1].register_forward_pre_hook(lambda m, args: seen.update(attention=args[1]))
    stack(torch.randint(0, 100, (1, 8)))
    assert torch.equal(seen["attention"].mask, sliding_window_mask(8, 3, causal=True))
    assert not seen["attention"].is_causal


def test_auto_falls_back_to_sdpa_when_xformers_kernels_do_not_run(monkeypatch):
    """An xformers wheel built for another PyTorch/CUDA imports but has no kernels (seen on an H200 with torch
    2.11+cu130 and xformers 0.0.35): `auto` must take SDPA, an explicit `xformers` must say why it cannot."""
    from plm_lightning.nn import attention

    reason = "xformers' kernels do not run here (NotImplementedError: No operator found)"
    monkeypatch.setattr(attention, "xformers_unusable_reason", lambda: reason)
    cuda = torch.device("cuda")
    assert attention.resolve_backend("auto", cuda) == "sdpa"
    with pytest.raises(RuntimeError, match="kernels do not run here"):
        attention.resolve_backend("xformers", cuda)
    monkeypatch.setattr(attention, "xformers_unusable_reason", lambda: None)
    assert attention.resolve_backend("auto", cuda) == "xformers"
