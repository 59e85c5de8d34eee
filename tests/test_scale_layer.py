"""The scale layer's single-process pieces: what tensor parallelism refuses, the attention path it switches to, the
global gradient norm clipping uses, and compiled blocks without graph breaks (the multi-process runs:
tests/test_scale_and_resume.py)."""

from __future__ import annotations

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.nn import MultiHeadAttention, get_preset
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.objectives.scale import check_tensor_parallel, total_grad_norm


@pytest.mark.parametrize(("preset", "overrides", "message"), [
    ("tiny-gpt", {"num_heads": 1, "hidden_size": 64}, "does not divide the backbone's num_heads=1"),
    ("tiny-gpt", {"intermediate_size": 255}, "intermediate_size=255"),
])
def test_tensor_parallel_refuses_what_it_cannot_split(preset, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_tensor_parallel(get_preset(preset).replace(**overrides), 2)
    check_tensor_parallel(get_preset("tiny-gpt"), 2)  # 2 heads, 256 units: splits


def test_tensor_parallel_refuses_meshes_and_formats_it_cannot_checkpoint():
    """FSDP2 shards the fused q/k/v weights along their columns under tensor parallelism: data_parallel_size must
    divide hidden_size; torch.distributed.checkpoint cannot save strided shards."""
    check_tensor_parallel(get_preset("tiny-gpt"), 2, data_parallel_size=2)
    with pytest.raises(ConfigError, match="data_parallel_size must divide the backbone's hidden_size=66"):
        check_tensor_parallel(get_preset("tiny-gpt").replace(hidden_size=66), 2, data_parallel_size=4)
    with pytest.raises(ConfigError, match="save_distributed_checkpoint: false"):
        check_tensor_parallel(get_preset("tiny-gpt"), 2, distributed_checkpoint=True)


def test_sparse_queries_without_slicing_the_fused_weight_equal_the_sliced_path():
    """Once tensor parallelism has split q/k/v, the sparse last layer projects every query and keeps its rows."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4).eval()
    x, index = torch.randn(2, 9, 32), torch.tensor([[0, 4, 8], [1, 2, 3]])
    sliced = attention(x, LayerAttention(query_index=index))
    attention.sliceable = False
    assert torch.allclose(attention(x, LayerAttention(query_index=index)), sliced, atol=1e-6)


def test_total_grad_norm_is_clip_grad_norms():
    torch.manual_seed(0)
    grads = [torch.randn(5, 3), torch.randn(7), torch.randn(2, 2, 2)]
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    assert torch.allclose(total_grad_norm(grads), torch.nn.utils.clip_grad_norm_(params, 1e9))


@pytest.mark.parametrize("preset", ["tiny", "t5-small", "tiny-modernbert"])
def test_a_training_block_compiles_as_one_graph(preset):
    """`--model.compile` compiles each block; a graph break (our CPU dropout's int64 -> int16 view once cut one at
    every dropout) splits it into pieces that are recompiled per call site past dynamo's limit and then run eagerly."""
    from plm_lightning.nn import TransformerBlock

    cfg = get_preset(preset).replace(vocab_size=101)
    torch.manual_seed(0)
    block = TransformerBlock(cfg).train()
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(block)(torch.randn(2, 8, cfg.hidden_size))
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_compile_model_runs_the_whole_loss_through_torch_compile(monkeypatch):
    """``compile: model`` hands the objective's whole loss computation to torch.compile with the asked mode (here
    with dynamo's eager backend, to trace without inductor's compile time) and gives the eager loss and gradients;
    a mode torch.compile lacks is one line."""
    from plm_lightning.errors import ConfigError
    from plm_lightning.objectives import CausalLM

    calls = []
    real = torch.compile

    def recording(fn, mode=None, **kwargs):  # noqa: ANN001, ANN202
        calls.append((getattr(fn, "__qualname__", type(fn).__name__), mode))
        return real(fn, backend="eager")

    monkeypatch.setattr(torch, "compile", recording)
    overrides = {"dropout": 0.0, "attention_dropout": 0.0}
    eager = CausalLM(backbone="tiny-gpt", vocab_size=101, backbone_overrides=overrides)
    compiled = CausalLM(backbone="tiny-gpt", vocab_size=101, backbone_overrides=overrides, compile="model",
                        compile_mode="reduce-overhead")
    compiled.load_state_dict(eager.state_dict())
    compiled.configure_model()
    assert calls == [("CausalLM.compute_loss", "reduce-overhead")]
    ids = torch.randint(0, 101, (2, 16))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    torch._dynamo.reset()
    a, b = compiled(**batch)["loss"], eager(**batch)["loss"]
    a.backward()
    b.backward()
    assert torch.allclose(a, b, atol=1e-6)
    assert all(torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(compiled.parameters(), eager.parameters()))
    with pytest.raises(ConfigError, match="compile_mode='fast'"):
        CausalLM(backbone="tiny-gpt", vocab_size=101, compile="model", compile_mode="fast")
