"""Frozen ELMo / static features feeding a BiLSTM tagger (ScalarMix over ELMo's layers), and Cross-View Training:
restricted views see what they say, the auxiliary modules learn from the primary's predictions, labelled and
unlabelled batches alternate under a Lightning Trainer."""

import collections

import lightning as L
import numpy as np
import pytest
import torch

from plm_lightning.data.static import WordVocabulary, split_words
from plm_lightning.errors import ConfigError
from plm_lightning.finetune import TaggingDataModule
from plm_lightning.finetune.tasks import offline_task
from plm_lightning.finetune.word_tagger import WordTagger, restricted_views
from plm_lightning.objectives import CoVe, ELMo, GloVe


def _vocabulary() -> WordVocabulary:
    counts = collections.Counter(w for e in offline_task("markup_spans")["train"][:400] for x in e["words"]
                                 for w in split_words(x))
    words = [w for w, _ in counts.most_common(600)]
    return WordVocabulary(words, np.array([counts[w] for w in words]))


def _save(model, path):
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


@pytest.fixture(scope="module")
def extractors(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    torch.manual_seed(0)
    elmo = ELMo(filters=[[1, 8], [2, 8], [3, 16]], projection_dim=16, lstm_dim=32, dropout=0.0)
    elmo.set_vocabulary(_vocabulary().with_specials())
    glove = GloVe(dim=24)
    glove.set_vocabulary(_vocabulary())
    cove = CoVe(embedding_dim=16, hidden=8, layers=1)
    cove.target_vocabulary = _vocabulary()
    cove.set_vocabulary(_vocabulary())
    return {"elmo": _save(elmo, root / "elmo.ckpt"), "glove": _save(glove, root / "glove.ckpt"),
            "cove": _save(cove, root / "cove.ckpt")}


def _ready(path, **kwargs):
    model = WordTagger(features_from=path, hidden=32, prediction_hidden=16, dropout=0.0, **kwargs)
    data = TaggingDataModule(batch_size=8)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    model.check_data(data)
    return model, data


@pytest.mark.parametrize("kind", ["elmo", "cove", "glove"])
def test_tagger_on_frozen_features_learns_and_leaves_the_extractor_alone(kind, extractors):
    torch.manual_seed(0)
    model, data = _ready(extractors[kind])
    batch = data.collate(data.examples["train"][:8])
    assert set(batch) == {"words", "labels"} and batch["labels"].shape[0] == 8
    frozen = {k: v.clone() for k, v in model.features.extractor.state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(15):
        _, loss = model.step(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(torch.equal(v, model.features.extractor.state_dict()[k]) for k, v in frozen.items())
    assert not any(k.startswith("features.extractor") for k in model.state_dict())
    if kind == "elmo":  # the task's own mix of ELMo's layers trains
        assert not torch.equal(model.features.scalar_mix.scalars, torch.zeros_like(model.features.scalar_mix.scalars))


def test_cvt_views_see_only_what_they_say(extractors):
    torch.manual_seed(0)
    model, _ = _ready(extractors["glove"], cvt=True)  # static inputs: the views are truly restricted
    model.eval()
    words = [["the", "class", "name", "is", "mangled", "here"]]
    changed = [["the", "class", "name", "was", "hidden", "there"]]  # words 3.. differ
    with torch.no_grad():
        a = restricted_views(*model.encode(words))
        b = restricted_views(*model.encode(changed))
    torch.testing.assert_close(a["future"][:, :4], b["future"][:, :4])  # h->_{t-1}: words before t only
    torch.testing.assert_close(a["forward"][:, :3], b["forward"][:, :3])
    assert not torch.allclose(a["backward"][:, :3], b["backward"][:, :3])  # h<-_t reads the right context
    torch.testing.assert_close(a["future"][:, 1:], a["forward"][:, :-1])
    torch.testing.assert_close(a["past"][:, :-1], a["backward"][:, 1:])


def test_cvt_loss_trains_the_encoder_and_auxiliaries_not_the_primary(extractors):
    model, data = _ready(extractors["glove"], cvt=True)
    loss = model.cvt_loss([e["words"] for e in data.examples["unlabeled"][:6]])
    loss.backward()
    assert loss > 0
    assert all(p.grad is None or not p.grad.any() for p in model.primary.parameters())
    assert model.lstm.weight_hh_l0.grad.abs().sum() > 0
    assert all(p.grad is not None for p in model.auxiliary.parameters())


def test_cvt_alternates_labelled_and_unlabelled_batches_in_a_trainer(extractors, tmp_path):
    model, data = _ready(extractors["glove"], cvt=True)
    data.examples["validation"] = data.examples["validation"][:16]
    seen = []
    original = model.cvt_loss

    def spy(words):
        seen.append(len(words))
        return original(words)

    model.cvt_loss = spy
    trainer = L.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=1,
                        val_check_interval=4, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=data)
    assert len(seen) == 2  # steps 1 and 3 of 0..3
    assert "val/entity_f1" in trainer.callback_metrics


def test_features_from_must_be_a_word_model(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        WordTagger(features_from=str(tmp_path / "missing.ckpt"))


@pytest.mark.slow
def test_elmo_cvt_recipe_runs_from_its_config(extractors, tmp_path):
    import csv

    from tests.conftest import ROOT, run_cli

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "finetune" / "elmo-cvt.yaml"), "--model.features_from",
                   extractors["elmo"], "--trainer.max_steps", "4", "--trainer.val_check_interval", "4",
                   "--trainer.limit_val_batches", "2", "--data.batch_size", "8", "--trainer.default_root_dir",
                   str(tmp_path / "ft"), "--trainer.logger.init_args.save_dir", str(tmp_path / "ft")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (metrics,) = (tmp_path / "ft").rglob("metrics.csv")
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("train/cvt_loss") for r in rows) or len(rows) > 0
    assert [r for r in rows if r.get("val/entity_f1")]
