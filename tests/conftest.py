import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# pytest imports this file as `conftest`; the tests import helpers from `tests.conftest`: one module, so one CLI
# zygote per worker (see run_cli)
sys.modules.setdefault("tests.conftest", sys.modules[__name__])

if os.environ.get("PYTEST_XDIST_WORKER"):  # n workers share the cores: one intra-op thread pool each, not n oversubscribed
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))  # the CLI runs' subprocesses
    import torch

    torch.set_num_threads(_threads)


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tokenizer/packing cache for the whole session, shared by the xdist workers (the caches are written
    atomically and built concurrently safely): a tokenizer one worker trained, the other loads."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' base directories are siblings under the session's
    cache = root / "plm_cache"
    cache.mkdir(exist_ok=True)
    os.environ["PLM_LIGHTNING_CACHE"] = str(cache)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    return cache


def run_cli(args: list[str], cwd: Path, timeout: int = 600, env: dict | None = None, fresh: bool = False):
    """Run ``python -m plm_lightning ARGS`` as a user would: in a process of its own, with its own working directory,
    environment, stdout/stderr and exit status. By default the process is forked from a zygote that has already
    imported the package (``tests/_cli_child.py``), which saves a new interpreter's ~10 s of imports per run;
    ``fresh=True`` starts a real interpreter, for the runs that need one (Lightning's launchers re-run the command
    line)."""
    import subprocess
    import tempfile

    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    if fresh:
        return subprocess.run([sys.executable, "-m", "plm_lightning", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, env=full_env)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        code = _zygote().run({"args": list(args), "cwd": str(cwd), "env": full_env, "stdout": str(out),
                              "stderr": str(err)}, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(["plm_lightning", *args], timeout)
        return subprocess.CompletedProcess(["plm_lightning", *args], code, out.read_text(), err.read_text())


class _Zygote:
    """This worker's ``tests/_cli_child.py`` server: one request at a time (a worker runs one test at a time)."""

    def __init__(self) -> None:
        import subprocess

        self.process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "_cli_child.py")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                        env={**os.environ, "PYTHONWARNINGS": "ignore"})

    def run(self, request: dict, timeout: float) -> int | None:
        """The child's exit status, or None when it ran past ``timeout`` seconds (then it is killed)."""
        import json
        import select
        import signal

        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = json.loads(self.process.stdout.readline())["pid"]
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            self.process.stdout.readline()
            return None
        return json.loads(self.process.stdout.readline())["code"]


_ZYGOTE: list[_Zygote] = []


def _zygote() -> _Zygote:
    if not _ZYGOTE or _ZYGOTE[0].process.poll() is not None:
        _ZYGOTE[:] = [_Zygote()]
    return _ZYGOTE[0]


def cli_output(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run the CLI's ``main(ARGS)`` in this process (an extra subcommand such as ``inspect``, without the seconds of
    a new interpreter's imports) and return what it printed; it must not exit with an error."""
    from plm_lightning.cli import main

    capsys.readouterr()
    main(args)
    return capsys.readouterr().out


def cli_error(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run the CLI's ``main(ARGS)`` in this process (no interpreter start-up) for an input it must refuse; assert the
    contract a user sees (exit code 2, exactly one ``plm_lightning: error:`` line on stderr, no traceback) and return
    that line."""
    from plm_lightning.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.startswith("plm_lightning: error:")]
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def masked_batch(batch: int = 3, length: int = 40, vocab: int = 101, mask_prob: float = 0.15, seed: int = 1,
                 pad_from: int | None = 30) -> dict:
    """A small MLM batch in the collators' format: the last row padded from ``pad_from``, ~``mask_prob`` of the real
    tokens (never position 0, the [CLS] slot) replaced by id 4 and labelled with the original id."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if pad_from is not None:
        mask[-1, pad_from:] = 0
        ids[-1, pad_from:] = 0
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < mask_prob) & mask.bool()
    chosen[:, 0] = False
    labels[chosen] = ids[chosen]
    return {"input_ids": ids.masked_fill(chosen, 4), "labels": labels, "attention_mask": mask}


def seq2seq_batch(pad_id: int = 0, start_id: int = 0) -> dict:
    """A small encoder-decoder batch (30 encoder tokens, the second row padded from 22 with ``pad_id``; 9 decoder
    tokens starting from ``start_id``) for parity tests against transformers."""
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (2, 30), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 22:] = 0
    ids[1, 22:] = pad_id
    dec = torch.randint(3, 100, (2, 9), generator=g)
    dec[:, 0] = start_id
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
            "decoder_attention_mask": torch.ones_like(dec)}


def spread_biases(model):  # noqa: ANN001, ANN201
    """Random-weight parity: move every 1-D parameter (biases, norm weights) off its initial value, so a mapping
    that swaps or drops one shows in the logits; returns the model in eval mode."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def decoder_logits(module, batch: dict):  # noqa: ANN001, ANN201
    """Our Seq2SeqLM's LM logits under teacher forcing."""
    import torch

    with torch.no_grad():
        return module.lm_head(module.decode(batch))


ATTENTION_CASES = ["none", "padding", "causal", "causal+padding", "prefix", "document", "bias"]


def attention_case(kind: str, batch: int = 3, length: int = 10, heads: int = 4, device: str = "cpu"):  # noqa: ANN201
    """The ``LayerAttention`` of `MultiHeadAttention.forward` for one mask shape of ``ATTENTION_CASES``: the second row
    padded from 70% of the length, prefix lengths of 30%/50%/100%, two packed documents, or a T5 relative bias."""
    import torch

    from plm_lightning.nn import document_mask, padding_mask, prefix_lm_mask
    from plm_lightning.nn.layer_attention import LayerAttention
    from plm_lightning.nn.positions import RelativePositionBias

    real = torch.ones(batch, length, dtype=torch.bool)
    real[1 % batch, int(0.7 * length):] = False
    case: dict = {"mask": None, "is_causal": "causal" in kind, "position_bias": None}
    if "padding" in kind:
        case["mask"] = padding_mask(real)
    if kind == "prefix":
        case["mask"] = prefix_lm_mask(torch.tensor([int(0.3 * length), length // 2, length][:batch]), length)
    if kind == "document":
        case["mask"] = document_mask(torch.tensor([[0] * (length * 2 // 5) + [1] * (length - length * 2 // 5)] * batch))
    if kind == "bias":
        case["position_bias"] = RelativePositionBias(heads)(length, length).detach()
    return LayerAttention(**{k: v.to(device) if torch.is_tensor(v) else v for k, v in case.items()})


def tiny_pretrained(path: Path, family: str) -> str:
    """A tiny BERT (``bert``), GPT-2 (``gpt2``), T5 (``t5``) or BART (``bart``) checkpoint of ours with random
    weights and a tokenizer trained on a slice of the embedded corpus, written as the pretraining recipes write
    theirs (for fine-tuning tests)."""
    import itertools

    import torch

    from plm_lightning.checkpoint_format import CHECKPOINT_KEY
    from plm_lightning.corpus.sources import embedded_corpus
    from plm_lightning.corpus.tokenizer import train_tokenizer
    from plm_lightning.objectives import ELECTRA, CausalLM, MaskedLM, PermutationLM, Seq2SeqLM

    kind, cls, preset = {"bert": ("wordpiece", MaskedLM, "tiny"), "gpt2": ("gpt2", CausalLM, "tiny-gpt"),
                         "t5": ("unigram", Seq2SeqLM, "tiny-t5"), "bart": ("bpe", Seq2SeqLM, "tiny-bart"),
                         "roberta": ("bpe", MaskedLM, "tiny"), "albert": ("wordpiece", MaskedLM, "tiny-albert"),
                         "electra": ("wordpiece", ELECTRA, "tiny"), "xlnet": ("wordpiece", PermutationLM, "tiny-xlnet"),
                         "transformer-xl": ("gpt2", CausalLM, "tiny-transformer-xl"),
                         "deberta": ("bpe", MaskedLM, "tiny-deberta"), "modernbert": ("bpe", MaskedLM, "tiny-modernbert"),
                         }[family]
    tok = train_tokenizer(kind, list(itertools.islice(embedded_corpus(), 150)), 800)
    torch.manual_seed(0)
    extra = {"decoder_start_token": "eos"} if family == "bart" else {}
    overrides = {"pad_token_id": tok.ids.get("pad", 0)}
    if family == "roberta":  # RoBERTa's positions, as configs/roberta.yaml sets them
        overrides.update(positions_from_padding=True, position_offset=2)
    module = cls(backbone=preset, vocab_size=tok.vocab_size, backbone_overrides=overrides,
                 **extra)  # as the recipes' setup does
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                CHECKPOINT_KEY: {"objective": cls.__name__, "backbone": module.config.to_dict(),
                                 "tokenizer": {"json": tok.tokenizer.to_str(), "special": tok.special,
                                               "kind": tok.kind}}}, path)
    return str(path)


WORLD_SPEC = "world:seed=0,subjects=24"
"""A small world (120 facts, 11 of them alias-only) for the tests that only need its text and facts (arena, REALM)."""


@pytest.fixture(scope="session")
def world_gpt(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> dict:
    """The knowledge recipe itself (configs/knowledge/gpt2-world.yaml: a 4-layer GPT-2 on the default 100-subject
    world, 1200 steps) trained through the CLI once per session (shared by xdist workers through a file lock):
    {"last": checkpoint, "checkpoints": [the saved ones, oldest first], "world": spec}. The full world, not a smaller
    one, because the editing tests check the issue's locality bound in points of P@1: on 24 subjects one probe is a
    point (104 probes), on 100 it is a fifth of one (459), and the smaller world's model was also the weaker one
    (ROME: one miss in ten, 5.7 points for the worst single edit; issue 7's note)."""
    import json

    from filelock import FileLock

    reuse = os.environ.get("PLM_TEST_WORLD_GPT")  # a directory of an earlier session's model (its done.json)
    if reuse:
        return json.loads((Path(reuse) / "done.json").read_text())
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    out = root / "world_gpt"
    with FileLock(str(root / "world_gpt.lock")):
        done = out / "done.json"
        if not done.is_file():
            result = run_cli(["fit", "--config", str(ROOT / "configs/knowledge/gpt2-world.yaml"),
                              "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
                              "--trainer.callbacks.dirpath", str(out / "checkpoints")],
                             cwd=ROOT, env={"PLM_LIGHTNING_CACHE": str(shared_cache)}, timeout=1200)
            assert result.returncode == 0, result.stderr[-3000:]
            last = str(out / "checkpoints" / "last.ckpt")
            saved = sorted(str(p) for p in (out / "checkpoints").glob("step*.ckpt")) + [last]
            done.write_text(json.dumps({"last": last, "checkpoints": saved,
                                        "world": "world"}))
    return json.loads((out / "done.json").read_text())
