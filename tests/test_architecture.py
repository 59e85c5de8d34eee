"""The package's layering: no new import circle, the plain-PyTorch blocks load without Lightning, one set of default
callbacks."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "plm_lightning"

KNOWN_CIRCLES: set[frozenset[str]] = set()
"""Import circles still to break: none since issue 39. None may appear."""


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement, at module level or in a function)."""
    files = {p: ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
             for p in PACKAGE.rglob("*.py")}
    modules = set(files.values())

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path, module in files.items():
        base = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parent = node.module or ""
                if node.level:
                    parts = base.split(".")
                    parent = ".".join(parts[: len(parts) - node.level + 1] + ([parent] if parent else []))
                names = [f"{parent}.{a.name}" for a in node.names] + [parent]
            else:
                continue
            for name in names:
                target = owner(name) if name.startswith("plm_lightning") else None
                if target and target != module and not (module.startswith(target + ".")
                                                        and (PACKAGE.parent / target.replace(".", "/")).is_dir()):
                    graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(frozenset(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_new_import_circle() -> None:
    circles = _circles(_import_graph())
    assert all(any(c <= known for known in KNOWN_CIRCLES) for c in circles), [sorted(c) for c in circles]


def test_the_circle_check_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


def test_the_blocks_load_without_lightning() -> None:
    """``plm_lightning.nn`` is plain PyTorch, and the package's top level imports its names on first use."""
    code = ("import sys, plm_lightning.nn, plm_lightning; plm_lightning.BackboneConfig\n"
            "assert 'lightning' not in sys.modules, sorted(m for m in sys.modules if m.startswith('lightning'))[:5]")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def test_one_set_of_default_callbacks() -> None:
    """``callbacks/default.yaml`` (what users compose with ``--config``) is the package's own default list."""
    assert (ROOT / "callbacks" / "default.yaml").read_text() == (PACKAGE / "callbacks" / "default.yaml").read_text()


TOY_PACKAGE = '''
"""Every-k-th masking: a toy objective declared outside plm_lightning (a corruption, a module, a data module)."""
import numpy as np
import pytest
import torch

from plm_lightning.data.collators import stack_samples
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.nn import Encoder, LMHead
from plm_lightning.objectives import PretrainingModule


def every_kth(ids, real, k, mask_id):
    """The corruption: every k-th real token becomes the mask and carries the loss."""
    chosen = (np.arange(ids.shape[1]) % k == k - 1)[None, :] & real
    return np.where(chosen, mask_id, ids), np.where(chosen, ids, IGNORE_INDEX)


class EveryKthCollator:
    objective = "every_kth"

    def __init__(self, k, mask_id):
        self.k, self.mask_id = k, mask_id

    def __call__(self, samples):
        stacked = stack_samples(samples)
        ids, labels = every_kth(stacked["input_ids"], stacked["attention_mask"].astype(bool), self.k, self.mask_id)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels),
                "attention_mask": torch.from_numpy(stacked["attention_mask"])}


class EveryKthDataModule(TextDataModule):
    required_special_tokens = ("mask", "pad")

    def __init__(self, *args, k: int = 4, **kwargs):
        super().__init__(*args, **kwargs)
        self.k = k

    def collator(self):
        return EveryKthCollator(self.k, self.tokenizer.ids["mask"])


class EveryKthLM(PretrainingModule):
    """corruption: every k-th token masked | attention: bidirectional | loss: the masked positions."""

    required_special_tokens = ("mask",)

    def build(self):
        self.backbone = Encoder(self.config)
        self.lm_head = LMHead(self.config)

    def compute_loss(self, batch):
        loss, lm = self.lm_loss(self.run_stack(self.backbone, batch), batch["labels"])
        return {"loss": loss, "lm_loss": loss, **lm}
'''

TOY_RECIPE = """
seed_everything: 1
model:
  class_path: toyobj.EveryKthLM
  init_args: {backbone: tiny}
data:
  class_path: toyobj.EveryKthDataModule
  init_args: {k: 3, tokenizer: wordpiece, tokenizer_vocab_size: 512, seq_len: 32, batch_size: 4, max_documents: 60}
trainer: {accelerator: cpu, devices: 1, max_steps: 3, limit_val_batches: 1, val_check_interval: 3}
"""


def test_a_new_objective_needs_no_edit_to_the_package(tmp_path, monkeypatch, capsys) -> None:
    """A toy objective in a package of its own (a corruption function, a module, a data module) and its YAML:
    ``fit``, ``inspect --json`` and ``--print_config`` take it, and the CLI names its keys in errors, with no edit to
    any file of plm_lightning (issue 39's measure: a package file, a YAML and this test). In this process, as the
    user's package on ``sys.path``."""
    import json

    import pytest
    import torch

    from plm_lightning.cli import main
    from tests.conftest import cli_error, cli_output

    (tmp_path / "toyobj").mkdir()
    (tmp_path / "toyobj" / "__init__.py").write_text(TOY_PACKAGE)
    (tmp_path / "toy.yaml").write_text(TOY_RECIPE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "toy.yaml"])
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == 3
    with pytest.raises(SystemExit):
        main(["fit", "--config", "toy.yaml", "--print_config"])
    shown = capsys.readouterr().out
    assert "class_path: toyobj.EveryKthLM" in shown and "k: 3" in shown
    found = json.loads(cli_output(["inspect", "--config", "toy.yaml", "--json"], capsys))
    assert found["objective"] == "EveryKthLM" and found["corruption"] == "every_kth"
    assert abs(found["loss_fraction"] - 1 / 3) < 0.05, found  # every third real token carries the loss
    assert "valid keys under 'data': k," in cli_error(["fit", "--config", "toy.yaml", "--data.kk", "2"], capsys)


def test_every_data_module_declares_a_view_inspect_has() -> None:
    """``inspect`` takes each data module's view from the data module (``inspection_view``), not from a list of
    objectives: every shipped one names a view that exists (ELMo's and the static embeddings' by their examples),
    and an unknown name is one line naming the class."""
    from plm_lightning.data.datamodule import TextDataModule
    from plm_lightning.data.static import WordEmbeddingDataModule
    from plm_lightning.errors import ConfigError
    from plm_lightning.inspection import _views, recipe_views
    from plm_lightning.registry import lightning_classes

    views = _views()
    declared = {}
    for cls in lightning_classes("data"):
        if not cls.__module__.startswith("plm_lightning."):
            continue
        view = getattr(cls, "inspection_view", "token")
        if isinstance(view, property):
            continue
        declared[cls.__name__] = view
        assert view in views, (cls.__name__, view)
    assert declared["SpanCorruptionDataModule"] == declared["BARTDataModule"] == "seq2seq"
    assert declared["REALMDataModule"] == "retrieval" and declared["MaskedLMDataModule"] == "token"
    assert isinstance(WordEmbeddingDataModule.inspection_view, property)

    class Odd(TextDataModule):
        inspection_view = "audio"

    with pytest.raises(ConfigError, match=r"inspect: Odd.inspection_view='audio' is not one of token, seq2seq"):
        recipe_views(Odd())
