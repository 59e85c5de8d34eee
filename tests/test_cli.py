"""End-to-end runs of the real entry point with the real recipes, and the CLI's error contract."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, cli_output, run_cli

QUICK = ["--trainer.max_steps", "40", "--trainer.val_check_interval", "20", "--trainer.limit_val_batches", "2",
         "--trainer.log_every_n_steps", "5", "--data.batch_size", "16", "--data.seq_len", "64"]


def _train_losses(run_dir: Path, name: str = "train/loss") -> list[float]:
    (metrics,) = run_dir.rglob("metrics.csv")
    with open(metrics) as f:
        return [float(r[name]) for r in csv.DictReader(f) if r.get(name)]


TRAINED_ELSEWHERE = {
    "distilbert": "needs a teacher checkpoint: tests/test_distilbert.py trains one first",
    "realm": "needs its retrieval index warm-started: tests/test_realm.py",
    "cove": "an LSTM translation model, its loss criterion in tests/test_cove.py",
    "elmo": "an LSTM LM, its perplexity criterion in tests/test_elmo.py",
    "word2vec": "word vectors, judged by their neighbours in tests/test_static_embeddings.py",
    "fasttext": "word vectors, judged by their neighbours in tests/test_static_embeddings.py",
    "glove": "word vectors, judged by their neighbours in tests/test_static_embeddings.py",
}
"""The recipes whose training is judged by their own tests, and why; every other recipe of configs/ is trained
here (a new recipe is picked up without editing this file)."""
TRANSFORMER_RECIPES = sorted(set(p.stem for p in (ROOT / "configs").glob("*.yaml")) - set(TRAINED_ELSEWHERE))


def test_every_recipe_excused_from_the_loss_test_exists():
    assert set(TRAINED_ELSEWHERE) <= {p.stem for p in (ROOT / "configs").glob("*.yaml")}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", TRANSFORMER_RECIPES)
def test_recipe_trains_and_loss_goes_down(recipe, tmp_path):
    steps = 80 if recipe == "mass" else 40  # MASS predicts half of every row: its loss falls more slowly at first
    res = run_cli(["fit", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), *QUICK, "--trainer.max_steps", str(steps)],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    # ERNIE 2.0's total grows as its tasks join stage by stage; its MLM must still improve
    losses = _train_losses(tmp_path / "runs", "train/mlm_loss" if recipe == "ernie2" else "train/loss")
    assert len(losses) >= 6
    # T5's fan-in init starts the encoder-decoder recipes slower over these few tiny steps; XLM alternates MLM and
    # TLM batches, whose losses differ, and its 8192-token softmax starts at ln 8192 (0.46 measured in CI)
    drop = 0.3 if recipe.startswith("t5") or recipe in ("ul2", "mass", "xlm") else 0.5
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - drop, losses
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    with open(next((tmp_path / "runs").rglob("metrics.csv"))) as f:
        val = [r for r in csv.DictReader(f) if r.get("val/perplexity")]
    assert val, "validation ran"
    for r in val:  # perplexity is exp of the LM cross-entropy alone, never of NSP or SBO added to it
        assert abs(float(r["val/perplexity"]) - math.exp(float(r["val/lm_loss"]))) < 1e-3 * float(r["val/perplexity"])
    checkpoint = torch.load(ckpt, weights_only=True)
    assert checkpoint["plm_lightning"]["objective"] in ("MaskedLM", "CausalLM", "ELECTRA", "ERNIE2", "ERNIETHU", "Seq2SeqLM",
                                                        "PermutationLM")
    assert checkpoint["global_step"] == steps


@pytest.mark.parametrize("args,needles", [
    (["--model.decoder_start_token", "pad"], ["model.decoder_start_token='pad'", "data starts the decoder from 'eos'"]),
    (["--data.replace_length", "3"], ["data.replace_length=3"]),
    (["--data.seq_len", "200"], ["data.seq_len=200", "inputs of up to 260 tokens", "256 positions"]),
])
def test_bart_bad_input_is_one_line(args, needles, tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "bart.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


@pytest.mark.parametrize("recipe,args,needles", [
    ("t5", ["--data.decoder_only", "true"], ["data.decoder_only=true", "CausalLM"]),
    ("ul2-decoder", ["--data.decoder_only", "false"], ["set data.decoder_only=true", "Seq2SeqLM"]),
    ("glm", ["--data.mask_ratio", "1.5"], ["data.mask_ratio=1.5"]),
    ("unilm", ["--data.lm_mixture", "[1, 0]"], ["data.lm_mixture", "4 non-negative weights"]),
])
def test_unified_mask_recipes_bad_input_is_one_line(recipe, args, needles, tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


def test_electra_generator_divisor_must_divide_hidden_size(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "electra.yaml"), "--trainer.max_steps", "1",
                   "--model.generator_size_divisor", "3"], cwd=tmp_path)
    _one_line_error(res, "model.generator_size_divisor=3", "hidden size 64")


@pytest.mark.parametrize("args,needles", [
    (["--data.language_alpha", "0"], ["data.language_alpha=0.0 must be > 0"]),
    (["--data.parallel_corpora", "{en-fake: {tmp}/empty.tsv}"], ["data.parallel_corpora[en-fake]", "no sentence pairs"]),
    (["--data.corpora", "{en: embedded, fake: {tmp}/missing.txt}"], ["data.corpora[fake]", "missing.txt"]),
])
def test_xlm_bad_input_is_one_line(args, needles, tmp_path):
    (tmp_path / "empty.tsv").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "xlm.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


def test_print_config_shows_resolved_recipe(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "bert.yaml"), "--print_config"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "plm_lightning.objectives.MaskedLM" in res.stdout and "sentence_prediction: nsp" in res.stdout


def _one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.startswith("plm_lightning: error:")]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _two_step_checkpoint(recipe: str, cwd: Path) -> Path:
    """Train ``recipe`` for two steps through the CLI and return its last.ckpt."""
    cwd.mkdir(parents=True, exist_ok=True)
    res = run_cli(["fit", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), "--trainer.max_steps", "2",
                   "--data.seq_len", "64"], cwd=cwd)
    assert res.returncode == 0, res.stderr[-2000:]
    (ckpt,) = (cwd / "runs").rglob("last.ckpt")
    return ckpt


@pytest.mark.slow
def test_a_checkpoint_never_chooses_the_code_and_is_of_the_recipe(tmp_path):
    """``--ckpt_path`` takes the hyperparameters of a checkpoint, never a class or module it names (Lightning's
    own parser imports the ``_class_path`` it finds: a module in the working directory would run); a checkpoint of
    another recipe, a directory, a bare tensor and a dict without our metadata are each one line."""
    ckpt = _two_step_checkpoint("bert", tmp_path)
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--trainer.max_steps", "4",
                   "--data.seq_len", "64", "--ckpt_path", str(ckpt)], cwd=tmp_path)
    _one_line_error(res, "MaskedLM", "CausalLM")
    (tmp_path / "evil_plm.py").write_text("import pathlib\npathlib.Path('IMPORTED').write_text('yes')\n"
                                          "from plm_lightning.objectives import MaskedLM\n"
                                          "from lightning.pytorch.cli import instantiate_module\n")
    data = torch.load(ckpt, weights_only=True)
    data["hyper_parameters"].update(_class_path="evil_plm.MaskedLM", _instantiator="evil_plm.instantiate_module")
    torch.save(data, tmp_path / "evil.ckpt")
    validate = ["validate", "--config", str(ROOT / "configs" / "bert.yaml"), "--data.seq_len", "64",
                "--trainer.limit_val_batches", "1"]
    res = run_cli([*validate, "--ckpt_path", str(tmp_path / "evil.ckpt")], cwd=tmp_path, fresh=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not (tmp_path / "IMPORTED").exists()
    torch.save(torch.zeros(3), tmp_path / "tensor.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "bare.ckpt")
    for path, needle in ((tmp_path, "is a directory"), (tmp_path / "tensor.ckpt", "was not written by plm_lightning"),
                         (tmp_path / "bare.ckpt", "was not written by plm_lightning")):
        _one_line_error(run_cli([*validate, "--ckpt_path", str(path)], cwd=tmp_path), "ckpt_path", needle)


def test_plm_debug_shows_traceback(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "bert.yaml"), "--data.mask_prob", "2"], cwd=tmp_path,
                  env={"PLM_DEBUG": "1"})
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_json_config_roundtrip_of_cli_defaults():
    from plm_lightning.recipe_cli import default_config_files

    for path in default_config_files():
        assert Path(path).is_file()
    assert json.dumps(str(ROOT))  # keeps json imported for readers adding cases


@pytest.mark.parametrize("recipe,objective", [("bert", "MaskedLM"), ("bert-wwm", "MaskedLM"), ("albert", "MaskedLM"),
                                              ("electra", "ELECTRA"), ("modernbert", "MaskedLM"), ("deberta", "MaskedLM"),
                                              ("deberta-v3", "ELECTRA"), ("ernie", "MaskedLM"),
                                              ("ernie2", "ERNIE2"), ("xlm", "MaskedLM"), ("t5", "Seq2SeqLM"),
                                              ("mt5", "Seq2SeqLM"), ("ul2", "Seq2SeqLM"),
                                              ("mass", "Seq2SeqLM"), ("bart", "Seq2SeqLM"), ("glm", "CausalLM"),
                                              ("unilm", "MaskedLM"), ("ul2-decoder", "CausalLM"), ("gpt2", "CausalLM"),
                                              ("gpt2-fim", "CausalLM"), ("ernie-thu", "ERNIETHU")])
def test_inspect_json_statistics(recipe, objective, capsys):
    out = cli_output(["inspect", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), "--batches", "5", "--json"],
                     capsys)  # in-process: the CLI contract itself is checked by the subprocess tests
    stats = json.loads(out.strip().splitlines()[-1])
    required = {"objective", "tokens", "loss_tokens", "loss_fraction", "mask_token_fraction", "random_token_fraction",
                "unchanged_fraction", "mean_span_length", "input_length_mean", "target_length_mean"}
    assert required <= set(stats) and stats["objective"] == objective
    if recipe == "electra":  # the discriminator's loss is on every real token; 85% [MASK], 15% kept, no random
        assert stats["loss_fraction"] == 1.0
        assert abs(stats["mask_token_fraction"] - 0.85) < 0.03 and stats["random_token_fraction"] == 0.0
    elif recipe == "deberta-v3":  # RTD over every real token; the generator's masks are BERT's 80/10/10
        assert stats["loss_fraction"] == 1.0 and abs(stats["mask_token_fraction"] - 0.8) < 0.05
    elif recipe == "ernie2":  # every task trained from its stage on; balanced pair classes; n ~ U{1, 2, 3}
        tasks = stats["task_fraction"]
        assert tasks["knowledge_masking"] == 1.0 and 0 < tasks["sentence_distance"] < tasks["capitalization"] < 1
        # a handful of pairs in 5 batches: their class balance is checked in test_ernie2, here only its form
        assert len(stats["distance_label_fraction"]) == 3 and abs(sum(stats["distance_label_fraction"]) - 1) < 1e-3
        assert 1.5 < stats["reorder_mean_segments"] < 2.5 and stats["form_fraction"]["distance"] > 0
        assert abs(stats["mask_token_fraction"] - 0.8) < 0.05
    elif recipe == "bart":  # Lewis et al. 2020: text infilling of 30% of the words; the decoder writes every token
        assert abs(stats["noise_fraction"] - 0.30) < 0.02 and stats["loss_fraction"] > 0.95
        assert 3.0 < stats["mean_span_length"] < 4.5 and stats["input_length_mean"] < stats["target_length_mean"]
    elif recipe == "gpt2-fim":  # Bavarian et al. 2022: half of the documents in FIM layout, loss on every token
        assert abs(stats["fim_document_fraction"] - 0.5) < 0.1 and stats["loss_fraction"] > 0.98
    elif recipe == "glm":  # Du et al. 2022: Poisson(3) spans until at least 15%; Part A + Part B fill seq_len
        assert 0.15 <= stats["noise_fraction"] < 0.19 and 2.9 < stats["mean_span_length"] < 3.5
        assert 110 < stats["sequence_length_mean"] <= 128
    elif recipe == "unilm":  # Dong et al. 2019: BERT masking under the LMs of the batches
        assert abs(stats["loss_fraction"] - 0.15) < 0.01 and abs(stats["mask_token_fraction"] - 0.8) < 0.05
        assert set(stats["attention_kind_fraction"]) <= {"bidirectional", "left_to_right", "right_to_left", "prefix"}
    elif recipe == "ul2-decoder":  # the same denoisers as prefix-LM rows: the rates hold, rows fit seq_len
        d = stats["denoisers"]
        assert len(d) == 7 and abs(d["X(3, 0.5)"]["loss_fraction"] - 0.5) < 0.02
        assert all(v["input_length_mean"] + v["target_length_mean"] <= 128 for v in d.values())
    elif recipe == "mass":  # Song et al. 2019: a fragment of 50% of each row
        assert abs(stats["loss_fraction"] - 0.5) < 0.02 and stats["target_length_mean"] == 64
    elif recipe == "ul2":  # seven denoisers, each with its own rate; R(3, 0.15) fills the input exactly
        d = stats["denoisers"]
        assert len(d) == 7 and abs(d["R(3, 0.15)"]["loss_fraction"] - 0.15) < 0.01
        assert d["R(3, 0.15)"]["input_length_mean"] == 128 and abs(d["X(3, 0.5)"]["loss_fraction"] - 0.5) < 0.01
        assert abs(d["S(0.25)"]["loss_fraction"] - 0.25) < 0.01
    elif recipe in ("t5", "mt5"):  # Raffel et al. 2020: 15% noise in spans of mean length 3; 29 targets per 128
        if recipe == "mt5":  # two languages of equal size: alpha = 0.3 keeps them even
            assert stats["stream_probability"] == {"en": 0.5, "fake": 0.5}
        assert abs(stats["loss_fraction"] - 0.15) < 0.01 and abs(stats["mean_span_length"] - 3.0) < 0.2
        assert stats["input_length_mean"] == 128 and abs(stats["target_length_mean"] / 128 - 0.22) < 0.02
        assert stats["mask_token_fraction"] is None
    elif recipe == "ernie-thu":  # Zhang et al. 2019: BERT masking + 5% replaced / 15% masked alignments
        assert abs(stats["mask_token_fraction"] - 0.8) < 0.06 and stats["entities_per_sequence"] > 2
        assert abs(stats["entity_masked_fraction"] - 0.15) < 0.05 and abs(stats["entity_replaced_fraction"] - 0.05) < 0.03
    elif recipe == "modernbert":  # Warner et al. 2024: 30% masking
        assert abs(stats["loss_fraction"] - 0.30) < 0.01
    elif recipe not in ("gpt2", "gpt2-fim"):
        if recipe == "xlm":  # English, Fake-English and the TLM pairs, drawn with their smoothed probabilities
            assert stats["stream_probability"] == {"en": pytest.approx(0.25, abs=0.01),
                                                   "fake": pytest.approx(0.25, abs=0.01), "en-fake": 0.5}
            assert abs(stats["stream_fraction"]["en-fake"] - 0.5) < 0.1
        assert abs(stats["loss_fraction"] - 0.15) < 0.01
        assert abs(stats["mask_token_fraction"] - 0.8) < 0.05 and abs(stats["random_token_fraction"] - 0.1) < 0.04
    else:
        assert stats["loss_fraction"] > 0.98 and stats["mask_token_fraction"] is None


@pytest.mark.slow
def test_inspect_spanbert_matches_the_paper_at_512_tokens(tmp_path):
    """Joshi et al. 2020: 15% of tokens in spans of mean length 3.8 words, at the paper's 512-token segments
    (at the tiny recipe's 128 tokens the last span of each sequence, trimmed to the exact budget, pulls it to ~3.3)."""
    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "spanbert.yaml"), "--batches", "10", "--json",
                   "--data.seq_len", "512", "--model.backbone_overrides", "{max_position_embeddings: 512}"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["corruption"] == "masked_lm_span"
    assert abs(stats["loss_fraction"] - 0.15) < 0.01
    assert abs(stats["mean_span_length"] - 3.8) < 0.3


def test_inspect_human_view(tmp_path):
    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "bert.yaml")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    for section in ("original:", "corrupted input:", "targets", "loss positions", "attention mask"):
        assert section in res.stdout
    assert "[MASK]" in res.stdout


@pytest.mark.slow
def test_export_and_import_commands(tmp_path):
    ckpt = _two_step_checkpoint("roberta", tmp_path)
    res = run_cli(["export", str(ckpt), str(tmp_path / "hf")], cwd=tmp_path)
    assert res.returncode == 0 and "RobertaForMaskedLM" in res.stdout, res.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in (tmp_path / "hf").iterdir()}
    res = run_cli(["import", str(tmp_path / "hf"), str(tmp_path / "back.ckpt")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # continued pretraining from the imported weights, with the exported tokenizer
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "roberta.yaml"), "--trainer.max_steps", "2",
                   "--data.seq_len", "64", "--model.init_from", str(tmp_path / "back.ckpt"),
                   "--data.tokenizer", str(tmp_path / "hf")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    # or straight from the transformers directory
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "roberta.yaml"), "--trainer.max_steps", "2",
                   "--data.seq_len", "64", "--model.init_from", str(tmp_path / "hf"),
                   "--data.tokenizer", str(tmp_path / "hf")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "roberta.yaml"), "--trainer.max_steps", "2",
                   "--model.init_from", str(tmp_path / "nowhere")], cwd=tmp_path)
    _one_line_error(res, "model.init_from", "nowhere", "transformers model directory")
    res = run_cli(["export", str(tmp_path / "nope.ckpt"), str(tmp_path / "x")], cwd=tmp_path)
    _one_line_error(res, "nope.ckpt")


@pytest.mark.slow
def test_predict_fills_t5_sentinels(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Return the <extra_id_0> of the list.\n\nThe <extra_id_0> module <extra_id_1> files.\n")
    t5 = _two_step_checkpoint("t5", tmp_path / "t5")
    res = run_cli(["predict", str(t5), str(prompts), "--max_new_tokens", "6", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    assert [r["prompt"] for r in rows] == ["Return the <extra_id_0> of the list.", "The <extra_id_0> module "
                                           "<extra_id_1> files."]
    assert all("filled" in r and "<extra_id_0>" not in r["filled"] for r in rows)
    beam = run_cli(["predict", str(t5), str(prompts), "--strategy", "beam", "--num_beams", "3"], cwd=tmp_path)
    assert beam.returncode == 0 and len(beam.stdout.strip().splitlines()) == 2, beam.stderr[-2000:]
    _one_line_error(run_cli(["predict", str(t5), str(tmp_path / "none.txt")], cwd=tmp_path), "no such prompts file")
    _one_line_error(run_cli(["predict", str(t5), str(prompts), "--top_p", "0"], cwd=tmp_path), "--top-p=0.0")


def test_predict_continues_gpt2_and_fills_the_middle(tmp_path):
    gpt = _two_step_checkpoint("gpt2", tmp_path / "gpt")
    (tmp_path / "p.txt").write_text("def add(a, b):\n")
    res = run_cli(["predict", str(gpt), str(tmp_path / "p.txt"), "--strategy", "sample", "--top_p", "0.9",
                   "--seed", "1", "--max_new_tokens", "5", "--json"], cwd=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout.strip())["prompt"] == "def add(a, b):", res.stderr[-2000:]
    fim = _two_step_checkpoint("gpt2-fim", tmp_path / "fim")
    (tmp_path / "f.txt").write_text("def add(a, b):<fim_middle> return c\n")
    res = run_cli(["predict", str(fim), str(tmp_path / "f.txt"), "--max_new_tokens", "4", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads(res.stdout.strip())
    assert row["filled"] == "def add(a, b):" + row["output"] + " return c"


def test_predict_reconstructs_bart_and_refuses_an_mlm(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Return the <extra_id_0> of the list.\n")
    bert = _two_step_checkpoint("bert", tmp_path / "bert")
    _one_line_error(run_cli(["predict", str(bert), str(prompts)], cwd=tmp_path), "holds a MaskedLM checkpoint")
    bart = _two_step_checkpoint("bart", tmp_path / "bart")
    (tmp_path / "b.txt").write_text("Return the <mask> of the list.\n")
    res = run_cli(["predict", str(bart), str(tmp_path / "b.txt"), "--max_new_tokens", "5", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads(res.stdout.strip())
    assert row["prompt"] == "Return the <mask> of the list." and not row["output"].startswith("<s>")


def test_the_run_writes_where_default_root_dir_says(tmp_path):
    """The recipes' loggers follow ``--trainer.default_root_dir`` (issue 38: they kept writing to runs/<recipe>), and
    the run says where it writes; without the option the recipe's own runs/<recipe> stays."""
    common = ["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--trainer.max_steps", "2",
              "--data.seq_len", "64"]
    res = run_cli([*common, "--trainer.default_root_dir", str(tmp_path / "mine")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"this run writes to {tmp_path / 'mine' / 'version_0'}" in res.stderr
    assert (tmp_path / "mine" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "runs").exists()
    res = run_cli(common, cwd=tmp_path)
    assert res.returncode == 0 and "this run writes to runs/gpt2/version_0" in res.stderr, res.stderr[-2000:]
    assert (tmp_path / "runs" / "gpt2" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    # the model summary, without the FLOPs Lightning never counted (issue 38: "Total FLOPs: 0" on every run)
    printed = res.stdout + res.stderr
    assert "Total params" in printed and "FLOPs" not in printed and "already configured" not in printed


def test_help_lists_every_command_and_a_typo_gets_the_nearest(tmp_path):
    """``--help`` lists every command the CLI dispatches (without loading Lightning), a mistyped command is one line
    naming the nearest, and ``predict --help`` shows the generation options."""
    import subprocess
    import sys

    from plm_lightning import commands
    from plm_lightning.command_index import EXTRA_COMMANDS, TRAINING_COMMANDS

    assert all(hasattr(commands, f"run_{name.replace('-', '_')}") for name in EXTRA_COMMANDS)
    printed = {}
    for argv in (["--help"], ["predict", "--help"]):  # neither loads PyTorch (evaluation's package once did)
        probe = (f"import sys, runpy; sys.argv = ['plm_lightning', *{argv!r}]\ntry:\n"
                 "    runpy.run_module('plm_lightning', run_name='__main__')\nexcept SystemExit as e:\n"
                 "    assert e.code == 0, e.code\nassert 'lightning' not in sys.modules and 'torch' not in sys.modules\n")
        res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        printed[argv[0]] = res.stdout
    assert all(f"  {name} " in printed["--help"] for name in [*TRAINING_COMMANDS, *EXTRA_COMMANDS])
    res = run_cli(["inpsect", "--config", "x.yaml"], cwd=tmp_path)
    _one_line_error(res, "unknown command 'inpsect'", "did you mean 'inspect'")
    res = run_cli(["predict", "--help"], cwd=tmp_path)
    assert res.returncode == 0 and "--max_new_tokens" in res.stdout and "--ckpt_path" in res.stdout, res.stdout
