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


def _import_graph(third_party: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement, at module level or in a function); with
    ``third_party``, also the top-level names of the other packages it imports (``lightning``, ``torch``, ...)."""
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
                if third_party and name and not name.startswith("plm_lightning") and not getattr(node, "level", 0):
                    graph[module].add(name.split(".")[0])
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


def _forbidden_imports() -> dict[str, list[str]]:
    """docs/architecture.md's table: package (or top-level module) -> what it must not import."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("| package | must not import |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = [name.strip().strip("`") for name in cells[1].split(",")]
    return rows


def _breaches(graph: dict[str, set[str]], rows: dict[str, list[str]]) -> list[str]:
    def inside(module: str, name: str) -> bool:
        full = name if name == "lightning" else f"plm_lightning.{name}"
        return module == full or module.startswith(full + ".")

    return sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                  for row, banned in rows.items() if inside(module, row)
                  for name in banned if inside(target, name))


def test_the_import_table_of_the_architecture_page_holds() -> None:
    rows = _forbidden_imports()
    assert {"nn", "corpus", "data", "objectives", "interop"} <= set(rows), rows
    assert "lightning" in rows["corpus"] and "data" in rows["corpus"] and "nn" in rows["data"]
    assert _breaches(_import_graph(third_party=True), rows) == []


def test_the_import_table_check_sees_a_breach() -> None:
    graph = {"plm_lightning.data.unilm": {"plm_lightning.nn.masks", "numpy"},
             "plm_lightning.corpus.sources": {"lightning"}, "plm_lightning.data_commands": {"plm_lightning.data"}}
    rows = {"data": ["nn"], "corpus": ["lightning"], "data_contract": ["data"]}
    assert _breaches(graph, rows) == ["plm_lightning.corpus.sources imports lightning",
                                      "plm_lightning.data.unilm imports plm_lightning.nn.masks"]


def test_the_batch_names_the_attention_kinds_the_blocks_build() -> None:
    from plm_lightning.data_contract import ATTENTION_KINDS
    from plm_lightning.nn.masks import ATTENTION_KINDS as BUILT

    assert ATTENTION_KINDS == BUILT


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


def test_a_new_module_in_the_package_is_its_short_class_path(tmp_path) -> None:
    """The acid test of "nothing to register": in a copy of the package, one new file in ``objectives/`` and one in
    ``data/`` (no ``__init__`` edited) are ``plm_lightning.objectives.ReverseLM`` and
    ``plm_lightning.data.ReverseDataModule`` to a YAML, to the top level, and to ``--print_config``."""
    import shutil

    copy = tmp_path / "plm_lightning"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "objectives" / "reverse_lm.py").write_text(
        '"""A right-to-left LM (a test\'s objective)."""\nfrom plm_lightning.objectives.causal_lm import CausalLM\n\n\n'
        'class ReverseLM(CausalLM):\n    """corruption: none | attention: right to left | loss: every token."""\n')
    (copy / "data" / "reverse.py").write_text(
        '"""Reversed rows (a test\'s data module)."""\nfrom plm_lightning.data.datamodule import CausalLMDataModule\n\n\n'
        'class ReverseDataModule(CausalLMDataModule):\n    """GPT-2\'s rows."""\n')
    recipe = (ROOT / "configs" / "gpt2.yaml").read_text()
    recipe = recipe.replace("plm_lightning.objectives.CausalLM", "plm_lightning.objectives.ReverseLM")
    recipe = recipe.replace("plm_lightning.data.CausalLMDataModule", "plm_lightning.data.ReverseDataModule")
    (tmp_path / "reverse.yaml").write_text(recipe)
    code = ("import plm_lightning, plm_lightning.objectives as o, plm_lightning.data as d\n"
            f"assert plm_lightning.__file__.startswith({str(tmp_path)!r}), plm_lightning.__file__\n"
            "assert o.ReverseLM.__module__ == 'plm_lightning.objectives.reverse_lm' and 'ReverseLM' in o.__all__\n"
            "assert plm_lightning.ReverseDataModule is d.ReverseDataModule\n"
            "from plm_lightning.cli import main\nmain(['fit', '--config', 'reverse.yaml', '--print_config'])\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ReverseLM" in res.stdout and "ReverseDataModule" in res.stdout, res.stdout[:2000]
