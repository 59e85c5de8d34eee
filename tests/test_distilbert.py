"""DistilBERT: the student starts from every other teacher layer, the loss is the configured weighted sum of its three
terms, the teacher stays frozen, and the recipe trains from its config."""

import pytest
import torch

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.objectives import DistilBERT, MaskedLM
from tests.conftest import ROOT, masked_batch, run_cli


def _teacher(path, layers=4, tokenizer=None):
    torch.manual_seed(0)
    vocab_size = tokenizer.vocab_size if tokenizer is not None else 101
    teacher = MaskedLM(backbone="tiny", backbone_overrides={"num_layers": layers}, vocab_size=vocab_size)
    meta = {"objective": "MaskedLM", "backbone": teacher.config.to_dict()}
    if tokenizer is not None:
        meta["tokenizer"] = {"json": tokenizer.tokenizer.to_str(), "special": tokenizer.special, "kind": tokenizer.kind}
    else:
        from tokenizers import Tokenizer, models

        vocab = {f"t{i}": i for i in range(101)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="t1"))
        meta["tokenizer"] = {"json": tok.to_str(), "special": {"pad": "t0", "unk": "t1", "cls": "t2", "sep": "t3",
                                                               "mask": "t4"}, "kind": "custom"}
    torch.save({"state_dict": teacher.state_dict(), "hyper_parameters": dict(teacher.hparams), CHECKPOINT_KEY: meta},
               path)
    return teacher, str(path)


def test_student_starts_from_every_other_teacher_layer(tmp_path):
    teacher, path = _teacher(tmp_path / "t.ckpt", layers=4)
    student = DistilBERT(teacher=path)
    assert student.config.num_layers == 2 and student.teacher_layers == [0, 2]
    ours, theirs = student.state_dict(), teacher.state_dict()
    for j, i in enumerate([0, 2]):
        for name in ("self_attn.qkv_proj.weight", "ffn.fc_out.bias", "ffn_norm.weight"):
            assert torch.equal(ours[f"backbone.layers.{j}.{name}"], theirs[f"backbone.layers.{i}.{name}"])
    assert torch.equal(ours["backbone.embeddings.token.weight"], theirs["backbone.embeddings.token.weight"])
    assert torch.equal(ours["lm_head.dense.weight"], theirs["lm_head.dense.weight"])
    assert not any(k.startswith("teacher.") for k in ours)  # checkpoints leave the frozen teacher out
    assert not any(p.requires_grad for p in student.teacher.parameters())
    assert DistilBERT(teacher=path, student_layers=[1, 3]).teacher_layers == [1, 3]
    with pytest.raises(ConfigError, match="increasing indices of the teacher's 4 layers"):
        DistilBERT(teacher=path, student_layers=[3, 1])


def test_loss_is_the_configured_weighted_sum(tmp_path):
    _, path = _teacher(tmp_path / "t.ckpt", layers=4)
    batch = masked_batch()
    terms = {}
    for weights in ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (5.0, 2.0, 1.0)):
        torch.manual_seed(0)
        model = DistilBERT(teacher=path, alpha_ce=weights[0], alpha_mlm=weights[1], alpha_cos=weights[2]).eval()
        with torch.no_grad():
            terms[weights] = model(**batch)
    ce, mlm, cos = (terms[w]["loss"] for w in ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    assert ce > 0 and mlm > 0 and cos > 0
    torch.testing.assert_close(terms[(5.0, 2.0, 1.0)]["loss"], 5 * ce + 2 * mlm + cos)
    # a student that is the teacher (all its layers) has nothing left to distil
    twin = DistilBERT(teacher=path, student_layers=[0, 1, 2, 3]).eval()
    with torch.no_grad():
        out = twin(**batch)
    assert float(out["ce_loss"]) < 1e-5 and float(out["cos_loss"]) < 1e-5


def test_temperature_scales_the_soft_targets(tmp_path):
    _, path = _teacher(tmp_path / "t.ckpt")
    batch = masked_batch()
    losses = []
    for t in (1.0, 4.0):
        torch.manual_seed(0)
        model = DistilBERT(teacher=path, temperature=t).eval()
        with torch.no_grad():
            losses.append(float(model(**batch)["ce_loss"]))
    assert losses[0] != pytest.approx(losses[1])


@pytest.mark.slow
def test_distilbert_recipe_trains_from_its_config(tmp_path):
    from plm_lightning.interop.io import load_checkpoint
    from tests.conftest import tiny_pretrained

    teacher = tiny_pretrained(tmp_path / "teacher.ckpt", "bert")
    meta = load_checkpoint(teacher)[CHECKPOINT_KEY]["tokenizer"]
    from tokenizers import Tokenizer

    from plm_lightning.corpus.tokenizer import TextTokenizer

    TextTokenizer(Tokenizer.from_str(meta["json"]), meta["special"], meta["kind"]).save(tmp_path / "tok")
    common = ["fit", "--config", str(ROOT / "configs" / "distilbert.yaml"), "--model.teacher", teacher]
    res = run_cli([*common, "--data.tokenizer", str(tmp_path / "tok"), "--trainer.max_steps", "6",
                   "--trainer.limit_val_batches", "2", "--trainer.val_check_interval", "6",
                   "--trainer.default_root_dir", str(tmp_path / "d"), "--trainer.logger.init_args.save_dir",
                   str(tmp_path / "d")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (ckpt,) = (tmp_path / "d").rglob("last.ckpt")
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert not any(k.startswith("teacher.") for k in state)
    assert "backbone.layers.0.ffn.fc_in.weight" in state and "backbone.layers.1.ffn.fc_in.weight" not in state


def test_the_teacher_keeps_its_own_hyperparameters_under_the_cli(tmp_path):
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters_context

    _, path = _teacher(tmp_path / "t.ckpt")
    with _given_hyperparameters_context({"teacher": path, "alpha_ce": 5.0}, "lightning.pytorch.cli"):
        student = DistilBERT(teacher=path)  # as LightningCLI instantiates it
    assert "teacher" in student.hparams
    assert "teacher" not in student.teacher.hparams and student.teacher.hparams.backbone == "tiny"


def test_data_with_another_tokenizer_is_refused(tmp_path):
    from types import SimpleNamespace

    from tokenizers import Tokenizer, models

    from plm_lightning.corpus.tokenizer import TextTokenizer

    _, path = _teacher(tmp_path / "t.ckpt")
    student = DistilBERT(teacher=path)
    other = TextTokenizer(Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")), {"pad": "a"}, name="other")
    student._trainer = SimpleNamespace(datamodule=SimpleNamespace(contract=lambda: DataContract(tokenizer=other)))
    with pytest.raises(ConfigError, match="data.tokenizer 'other' is not the teacher's tokenizer"):
        student.setup("fit")
