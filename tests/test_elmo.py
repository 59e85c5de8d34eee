"""ELMo: each direction's LM never sees the token it predicts, padding never reaches the backward LM, ScalarMix is a
softmax-weighted sum, the character encoder reads bytes between word marks, and the recipe trains from the CLI."""

import numpy as np
import pytest
import torch

from plm_lightning.corpus.characters import BOW, CHAR_PAD, EOW, char_ids
from plm_lightning.data.static import SequenceCollator, WordVocabulary
from plm_lightning.nn.recurrent import ScalarMix, reversal_index
from plm_lightning.objectives import ELMo
from tests.conftest import ROOT, run_cli
from tests.test_cli import _train_losses

WORDS = [f"w{i}" for i in range(30)]


def _model(encoder: str = "chars") -> ELMo:
    torch.manual_seed(0)
    model = ELMo(token_encoder=encoder, filters=[[1, 8], [2, 8], [3, 16]], projection_dim=16, lstm_dim=32, dropout=0.0)
    model.set_vocabulary(WordVocabulary(WORDS, np.arange(30, 0, -1)).with_specials())
    return model.eval()


def _batch(ids: list[list[int]], model: ELMo) -> dict:
    collate = SequenceCollator(model.vocabulary)
    return collate([{"index": i, "epoch": 0, "words": np.array(row)} for i, row in enumerate(ids)])


@pytest.mark.parametrize("encoder", ["chars", "words"])
def test_each_direction_never_sees_the_token_it_predicts(encoder):
    model = _model(encoder)
    row = [3, 7, 1, 9, 4, 12, 5, 8]
    changed = list(row)
    t = 4
    changed[t] = 20
    with torch.no_grad():
        (_, fa, ba), (_, fb, bb) = model.layers(_batch([row], model)), model.layers(_batch([changed], model))
    p = t + 1  # the batch starts with <s>
    # forward: positions before p (which predict tokens up to p) are unchanged, p itself and later ones change
    assert torch.allclose(fa[-1][0, :p], fb[-1][0, :p], atol=1e-6) and not torch.allclose(fa[-1][0, p], fb[-1][0, p])
    # backward: positions after p (which predict tokens down to p) are unchanged
    assert torch.allclose(ba[-1][0, p + 1:], bb[-1][0, p + 1:], atol=1e-6) and not torch.allclose(ba[-1][0, p], bb[-1][0, p])


def test_padding_never_reaches_the_backward_lm():
    model = _model()
    short, long = [3, 7, 1], [3, 7, 1, 9, 4, 12]
    with torch.no_grad():
        _, f1, b1 = model.layers(_batch([short], model))
        _, f2, b2 = model.layers(_batch([short, long], model))
    assert torch.allclose(b1[-1][0], b2[-1][0, :5], atol=1e-6) and torch.allclose(f1[-1][0], f2[-1][0, :5], atol=1e-6)
    assert reversal_index(2, 5, torch.tensor([3, 5]), "cpu").tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0]]


def test_scalar_mix_is_a_softmax_weighted_sum():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.5)
    layers = [torch.randn(2, 4, 6) for _ in range(3)]
    w = torch.softmax(torch.tensor([0.5, -1.0, 2.0]), 0)
    assert abs(float(mix.weights.sum()) - 1) < 1e-6
    assert torch.allclose(mix(layers), 1.5 * sum(wi * h for wi, h in zip(w, layers)), atol=1e-6)
    model = _model()
    features = model.features(_batch([[1, 2, 3]], model))
    assert len(features) == 3 and features[0].shape == (1, 5, 32) and ScalarMix(3)(features).shape == (1, 5, 32)
    with pytest.raises(ValueError, match="ScalarMix over 3 layers"):
        mix(layers[:2])


def test_character_ids_frame_each_word_with_marks():
    ids = char_ids("héllo", 10)
    assert ids[0] == BOW and ids[1:7] == list("héllo".encode()) and ids[7] == EOW and ids[8:] == [CHAR_PAD] * 2
    assert len(char_ids("x" * 80, 50)) == 50 and char_ids("x" * 80, 50)[-1] == EOW


@pytest.mark.slow
def test_elmo_recipe_trains(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "elmo.yaml"), "--trainer.max_steps", "60",
                   "--trainer.val_check_interval", "30", "--trainer.limit_val_batches", "2"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    losses = _train_losses(tmp_path / "runs")
    assert losses[-1] < losses[0] - 1.0, losses


@pytest.mark.parametrize("args,needles", [
    (["--data.examples", "pairs"], ["ELMo trains on data.examples=sequences, not pairs"]),
    (["--model.token_encoder", "bytes"], ["model.token_encoder", "bytes"]),
])
def test_elmo_bad_input_is_one_line(args, needles, tmp_path):
    from tests.test_cli import _one_line_error

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "elmo.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


@pytest.mark.slow
def test_elmo_inspect(tmp_path):
    import json

    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "elmo.yaml"), "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["objective"] == "ELMo" and 1.8 < stats["loss_fraction"] < 2.0 and stats["unk_fraction"] < 0.05
    view = run_cli(["inspect", "--config", str(ROOT / "configs" / "elmo.yaml")], cwd=tmp_path)
    assert "backward LM (position t predicts t - 1)" in view.stdout
