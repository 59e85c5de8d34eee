"""On a CUDA GPU: the attention kernels (SDPA, xformers) agree with the eager reference in fp32 and bf16, every
backbone computes on CUDA what it computes on CPU, generation's cache holds on CUDA, parity with transformers holds on
CUDA, and the recipes train end to end in bf16-mixed from the CLI (including a resume and FSDP2 on one device).

CI has no GPU, so these skip there; `benchmarks/gpu_check.sh` runs them (and the GPU benchmark) on a GPU machine.
"""

import pytest
import torch

from plm_lightning.nn import MultiHeadAttention, resolve_backend
from plm_lightning.nn.attention import xformers_unusable_reason
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import ATTENTION_CASES, ROOT, attention_case, masked_batch, run_cli, seq2seq_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CUDA_BACKENDS = ["sdpa", "xformers"]


@pytest.fixture(autouse=True)
def no_tf32():
    """fp32 comparisons in true fp32: TF32 matmuls would differ from the CPU by ~1e-3 on their own."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _needs(backend: str) -> None:
    if backend == "xformers" and xformers_unusable_reason():
        pytest.skip(xformers_unusable_reason())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("kind", ATTENTION_CASES)
def test_attention_kernels_agree_with_eager_on_cuda(kind, backend, dtype):
    """Output and input gradient of each kernel against the eager kernel in fp32, over every mask shape."""
    _needs(backend)
    torch.manual_seed(0)
    ref = MultiHeadAttention(128, 4, backend="eager").cuda().eval()
    fast = MultiHeadAttention(128, 4, backend=backend).cuda().eval()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(3, 48, 128, device="cuda")
    case = attention_case(kind, length=48, device="cuda")
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a = ref(xa, case)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        b = fast(xb, case)
    tol = 1e-4 if dtype == torch.float32 else 3e-2 * a.abs().max().item()
    assert (a - b.float()).abs().max().item() <= tol
    a.square().sum().backward()
    b.float().square().sum().backward()
    assert (xa.grad - xb.grad).abs().max().item() <= (1e-3 if dtype == torch.float32 else 6e-2 * xa.grad.abs().max().item())


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-modernbert"])
def test_xformers_block_diagonal_path_equals_the_dense_sdpa_path_on_cuda(preset):
    """Padded and packed rows through xformers' real varlen kernels (BlockDiagonal*Mask over one flat stream)
    against SDPA with the dense padding & document mask, at the real tokens (CPU: tests/test_varlen.py)."""
    _needs("xformers")
    from plm_lightning.nn import Decoder, Encoder, get_preset

    cfg = get_preset(preset).replace(vocab_size=97, dropout=0.0, attention_dropout=0.0, pad_token_id=0)
    stack = Decoder if preset == "tiny-gpt" else Encoder
    torch.manual_seed(0)
    dense = stack(cfg.replace(attention_backend="sdpa")).cuda()
    varlen = stack(cfg.replace(attention_backend="xformers")).cuda()
    varlen.load_state_dict(dense.state_dict())
    ids = torch.randint(1, 97, (3, 64), device="cuda")
    attention = torch.ones(3, 64, dtype=torch.long, device="cuda")
    attention[0, 40:] = attention[2, 9:] = 0
    documents = torch.zeros(3, 64, dtype=torch.long, device="cuda")
    documents[0, 20:], documents[1, 30:], documents[1, 50:] = 1, 1, 2
    real = attention.bool()
    with torch.no_grad():
        a = dense(ids, StackInputs(attention_mask=attention, document_ids=documents)).last_hidden_state
        b = varlen(ids, StackInputs(attention_mask=attention, document_ids=documents)).last_hidden_state
    assert (a[real] - b[real]).abs().max().item() <= 1e-4


def test_auto_backend_is_xformers_on_cuda_when_its_kernels_run():
    """An xformers wheel built for another PyTorch imports but has no kernels: auto must then fall back to SDPA."""
    expected = "sdpa" if xformers_unusable_reason() else "xformers"
    assert resolve_backend("auto", torch.device("cuda")) == expected
    if expected == "sdpa":
        with pytest.raises(RuntimeError, match="xformers"):
            resolve_backend("xformers", torch.device("cuda"))


def test_the_sdpa_kernel_and_its_reason_are_named():
    """Causal bf16 rows without a mask go to flash (seen on the H200: cuDNN's flash kernels ran); a dense mask rules
    flash out, and the reason says so in PyTorch's words."""
    from plm_lightning.nn.attention import sdpa_kernel_choice

    q = torch.randn(2, 12, 256, 64, device="cuda", dtype=torch.bfloat16)
    assert sdpa_kernel_choice(q, q, q, None, 0.0, True)[0] == "flash"
    kernel, why = sdpa_kernel_choice(q, q, q, torch.ones(2, 1, 256, 256, dtype=torch.bool, device="cuda"), 0.0, False)
    assert kernel != "flash" and why.startswith("not flash: ")


def _model_and_batch(kind: str):  # noqa: ANN202
    from plm_lightning.objectives import CausalLM, MaskedLM, Seq2SeqLM

    torch.manual_seed(0)
    if kind in ("bert", "deberta-v3", "modernbert"):
        preset = {"bert": "tiny", "deberta-v3": "tiny-deberta-v3", "modernbert": "tiny-modernbert"}[kind]
        return MaskedLM(backbone=preset, vocab_size=101), masked_batch(length=40)
    if kind.startswith("gpt"):
        banded = {"local_attention_window": 8, "global_attention_every": 2} if kind == "gpt-banded" else {}
        model = CausalLM(backbone="tiny-gpt", vocab_size=101, backbone_overrides=banded)
        ids = torch.randint(0, 101, (3, 40))
        labels = torch.cat([ids[:, 1:], torch.full((3, 1), -100)], dim=1)
        return model, {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)}
    start = {"t5": 0, "bart": 2}[kind]
    batch = seq2seq_batch(pad_id=0 if kind == "t5" else 1, start_id=start)
    labels = torch.cat([batch["decoder_input_ids"][:, 1:], torch.full((2, 1), 1)], dim=1)
    model = Seq2SeqLM(backbone=f"tiny-{kind}", vocab_size=101, **({"decoder_start_token": "eos"} if kind == "bart" else {}))
    return model, {**batch, "labels": labels}


def _loss_and_grad_norm(model, batch, device: str, bf16: bool = False) -> tuple[float, float]:  # noqa: ANN001
    model = model.to(device)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = model(**{k: v.to(device) for k, v in batch.items()})["loss"]
    loss.backward()
    grad = torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in model.parameters() if p.grad is not None]))
    return loss.item(), grad.item()


@pytest.mark.parametrize("kind", ["bert", "deberta-v3", "modernbert", "gpt", "gpt-banded", "t5", "bart"])
def test_backbones_compute_on_cuda_what_they_compute_on_cpu(kind):
    """Same weights, same batch (eval mode, so no dropout): CUDA fp32 loss and gradient norm equal the CPU's; bf16
    autocast stays within 2%. A tensor created on the wrong device, or a kernel path only CUDA takes, shows here."""
    model, batch = _model_and_batch(kind)
    model.eval()
    cpu_loss, cpu_grad = _loss_and_grad_norm(model, batch, "cpu")
    gpu_loss, gpu_grad = _loss_and_grad_norm(model, batch, "cuda")
    assert abs(gpu_loss - cpu_loss) <= 1e-4 * abs(cpu_loss) and abs(gpu_grad - cpu_grad) <= 1e-3 * cpu_grad
    bf16_loss, _ = _loss_and_grad_norm(model, batch, "cuda", bf16=True)
    assert abs(bf16_loss - cpu_loss) <= 2e-2 * abs(cpu_loss)


@pytest.mark.parametrize("kind", ["gpt", "gpt-banded", "t5", "bart"])
def test_cached_generation_on_cuda_equals_recomputation_and_the_cpu(kind):
    """Greedy tokens of the spread-weight models of test_generation: CPU with the KV cache, CUDA with and without."""
    from plm_lightning.generation import GenerationConfig, generate
    from tests.test_generation import MODELS, _prompt

    model = MODELS[kind]
    ids, mask = _prompt(kind)
    start = None if kind.startswith("gpt") else 0
    runs = []
    for device, cache in (("cpu", True), ("cuda", True), ("cuda", False)):
        model.to(device)
        config = GenerationConfig("greedy", max_new_tokens=12, use_cache=cache)
        runs.append(generate(model, ids.to(device), mask.to(device), config, None, start))
    model.cpu()
    assert runs[0] == runs[1] == runs[2]
    assert len({tok for row in runs[0] for tok in row}) > 3  # varied text, not one repeated token


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_every_decoding_strategy_runs_on_cuda_as_on_the_cpu(strategy):
    """With an end-of-sequence id (its bookkeeping once lived on the CPU): the same tokens on both devices; seeded
    sampling draws on the CPU generator, so the same seed gives the same text on every device."""
    from plm_lightning.generation import GenerationConfig, generate
    from plm_lightning.objectives import CausalLM

    torch.manual_seed(0)
    model = CausalLM(backbone="tiny-gpt", vocab_size=101).eval()
    ids = torch.randint(3, 101, (1, 8))
    config = GenerationConfig(strategy, max_new_tokens=10, seed=3, **({"num_beams": 3} if strategy == "beam" else {}))
    on_cpu = generate(model, ids, None, config, eos_id=5)
    assert generate(model.cuda(), ids.cuda(), None, config, eos_id=5) == on_cpu


@pytest.mark.parametrize("kind", ["bert", "gpt2", "deberta-v3"])
def test_transformers_parity_on_cuda(kind, tmp_path):
    from plm_lightning.objectives.loading import import_hf
    from tests.test_parity import TOL, _close, _hf, _hf_logits, _inputs, _load_module, _ours_logits

    hf = _hf(kind)
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ours = _load_module(tmp_path / "ours.ckpt").cuda()
    ids, mask, types = (t.cuda() for t in _inputs(kind))
    a, _ = _ours_logits(ours, ids, mask, types)
    b, _ = _hf_logits(hf.cuda(), ids, mask, types)
    assert _close(a, b, mask) <= TOL


GPU = ["--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.precision", "bf16-mixed",
       "--trainer.val_check_interval", "20", "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "5",
       "--data.batch_size", "16", "--data.seq_len", "64"]


@pytest.mark.parametrize("recipe", ["bert", "electra", "deberta-v3", "modernbert", "t5", "bart", "glm", "gpt2",
                                    "ul2-decoder"])
def test_recipe_trains_on_gpu_in_bf16(recipe, tmp_path):
    from tests.test_cli import _train_losses

    res = run_cli(["fit", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), *GPU, "--trainer.max_steps", "40"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "used: True" in res.stderr + res.stdout  # Lightning's "GPU available: True (cuda), used: True"
    losses = _train_losses(tmp_path / "runs")
    assert len(losses) >= 6 and sum(losses[-3:]) < sum(losses[:3]), losses
    ckpt = torch.load(next((tmp_path / "runs").rglob("last.ckpt")), weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 40


def test_gpu_run_resumes_from_its_checkpoint(tmp_path):
    first = run_cli(["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), *GPU, "--trainer.max_steps", "20"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    again = run_cli(["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), *GPU, "--trainer.max_steps", "30",
                     "--ckpt_path", str(last)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    steps = [torch.load(p, weights_only=True, map_location="cpu")["global_step"] for p in (tmp_path / "runs").rglob("last*.ckpt")]
    assert max(steps) == 30


def test_fsdp2_on_one_gpu_trains(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--config",
                   str(ROOT / "configs" / "strategy" / "fsdp.yaml"), *GPU, "--trainer.max_steps", "20",
                   "--trainer.strategy.init_args.data_parallel_size", "1"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    from tests.test_cli import _train_losses

    losses = _train_losses(tmp_path / "runs")
    assert losses and all(loss == loss for loss in losses)


@pytest.mark.parametrize("kind", ["bias", "bias+padding", "bias+document+causal"])
def test_flex_attention_with_a_learned_bias_agrees_with_eager_on_cuda(kind):
    """T5's bias inside FlexAttention's kernel: output, input gradient and the bias table's gradient against the
    eager kernel in fp32 (CPU checks the forward only: FlexAttention has no CPU backward)."""
    from plm_lightning.nn.layer_attention import LayerAttention
    from plm_lightning.nn.positions import RelativePositionBias

    torch.manual_seed(0)
    ref = MultiHeadAttention(128, 4, backend="eager").cuda().eval()
    flex = MultiHeadAttention(128, 4, backend="flex").cuda().eval()
    flex.load_state_dict(ref.state_dict())
    tables = [RelativePositionBias(4, bidirectional="causal" not in kind).cuda() for _ in range(2)]
    tables[1].load_state_dict(tables[0].state_dict())
    mask = None
    if "padding" in kind:
        mask = attention_case("padding", length=64, device="cuda").mask
    if "document" in kind:
        mask = attention_case("document", length=64, device="cuda").mask
    x = torch.randn(3, 64, 128, device="cuda")
    outs, grads = [], []
    for module, table in zip((ref, flex), tables):
        xi = x.clone().requires_grad_()
        case = LayerAttention(mask=mask, is_causal="causal" in kind, position_bias=table(64, 64))
        out = module(xi, case)
        out.square().sum().backward()
        outs.append(out)
        grads.append((xi.grad, next(table.parameters()).grad))
    assert (outs[0] - outs[1]).abs().max().item() < 1e-4
    for a, b in zip(*grads):
        assert (a - b).abs().max().item() <= 1e-3 * max(1.0, a.abs().max().item())
