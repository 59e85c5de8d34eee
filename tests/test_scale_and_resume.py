"""Multi-process runs (DDP, FSDP2 on 2 CPU processes), SIGKILL + resume, and the W&B offline logger."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from tests.conftest import ROOT, run_cli
from tests.test_cli import _train_losses

NO_DROPOUT = ["--model.backbone_overrides", "{dropout: 0.0, attention_dropout: 0.0}"]
DP2_TP2 = ["--trainer.strategy.init_args.data_parallel_size", "2", "--trainer.devices", "4"]
SMALL = ["--data.seq_len", "64", "--trainer.limit_val_batches", "0", "--trainer.log_every_n_steps", "1",
         "--trainer.max_steps", "8", *NO_DROPOUT]


@pytest.mark.slow
@pytest.mark.parametrize("recipe,tolerance", [("gpt2", 2e-3), ("bert", 5e-3), ("realm", 5e-3)])
def test_ddp_and_fsdp2_match_single_process(recipe, tolerance, tmp_path):
    """Same global batch (16 = 1 x 16 = 2 x 8), same samples and masks: the same loss trajectory.

    GPT-2 gives every token loss, so per-rank means average to the global mean exactly; BERT's masked-token and NSP
    means per rank differ from the global mean by a little, hence its looser tolerance, as for REALM. REALM's inverse
    cloze task contrasts each query with the contexts of every rank (gathered; with its rank's 8 alone the loss was
    ln 2 above one process's 16 at the start), and its index is refreshed inside the step, where FSDP2 has gathered
    the embeddings.
    """
    config = str(ROOT / "configs" / f"{recipe}.yaml")
    runs = {
        "single": [],
        "ddp": ["--config", str(ROOT / "configs" / "strategy" / "ddp.yaml")],
        "fsdp": ["--config", str(ROOT / "configs" / "strategy" / "fsdp.yaml")],
    }
    losses = {}
    for name, extra in runs.items():
        (tmp_path / name).mkdir()
        batch = "16" if name == "single" else "8"
        res = run_cli(["fit", "--config", config, *extra, *SMALL, "--data.batch_size", batch], cwd=tmp_path / name)
        assert res.returncode == 0, res.stderr[-3000:]
        losses[name] = _train_losses(tmp_path / name / "runs")
    assert len(losses["single"]) == 8
    for name in ("ddp", "fsdp"):
        assert len(losses[name]) == 8
        diffs = [abs(a - b) for a, b in zip(losses["single"], losses[name])]
        assert max(diffs) < tolerance, (name, losses["single"], losses[name])


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "meshes", "options"), [
    ("gpt2", 1, []), ("bart", 2, []), ("t5", 1, []), ("deberta", 1, []),  # BERT's blocks: GPT-2's + DeBERTa's mask
    ("deberta-v3", 1, ["--model.generator_num_heads", "2"]),  # the tiny generator's one head cannot be split
    ("transformer-xl", 1, []), ("xlnet", 1, []), ("ernie-thu", 1, []),
])
def test_tensor_parallel_matches_single_process(recipe, meshes, options, tmp_path):
    """Megatron-style tensor parallelism over 2 processes (each holds half the heads and feed-forward units of every
    block; both read the same batch of 16) equals one process; on a 2 x 2 mesh of 4 (FSDP2 shards each
    tensor-parallel shard over 2 data-parallel ranks, each pair reading 8 of the 16) it equals FSDP2 alone over 2
    (BART here, whose blocks hold GPT-2's and cross-attention; GPT-2 on that mesh in the resume test below; BART's
    per-rank loss means differ from the global mean by a little, so the data-parallel runs are compared with each
    other; 4 steps each). Equal in losses,
    and in checkpoints holding the weights in their own layout (the fused q/k/v rows gathered back in order). BART
    adds cross-attention's fused k/v; T5 its bucket table split by heads; DeBERTa its position projections (split
    like q/k/v), DeBERTa-v3 the same through the q/k/v weight itself, and a generator; Transformer-XL its W_R (split
    by columns), u and v (by heads) and a memory; XLNet two streams and the segment terms; ERNIE (THU)
    knowledge-fusion layers (token and entity attention, the fusion split by columns then rows). No dropout of any
    kind: the split feed-forward would draw other masks. Checkpoint tensors agree within 1e-4 but for at most 0.1% of
    their elements, none past 1e-2: Adam turns float noise in a gradient near its eps (a rarely used row of T5's tied
    embeddings, a ReLU unit that barely fires) into a step-sized difference, so the runs use eps 1e-3 (with 1e-6,
    0.56% of one T5 feed-forward weight once moved past 1e-4 under a loaded CI machine); a layout error moves whole
    rows (0.1 in every q/k/v weight)."""
    config = str(ROOT / "configs" / f"{recipe}.yaml")
    tp = ["--config", str(ROOT / "configs" / "strategy" / "tp.yaml")]
    runs = {"single": ["--data.batch_size", "16"], "tp": [*tp, "--data.batch_size", "16"],
            "fsdp": ["--config", str(ROOT / "configs" / "strategy" / "fsdp.yaml"), "--data.batch_size", "8"],
            "dp2-tp2": [*tp, *DP2_TP2, "--data.batch_size", "8"]}
    pairs = (("single", "tp"), ("fsdp", "dp2-tp2"))[:meshes]
    runs = {name: runs[name] for pair in pairs for name in pair}
    steps = 4
    for name, extra in runs.items():
        (tmp_path / name).mkdir()
        res = run_cli(["fit", "--config", config, *SMALL, "--trainer.max_steps", str(steps), *extra, *options,
                       "--model.backbone_overrides", "{dropout: 0.0, attention_dropout: 0.0, ffn_dropout: 0.0}",
                       "--model.adam_eps", "1e-3"], cwd=tmp_path / name)
        assert res.returncode == 0, res.stderr[-3000:]
    for reference, name in pairs:
        expected, split = _train_losses(tmp_path / reference / "runs"), _train_losses(tmp_path / name / "runs")
        assert len(expected) == len(split) == steps
        assert max(abs(a - b) for a, b in zip(expected, split)) < 1e-4, (name, expected, split)
        (a,) = list((tmp_path / reference).rglob("last.ckpt"))
        (b,) = list((tmp_path / name).rglob("last.ckpt"))
        a, b = _state(a), _state(b)
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].shape == b[key].shape, (name, key)
            off = (a[key] - b[key]).abs()
            assert off.max() < 1e-2 and (off > 1e-4).float().mean() < 1e-3, (name, key, off.max().item())


def test_model_parallel_strategy_refuses_models_without_blocks(tmp_path):
    """ELMo (LSTMs) under FSDP2: nothing to shard, a one-line error naming the strategy key, not Lightning's
    traceback."""
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "elmo.yaml"), "--config",
                   str(ROOT / "configs" / "strategy" / "fsdp.yaml"), "--trainer.max_steps", "1"], cwd=tmp_path)
    assert res.returncode != 0 and "trainer.strategy: ELMo has no Transformer blocks" in res.stderr, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]


def _state(path):
    return torch.load(path, weights_only=True)["state_dict"]


@pytest.mark.slow
def test_sigkill_and_resume_ends_at_same_weights(tmp_path):
    (tmp_path / "every5.yaml").write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args: {save_last: true, every_n_train_steps: 5, save_top_k: 1}\n")
    common = ["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--config", str(tmp_path / "every5.yaml"),
              "--data.seq_len", "64", "--data.batch_size", "8", "--trainer.max_steps", "30",
              "--trainer.limit_val_batches", "0", "--trainer.deterministic", "true"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    res = run_cli(common, cwd=tmp_path / "a")
    assert res.returncode == 0, res.stderr[-3000:]

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "plm_lightning", *common], cwd=tmp_path / "b", env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not list((tmp_path / "b").rglob("last.ckpt")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (killed,) = list((tmp_path / "b").rglob("last.ckpt"))
    step_at_kill = torch.load(killed, weights_only=True)["global_step"]
    assert step_at_kill < 30, "the run finished before it could be killed"

    res = run_cli([*common, "--ckpt_path", "last"], cwd=tmp_path / "b")
    assert res.returncode == 0, res.stderr[-3000:]
    finals = sorted((tmp_path / "b").rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    assert torch.load(finals[-1], weights_only=True)["global_step"] == 30
    (reference,) = list((tmp_path / "a").rglob("last.ckpt"))
    a, b = _state(reference), _state(finals[-1])
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


@pytest.mark.slow
def test_wandb_offline_runs_keep_the_recipes_layout_and_resume(tmp_path):
    """With W&B (offline), each run has its own directory under the recipe's, runs/bert/<run id>/ with its
    checkpoints and its config.yaml, and W&B's files in runs/bert/wandb (issue 38: Lightning put the checkpoints
    under runs/<project>/ and every run overwrote one runs/config.yaml); ``--ckpt_path last`` resumes the first."""
    common = ["fit", "--config", str(ROOT / "configs" / "bert.yaml"), "--config",
              str(ROOT / "configs" / "logger" / "wandb.yaml"), "--data.seq_len", "64",
              "--trainer.limit_val_batches", "0", "--trainer.log_every_n_steps", "2"]
    env = {"WANDB_MODE": "", "WANDB_API_KEY": ""}
    res = run_cli([*common, "--trainer.max_steps", "4"], cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    recipe = tmp_path / "runs" / "bert"
    (first,) = list(recipe.glob("*/checkpoints/last.ckpt"))
    run_dir = first.parent.parent
    assert f"this run writes to runs/bert/{run_dir.name}" in res.stderr
    assert (run_dir / "config.yaml").is_file() and not (tmp_path / "runs" / "config.yaml").exists()
    (offline,) = list((recipe / "wandb").glob(f"offline-run-*-{run_dir.name}"))
    assert any(p.name.endswith(".wandb") for p in offline.rglob("*"))
    (summary,) = list(offline.rglob("wandb-summary.json")) or [None]
    if summary is not None:
        assert "train/loss" in summary.read_text()
    res = run_cli([*common, "--trainer.max_steps", "6", "--ckpt_path", "last"], cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"resuming from {first}" in res.stderr
    configs = sorted(recipe.glob("*/config.yaml"))
    assert len(configs) == 2 and all(yaml.safe_load(c.read_text())["trainer"]["max_steps"] in (4, 6) for c in configs)
    second = next(c.parent for c in configs if c.parent != run_dir)
    assert torch.load(second / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6


@pytest.mark.slow
def test_deberta_v3_gdes_trains_under_fsdp2(tmp_path):
    """ELECTRA-style RTD with gradient-disentangled sharing (a stop-gradient view of the generator's table held by
    reference) under FSDP2 on 2 processes: finite, decreasing losses and a full checkpoint with both tables."""
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "deberta-v3.yaml"), "--config",
                   str(ROOT / "configs" / "strategy" / "fsdp.yaml"), "--data.seq_len", "64", "--data.batch_size", "8",
                   "--trainer.limit_val_batches", "0", "--trainer.max_steps", "6", "--trainer.log_every_n_steps", "1"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    losses = _train_losses(tmp_path / "runs")
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    state = _state(ckpt)
    assert {"generator.embeddings.token.weight", "backbone.embeddings.token.delta"} <= set(state)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_clips_gradients_with_the_fused_optimizer(precision):
    """Lightning's autocast plugin refuses to clip for a fused AdamW; under bf16 (no scaler) we clip ourselves, under
    fp16 (a scaler that the fused step would unscale) the optimizer is built unfused. Either way the gradients the
    step used have global norm <= gradient_clip_val."""
    import lightning as L
    from lightning.pytorch.plugins.precision import MixedPrecision

    from plm_lightning.objectives import CausalLM

    class GradNorms(L.Callback):
        norms: list[float] = []

        def on_train_batch_end(self, trainer, module, *args):  # noqa: ANN001, ANN002
            self.norms.append(torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in module.parameters()
                                                                    if p.grad is not None])).item())

    ids = torch.randint(0, 97, (8, 4, 16))
    batches = [{"input_ids": x, "labels": x, "attention_mask": torch.ones_like(x)} for x in ids]
    model = CausalLM(backbone="tiny-gpt", vocab_size=97, learning_rate=1e-3)
    norms = GradNorms()
    # fp16 with a real loss scaler (Lightning gives none on CPU unless asked)
    amp = MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu")) if precision == "16-mixed" else None
    trainer = L.Trainer(accelerator="cpu", gradient_clip_val=1e-2, max_steps=4, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[norms],
                        **({"plugins": [amp]} if amp else {"precision": precision}))
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert len(norms.norms) == 4 and max(norms.norms) <= 1e-2 * (1 + 1e-3), norms.norms
    assert trainer.optimizers[0].defaults["fused"] is (True if precision == "bf16-mixed" else None)


@pytest.mark.slow
def test_checkpoints_resume_across_world_sizes_and_layouts(tmp_path):
    """4 steps, a checkpoint, then `--ckpt_path` to step 8 under another layout: FSDP2 over 2 processes (global batch
    2 x 8) resumed in one process (batch 16), one process resumed under FSDP2, tensor parallelism over 2 processes
    (both read the batch of 16) resumed in one, and one process resumed on a 2 x 2 (data x tensor) mesh of 4. Each
    equals the same 4 + 4 steps in one process, in its losses and in its final weights and Adam moments (measured: at
    most 6e-6 apart; the q/k/v moments loaded by Lightning's own loader alone are 1e-3 off, see
    `scale.reslice_strided_shards`), and every checkpoint names the recipe's class (not FSDP2's `FSDPCausalLM`
    wrapper). (The first leg's max_steps sets its learning-rate schedule, hence a two-leg reference.)"""
    config = str(ROOT / "configs" / "gpt2.yaml")
    layouts = {
        "single": ["--data.batch_size", "16"],
        "fsdp": ["--config", str(ROOT / "configs" / "strategy" / "fsdp.yaml"), "--data.batch_size", "8"],
        "tp": ["--config", str(ROOT / "configs" / "strategy" / "tp.yaml"), "--data.batch_size", "16"],
        "dp2-tp2": ["--config", str(ROOT / "configs" / "strategy" / "tp.yaml"), *DP2_TP2, "--data.batch_size", "8"],
    }
    losses, finals = {}, {}
    for first, second in (("single", "single"), ("fsdp", "single"), ("single", "fsdp"), ("tp", "single"),
                          ("single", "dp2-tp2")):
        name = f"{first}-{second}"
        (tmp_path / name).mkdir()
        res = run_cli(["fit", "--config", config, *layouts[first], *SMALL, "--trainer.max_steps", "4"],
                      cwd=tmp_path / name)
        assert res.returncode == 0, res.stderr[-3000:]
        (last,) = (tmp_path / name).rglob("last.ckpt")
        assert torch.load(last, weights_only=True)["plm_lightning"]["objective"] == "CausalLM"
        res = run_cli(["fit", "--config", config, *layouts[second], *SMALL, "--ckpt_path", str(last)],
                      cwd=tmp_path / name)
        assert res.returncode == 0, res.stderr[-3000:]
        runs = tmp_path / name / "runs" / "gpt2"
        losses[name] = _train_losses(runs / "version_0") + _train_losses(runs / "version_1")
        assert len(losses[name]) == 8, name
        (final,) = (runs / "version_1").rglob("last.ckpt")
        finals[name] = torch.load(final, weights_only=True)
    for name, trajectory in losses.items():
        assert max(abs(a - b) for a, b in zip(losses["single-single"], trajectory)) < 2e-3, (name, losses)
    reference = finals["single-single"]
    for name, final in finals.items():
        weights = max((final["state_dict"][k] - v).abs().max().item() for k, v in reference["state_dict"].items())
        moments = max((final["optimizer_states"][0]["state"][n][m] - s[m]).abs().max().item()
                      for n, s in reference["optimizer_states"][0]["state"].items() for m in ("exp_avg", "exp_avg_sq"))
        assert weights < 1e-4 and moments < 1e-4, (name, weights, moments)


def test_optimizer_state_numbered_by_module_order_loads_back_unchanged():
    """Renumbering (for ModelParallelStrategy's reader) keeps torch's own loader exact: it matches by group place."""
    from plm_lightning.objectives.scale import number_by_module_order

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    params = list(module.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2]}, {"params": [p for p in params if p.ndim < 2]}]
    optimizer = torch.optim.AdamW(groups, lr=0.1)
    module(torch.randn(5, 3)).square().sum().backward()
    optimizer.step()
    state = number_by_module_order(optimizer.state_dict(), optimizer, module)
    assert [n for g in state["param_groups"] for n in g["params"]] == [0, 4, 1, 2, 3, 5]  # weights, then the rest
    for number, p in enumerate(params):
        assert torch.equal(state["state"][number]["exp_avg"], optimizer.state[p]["exp_avg"])
    fresh = torch.optim.AdamW([{"params": g["params"]} for g in groups], lr=0.1)
    fresh.load_state_dict(state)
    for p in params:
        assert torch.equal(fresh.state[p]["exp_avg_sq"], optimizer.state[p]["exp_avg_sq"])


@pytest.mark.slow
def test_two_runs_started_together_in_one_directory_keep_apart(tmp_path):
    """Two fits started at once in one directory each claim a version of their own (mkdir, atomic): two intact
    metrics.csv and config.yaml; then ``--ckpt_path last`` of each resumes its own run (its seed's lineage)."""
    import csv

    (tmp_path / "every2.yaml").write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args: {save_last: true, every_n_train_steps: 2}\n")
    common = ["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--config", str(tmp_path / "every2.yaml"),
              "--data.seq_len", "64", "--data.batch_size", "8", "--trainer.limit_val_batches", "0",
              "--trainer.log_every_n_steps", "1"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-m", "plm_lightning", *common, "--trainer.max_steps", "4",
                               "--seed_everything", str(seed)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, proc.stderr.read()[-3000:]
    versions = sorted(tmp_path.glob("runs/*/version_*"))
    assert len(versions) == 2
    seeds = {}
    for version in versions:
        config = (version / "config.yaml").read_text()
        seed = int(next(line for line in config.splitlines() if line.startswith("seed_everything:")).split()[-1])
        seeds[seed] = version
        with open(version / "metrics.csv") as f:
            steps = [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
        assert steps == sorted(steps) and len(steps) == len(set(steps)) and steps[-1] == 3  # one run's rows only
    assert sorted(seeds) == [1, 2]
    for seed in (2, 1):
        res = run_cli([*common, "--trainer.max_steps", "6", "--seed_everything", str(seed), "--ckpt_path", "last"],
                      cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"resuming from {(seeds[seed] / 'checkpoints' / 'last.ckpt').resolve()}" in res.stderr
    res = run_cli([*common, "--trainer.max_steps", "6", "--seed_everything", "3", "--ckpt_path", "last"],
                  cwd=tmp_path)
    assert res.returncode == 2 and "another seed, model or data configuration" in res.stderr
