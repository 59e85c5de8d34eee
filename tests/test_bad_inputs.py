"""The bad-input catalogue (issue 37): inputs a user gets wrong, across every command, each run through the real CLI
in a process of its own (``conftest.run_cli``). Every case must end with exit status 2, exactly one stderr line
starting ``plm_lightning: error:`` that names what is wrong (the needles), no traceback, and no file that existed
before the run changed (the shared material, and the case's own working directory).

Placeholders in a case's arguments: ``{m}`` the shared material directory (checkpoints, transformers directories,
text files, broken files, built once per worker), ``{cfg}`` the recipes' ``configs/``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_cli, tiny_pretrained

pytestmark = pytest.mark.xdist_group("bad_inputs")  # one worker builds the material once

FIT_BERT = ["fit", "--config", "{cfg}/bert.yaml", "--trainer.max_steps", "1"]
FIT_GPT2 = ["fit", "--config", "{cfg}/gpt2.yaml", "--trainer.max_steps", "1"]
VALIDATE_GPT2 = ["validate", "--config", "{cfg}/gpt2.yaml", "--trainer.limit_val_batches", "1"]
PROMPTS = ["predict", "{m}/gpt2.ckpt", "{m}/prompts.txt"]

CASES: dict[str, tuple[list[str], list[str]]] = {
    # fit: the recipe's data keys
    "fit missing source": ([*FIT_BERT, "--data.source", "does/not/exist.txt"], ["data.source", "no such file"]),
    "fit empty source": ([*FIT_BERT, "--data.source", "{m}/empty.txt"], ["data.source", "empty"]),
    "fit binary source": ([*FIT_BERT, "--data.source", "{m}/binary.txt"], ["data.source", "binary"]),
    "fit parquet that is not": ([*FIT_BERT, "--data.source", "{m}/fake.parquet"], ["fake.parquet"]),
    "fit mask_prob": ([*FIT_BERT, "--data.mask_prob", "1.5"], ["data.mask_prob"]),
    "fit replace probs": ([*FIT_BERT, "--data.mask_replace_prob", "0.9", "--data.random_replace_prob", "0.2"],
                          ["data.mask_replace_prob", "<= 1"]),
    "fit seq_len past positions": ([*FIT_GPT2, "--data.seq_len", "4096"], ["data.seq_len=4096", "256 positions"]),
    "fit vocab smaller than tokenizer": ([*FIT_BERT, "--model.vocab_size", "100"],
                                         ["model.vocab_size=100", "8192 tokens"]),
    "fit tokenizer without specials": ([*FIT_BERT, "--data.tokenizer", "{m}/wordlevel/tokenizer.json"],
                                       ["no cls/sep/mask token"]),
    "fit tokenizer_config not json": ([*FIT_BERT, "--data.tokenizer", "{m}/badtok"],
                                      ["tokenizer_config.json", "not JSON"]),
    "fit tokenizer_config a list": ([*FIT_BERT, "--data.tokenizer", "{m}/listtok"],
                                    ["tokenizer_config.json", "JSON list"]),
    "fit missing tokenizer": ([*FIT_BERT, "--data.tokenizer", "{m}/nowhere/tokenizer.json"], ["data.tokenizer"]),
    "fit choice": ([*FIT_BERT, "--data.masking_scheme", "spans"], ["data.masking_scheme='spans'", "'span'"]),
    "fit type": ([*FIT_BERT, "--data.seq_len", "abc"], ["data.seq_len='abc'", "int"]),
    "fit span p": ([*FIT_BERT, "--data.span_geometric_p", "0"], ["data.span_geometric_p"]),
    "fit missing lexicon": ([*FIT_BERT, "--data.masking_scheme", "ernie", "--data.phrase_lexicon", "{m}/nope.txt"],
                            ["data.phrase_lexicon", "nope.txt", "does not exist"]),
    "fit nsp on sop pairs": ([*FIT_BERT, "--data.packing", "sentence_order"],
                             ["model.sentence_prediction=nsp", "sentence_pairs"]),
    "fit packing": ([*FIT_GPT2, "--data.packing", "shuffled"], ["data.packing", "contiguous"]),
    "fit tokenizer vocab huge": ([*FIT_GPT2, "--data.tokenizer_vocab_size", "1000000000"],
                                 ["data.tokenizer_vocab_size=1000000000"]),
    "fit batch size zero": ([*FIT_GPT2, "--data.batch_size", "0"], ["data.batch_size"]),
    # fit: the model and the optimizer
    "fit unknown model key": ([*FIT_BERT, "--model.num_layerz", "3"], ["model.num_layerz", "backbone_overrides"]),
    "fit unknown key lists the recipe's": ([*FIT_GPT2, "--model.bogus", "1"], ["valid keys under 'model': backbone"]),
    "fit backbone key": ([*FIT_BERT, "--model.backbone_overrides", "{num_layer: 3}"], ["model.backbone", "num_layers"]),
    "fit zero heads": ([*FIT_GPT2, "--model.backbone_overrides", "{num_heads: 0}"], ["num_heads=0"]),
    "fit unknown preset": ([*FIT_GPT2, "--model.backbone", "gpt-9"], ["model.backbone", "gpt-9"]),
    "fit negative lr": ([*FIT_GPT2, "--model.learning_rate", "-1"], ["model.learning_rate=-1"]),
    "fit negative warmup": ([*FIT_GPT2, "--model.warmup_steps", "-5"], ["model.warmup_steps=-5"]),
    "fit betas": ([*FIT_GPT2, "--model.betas", "[0.9, 1.5]"], ["model.betas"]),
    "fit init_from nowhere": ([*FIT_GPT2, "--model.init_from", "{m}/nowhere"], ["model.init_from", "nowhere"]),
    # fit: config files and the trainer
    "fit latin-1 config": ([*FIT_GPT2, "--config", "{m}/latin1.yaml"], ["is not UTF-8 text"]),
    "fit empty config": ([*FIT_GPT2, "--config", "{m}/empty.yaml"], ["empty.yaml", "is empty"]),
    "fit missing config": (["fit", "--config", "{m}/nowhere.yaml"], ["nowhere.yaml"]),
    "fit progress bar off": ([*FIT_BERT, "--trainer.enable_progress_bar", "false"],
                             ["enable_progress_bar=False", "ProgressBar"]),
    "fit resume of another recipe": ([*FIT_BERT, "--ckpt_path", "{m}/gpt2.ckpt"], ["MaskedLM", "CausalLM"]),
    # validate / test: checkpoints
    "validate missing checkpoint": ([*VALIDATE_GPT2, "--ckpt_path", "{m}/nowhere.ckpt"], ["nowhere.ckpt"]),
    "validate directory checkpoint": ([*VALIDATE_GPT2, "--ckpt_path", "{m}"], ["ckpt_path", "is a directory"]),
    "validate tensor checkpoint": ([*VALIDATE_GPT2, "--ckpt_path", "{m}/tensor.ckpt"],
                                   ["ckpt_path", "was not written by plm_lightning"]),
    "validate bare checkpoint": ([*VALIDATE_GPT2, "--ckpt_path", "{m}/bare.ckpt"],
                                 ["ckpt_path", "was not written by plm_lightning"]),
    "validate random bytes": ([*VALIDATE_GPT2, "--ckpt_path", "{m}/random.ckpt"], ["ckpt_path", "random.ckpt"]),
    "test a pretraining recipe": (["test", "--config", "{cfg}/gpt2.yaml"], ["holds out no test split", "validate"]),
    "test checkpoint of another recipe": (["test", "--config", "{cfg}/bert.yaml", "--ckpt_path", "{m}/gpt2.ckpt"],
                                          ["MaskedLM", "CausalLM"]),
    # predict (generation)
    "predict missing prompts": (["predict", "{m}/gpt2.ckpt", "{m}/none.txt"], ["no such prompts file"]),
    "predict latin-1 prompts": (["predict", "{m}/gpt2.ckpt", "{m}/latin1.txt"], ["latin1.txt", "UTF-8"]),
    "predict prompts a directory": (["predict", "{m}/gpt2.ckpt", "{m}"], ["is a directory"]),
    "predict top_p": ([*PROMPTS, "--top-p", "0"], ["--top-p=0.0"]),
    "predict strategy": ([*PROMPTS, "--strategy", "nucleus"], ["--strategy", "nucleus"]),
    "predict beams": ([*PROMPTS, "--num_beams", "0"], ["--num-beams=0"]),  # the old spelling still parses
    "predict temperature": ([*PROMPTS, "--strategy", "sample", "--temperature", "-1"], ["--temperature"]),
    "predict masked lm": (["predict", "{m}/bert.ckpt", "{m}/prompts.txt"], ["holds a MaskedLM checkpoint"]),
    "predict random bytes": (["predict", "{m}/random.ckpt", "{m}/prompts.txt"], ["random.ckpt"]),
    # import
    "import nowhere": (["import", "{m}/nowhere", "{cwd}/out.ckpt"], ["nowhere"]),
    "import broken config.json": (["import", "{m}/hf_broken", "{cwd}/out.ckpt"], ["config.json"]),
    "import config.json a list": (["import", "{m}/hf_list", "{cwd}/out.ckpt"], ["config.json"]),
    "import missing field": (["import", "{m}/hf_no_n_embd", "{cwd}/out.ckpt"], ["n_embd"]),
    "import random weights": (["import", "{m}/hf_random_weights", "{cwd}/out.ckpt"], ["model.safetensors"]),
    "import huge vocabulary": (["import", "{m}/hf_huge_vocab", "{cwd}/out.ckpt"], ["vocab_size"]),
    "import more layers than weights": (["import", "{m}/hf_more_layers", "{cwd}/out.ckpt"],
                                        ["transformer.h.2", "config.json's shape"]),
    "import broken tokenizer_config": (["import", "{m}/hf_bad_tokenizer", "{cwd}/out.ckpt"],
                                       ["tokenizer_config.json"]),
    "import output under a file": (["import", "{m}/hf_gpt2", "{m}/blocker/out.ckpt"], ["blocker"]),
    # export
    "export missing checkpoint": (["export", "{m}/nowhere.ckpt", "{cwd}/out"], ["nowhere.ckpt"]),
    "export tensor checkpoint": (["export", "{m}/tensor.ckpt", "{cwd}/out"], ["tensor.ckpt"]),
    "export a text file": (["export", "{m}/corpus.txt", "{cwd}/out"], ["corpus.txt", "not a PyTorch pickle"]),
    "export output under a file": (["export", "{m}/gpt2.ckpt", "{m}/blocker/out"], ["blocker"]),
    "export generator of a gpt": (["export", "{m}/gpt2.ckpt", "{cwd}/out", "--part", "generator"], ["--part"]),
    # inspect
    "inspect missing config": (["inspect", "--config", "{m}/nowhere.yaml"], ["nowhere.yaml"]),
    "inspect latin-1 config": (["inspect", "--config", "{m}/latin1.yaml"], ["latin1.yaml", "UTF-8"]),
    "inspect png under a file": (["inspect", "--config", "{cfg}/gpt2.yaml", "--png", "{m}/blocker/x.png"],
                                 ["blocker"]),
    "inspect zero batches": (["inspect", "--config", "{cfg}/gpt2.yaml", "--json", "--batches", "0"], ["--batches"]),
    "inspect bad override": (["inspect", "--config", "{cfg}/gpt2.yaml", "--data.seq_len", "abc"], ["data.seq_len"]),
    # prepare
    "prepare missing source": (["prepare", "{m}/nowhere.txt", "{cwd}/out.jsonl"], ["nowhere.txt"]),
    "prepare output under a file": (["prepare", "{m}/corpus.txt", "{m}/blocker/out.jsonl"], ["blocker"]),
    "prepare unknown step": (["prepare", "{m}/corpus.txt", "{cwd}/out.jsonl", "--steps", "bogus"], ["bogus"]),
    "prepare missing bad words": (["prepare", "{m}/corpus.txt", "{cwd}/out.jsonl", "--bad-words", "{m}/nope.txt"],
                                  ["nope.txt"]),
    "prepare zero workers": (["prepare", "{m}/corpus.txt", "{cwd}/out.jsonl", "--workers", "0"], ["--workers"]),
    "prepare parquet that is not": (["prepare", "{m}/fake.parquet", "{cwd}/out.jsonl"], ["not a readable parquet"]),
    # optimize
    "optimize missing source": (["optimize", "{cwd}/out", "--config", "{cfg}/gpt2.yaml", "--data.source",
                                 "{m}/nowhere.txt"], ["nowhere.txt"]),
    "optimize output under a file": (["optimize", "{m}/blocker/out", "--config", "{cfg}/gpt2.yaml"], ["blocker"]),
    "optimize no recipe": (["optimize", "{cwd}/out"], ["--config"]),
    "optimize chunk size": (["optimize", "{cwd}/out", "--config", "{cfg}/gpt2.yaml", "--chunk-bytes", "lots"],
                            ["--chunk-bytes"]),
    # sweep
    "sweep missing spec": (["sweep", "{m}/nowhere.yaml", "--count", "1", "--dir", "{cwd}/s"], ["nowhere.yaml"]),
    "sweep bad method": (["sweep", "{m}/sweep_method.yaml", "--count", "1", "--dir", "{cwd}/s"], ["method"]),
    "sweep zero trials": (["sweep", "{root}/sweeps/gpt2.yaml", "--count", "0", "--dir", "{cwd}/s"], ["--count"]),
    # the knowledge tools
    "probe missing checkpoint": (["probe", "{m}/nowhere.ckpt", "--world", "world"], ["nowhere.ckpt"]),
    "probe bad world": (["probe", "{m}/gpt2.ckpt", "--world", "world:bogus=1"], ["bogus"]),
    "probe missing probes": (["probe", "{m}/gpt2.ckpt", "--probes", "{m}/nope.jsonl"], ["nope.jsonl"]),
    "probe latin-1 probes": (["probe", "{m}/gpt2.ckpt", "--probes", "{m}/latin1.txt"], ["latin1.txt", "UTF-8"]),
    "probe broken probes": (["probe", "{m}/gpt2.ckpt", "--probes", "{m}/broken.jsonl"], ["broken.jsonl"]),
    "edit a masked lm": (["edit", "{m}/bert.ckpt", "--world", "world"], ["CausalLM"]),
    "edit missing requests": (["edit", "{m}/gpt2.ckpt", "--requests", "{m}/nope.json"], ["nope.json"]),
    "edit broken requests": (["edit", "{m}/gpt2.ckpt", "--requests", "{m}/broken.jsonl"], ["broken.jsonl"]),
    "edit broken json list": (["edit", "{m}/gpt2.ckpt", "--requests", "{m}/broken.json"], ["broken.json", "not JSON"]),
    "edit latin-1 requests": (["edit", "{m}/gpt2.ckpt", "--requests", "{m}/latin1.txt"], ["latin1.txt", "UTF-8"]),
    "edit layer past the model": (["edit", "{m}/gpt2.ckpt", "--world", "world", "--layers", "99"], ["--layers"]),
}


def _broken_hf(base: Path, name: str, change) -> None:  # noqa: ANN001
    """A copy of the exported GPT-2 directory ``base`` with ``change(directory)`` applied."""
    import shutil

    out = base.parent / name
    shutil.copytree(base, out)
    change(out)


def _edit_config(**fields):  # noqa: ANN202
    def change(directory: Path) -> None:
        config = json.loads((directory / "config.json").read_text())
        config.update(fields)
        for key in [k for k, v in fields.items() if v is None]:
            config.pop(key)
        (directory / "config.json").write_text(json.dumps(config))
    return change


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoints, a transformers directory and its broken copies, and text files good and bad."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from plm_lightning.cli import main

    m = tmp_path_factory.mktemp("material")
    tiny_pretrained(m / "gpt2.ckpt", "gpt2")
    tiny_pretrained(m / "bert.ckpt", "bert")
    main(["export", str(m / "gpt2.ckpt"), str(m / "hf_gpt2")])
    hf = m / "hf_gpt2"
    _broken_hf(hf, "hf_broken", lambda d: (d / "config.json").write_text("{not json"))
    _broken_hf(hf, "hf_list", lambda d: (d / "config.json").write_text("[1, 2]"))
    _broken_hf(hf, "hf_no_n_embd", _edit_config(n_embd=None))
    _broken_hf(hf, "hf_random_weights", lambda d: (d / "model.safetensors").write_bytes(bytes(range(256)) * 64))
    _broken_hf(hf, "hf_huge_vocab", _edit_config(vocab_size=10**9))
    _broken_hf(hf, "hf_more_layers", _edit_config(n_layer=9))
    _broken_hf(hf, "hf_bad_tokenizer", lambda d: (d / "tokenizer_config.json").write_text("{oops"))
    (m / "wordlevel").mkdir()
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "the": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(m / "wordlevel" / "tokenizer.json"))
    for name, text in (("badtok", "{oops"), ("listtok", "[1, 2]")):
        (m / name).mkdir()
        (m / name / "tokenizer.json").write_text((hf / "tokenizer.json").read_text())
        (m / name / "tokenizer_config.json").write_text(text)
    (m / "empty.txt").write_text("")
    (m / "empty.yaml").write_text("\n")
    (m / "binary.txt").write_bytes(b"\x00\xff\x10binary\x00")
    (m / "fake.parquet").write_text("not parquet")
    (m / "latin1.yaml").write_bytes("# caf\u00e9\ntrainer:\n  max_steps: 2\n".encode("latin-1"))
    (m / "latin1.txt").write_bytes("caf\u00e9 au lait\n".encode("latin-1"))
    (m / "prompts.txt").write_text("The capital of\n")
    (m / "corpus.txt").write_text("A sentence that ends well. Another one that does too.\n" * 20)
    (m / "broken.json").write_text('[{"requested_rewrite": ')
    (m / "broken.jsonl").write_text('{"relation": "P19", "template": \n')
    (m / "sweep_method.yaml").write_text("method: sideways\nmetric: {name: val/loss, goal: minimize}\n"
                                         "parameters: {model.learning_rate: {values: [0.001]}}\n"
                                         "command: [fit, --config, configs/gpt2.yaml]\n")
    (m / "blocker").write_text("a file where a directory is asked for\n")
    torch.save(torch.zeros(3), m / "tensor.ckpt")
    torch.save({"state_dict": {}}, m / "bare.ckpt")
    (m / "random.ckpt").write_bytes(bytes(range(256)) * 16)
    return m


def _snapshot(*roots: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``roots``: (size, mtime in ns, sha256)."""
    files = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            stat = path.stat()
            files[str(path)] = (stat.st_size, stat.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return files


def test_the_catalogue_covers_every_command():
    """At least 60 cases, over every command the issue names."""
    commands = {args[0] for args, _ in CASES.values()}
    assert len(CASES) >= 60
    assert {"fit", "validate", "test", "predict", "import", "export", "inspect", "prepare", "optimize", "sweep",
            "probe", "edit"} <= commands


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_is_one_line_and_changes_nothing(case: str, material: Path, tmp_path: Path) -> None:
    args, needles = CASES[case]
    fill = {"{m}": str(material), "{cfg}": str(ROOT / "configs"), "{cwd}": str(tmp_path), "{root}": str(ROOT)}
    for key, value in fill.items():
        args = [a.replace(key, value) for a in args]
    (tmp_path / "keep.txt").write_text("a file of the user's that must stay as it is\n")
    before = _snapshot(material, tmp_path)
    res = run_cli(args, cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [line for line in res.stderr.strip().splitlines() if line.startswith("plm_lightning: error:")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    after = _snapshot(material, tmp_path)
    changed = [path for path, seen in before.items() if after.get(path) != seen]
    assert not changed, changed
