"""CoVe: the MT-LSTM's vectors ignore padding, the features are [GloVe; CoVe], word vectors load (and stay frozen)
from the word2vec text format, the translation recipe trains, and bad parallel input is a one-line error."""

import numpy as np
import pytest
import torch

from plm_lightning.data.parallel import TranslationCollator
from plm_lightning.data.static import WordVocabulary
from plm_lightning.objectives import CoVe
from tests.conftest import ROOT, run_cli
from tests.test_cli import _train_losses


def _model(tmp_path=None, **kwargs) -> CoVe:
    torch.manual_seed(0)
    model = CoVe(embedding_dim=8, hidden=12, dropout=0.0, **kwargs)
    model.target_vocabulary = WordVocabulary([f"t{i}" for i in range(15)], np.ones(15, np.int64)).with_specials()
    model.set_vocabulary(WordVocabulary([f"s{i}" for i in range(20)], np.ones(20, np.int64)).with_specials())
    return model.eval()


def _batch(model: CoVe, pairs: list[tuple[list[int], list[int]]]) -> dict:
    collate = TranslationCollator(model.vocabulary, model.target_vocabulary)
    return collate([(np.array(s), np.array(t)) for s, t in pairs])


def test_cove_vectors_and_the_decoder_ignore_padding():
    model = _model()
    alone = _batch(model, [([3, 4, 5], [1, 2])])
    padded = _batch(model, [([3, 4, 5], [1, 2]), ([6, 7, 8, 9, 10, 11], [3, 4, 5, 6])])
    with torch.no_grad():
        a = model.cove(alone["source_ids"], alone["source_mask"])
        b = model.cove(padded["source_ids"], padded["source_mask"])
        assert torch.allclose(a[0], b[0, :3], atol=1e-6)
        features = model.features(padded["source_ids"], padded["source_mask"])
        assert features.shape == (2, 6, 8 + 2 * 12)
        assert torch.equal(features[..., :8], model.word_embeddings(padded["source_ids"]))  # the GloVe half
        other = dict(padded)
        other["source_ids"] = padded["source_ids"].clone()
        other["source_ids"][0, 3:] = 17  # different padding tokens: nothing changes
        assert torch.allclose(model.loss(padded), model.loss(other), atol=1e-6)


def test_word_vectors_load_from_word2vec_text_and_stay_frozen(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("2 8\ns3 " + " ".join(["0.5"] * 8) + "\ns7 " + " ".join(["-1"] * 8) + "\n")
    model = _model(word_vectors=str(path))
    assert torch.equal(model.word_embeddings.weight[model.vocabulary.index["s3"]], torch.full((8,), 0.5))
    assert not model.word_embeddings.weight.requires_grad
    with pytest.raises(Exception, match="8-dimensional|embedding_dim"):
        path.write_text("1 4\ns3 1 2 3 4\n")
        _model(word_vectors=str(path))


@pytest.mark.slow
def test_cove_recipe_trains(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "cove.yaml"), "--trainer.max_steps", "60",
                   "--trainer.val_check_interval", "30", "--trainer.limit_val_batches", "2"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    losses = _train_losses(tmp_path / "runs")
    assert losses[-1] < losses[0] - 1.5, losses


@pytest.mark.parametrize("args,needles", [
    (["--data.parallel_corpus", "{tmp}/empty.tsv"], ["data.parallel_corpus", "holds no sentence pairs"]),
    (["--data.parallel_corpus", "{tmp}/bad.tsv"], ["data.parallel_corpus", "line 1 is not 'source<TAB>target'"]),
])
def test_cove_bad_input_is_one_line(args, needles, tmp_path):
    from tests.test_cli import _one_line_error

    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "bad.tsv").write_text("no tab here\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "cove.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


@pytest.mark.slow
def test_cove_inspect(tmp_path):
    import json

    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "cove.yaml"), "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["objective"] == "CoVe" and stats["pairs"] > 1000
    assert stats["target_length_mean"] == pytest.approx(stats["input_length_mean"] + 1, abs=0.5)  # + </s>, 1:1 words
    view = run_cli(["inspect", "--config", str(ROOT / "configs" / "cove.yaml")], cwd=tmp_path)
    assert "encoder reads (CoVe's input)" in view.stdout
