"""``inspect --png``: the drawn attention mask is the mask each objective trains with (causal, bidirectional,
encoder-decoder, prefix LM, two-stream permutation), loss rows are the labelled positions, the word-level recipes
draw their context shape, and the CLI writes the PNG files (one recipe, the grid, and every recipe in configs/)."""

import struct

import numpy as np
import pytest

from plm_lightning.commands import run_inspect
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.errors import ConfigError
from plm_lightning.inspection import build_datamodule
from plm_lightning.inspection.batches import sample_batches
from plm_lightning.inspection.picture import objective_picture
from tests.conftest import ROOT

SMALL = ["--data.seq_len=64", "--data.batch_size=4"]


def _picture(recipe: str, width: int = 32):
    datamodule, model = build_datamodule([str(ROOT / "configs" / f"{recipe}.yaml")], SMALL)
    _, batch = next(sample_batches(datamodule, 1, 0.0))
    return objective_picture(datamodule, model, width, name=recipe), batch


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_causal_and_bidirectional_masks_with_their_loss_rows() -> None:
    gpt2, _ = _picture("gpt2")
    n = len(gpt2.tokens)
    assert n == 32 and gpt2.mask.shape == (n, n) and gpt2.loss.all()  # every next token is predicted
    assert not np.triu(gpt2.mask, 1).any() and gpt2.mask.diagonal().all()  # no query sees a later key
    bert, batch = _picture("bert")
    assert bert.mask.all()  # bidirectional over real tokens
    expected = (batch["labels"][0, :32] != IGNORE_INDEX).numpy()
    assert 0 < bert.loss.sum() < 32 and (bert.loss == expected).all()
    assert bert.corrupted != bert.original and "[MASK]" in bert.corrupted


def test_encoder_decoder_is_one_matrix_over_encoder_and_decoder() -> None:
    t5, batch = _picture("t5")
    (_, enc), (_, dec) = t5.blocks
    assert [b[0] for b in t5.blocks] == ["encoder", "decoder"] and enc == 32 and dec > 0
    assert t5.mask[:enc, :enc].all() and not t5.mask[:enc, enc:].any()  # the encoder never sees the decoder
    assert t5.mask[enc:, :enc].all()  # cross-attention to every encoder token
    assert (t5.mask[enc:, enc:] == np.tril(np.ones((dec, dec), bool))).all()
    assert not t5.loss[:enc].any() and (t5.loss[enc:] == (batch["labels"][0, :dec] != IGNORE_INDEX).numpy()).all()
    assert "<extra_id_0>" in t5.corrupted and "<extra_id_0>" not in t5.original


def test_prefix_lm_window_straddles_the_boundary_and_permutation_streams() -> None:
    glm, batch = _picture("glm", width=24)
    (_, a), (_, b) = glm.blocks
    assert a > 0 and b > 0 and a + b == 24
    assert glm.mask[:a, :a].all() and not glm.mask[:a, a:].any()  # Part A never sees Part B
    assert glm.mask[a:, :a].all() and (glm.mask[a:, a:] == np.tril(np.ones((b, b), bool))).all()
    assert not glm.loss[:a].any() and glm.loss[a:].any()  # only the spans of Part B are predicted
    xlnet, batch = _picture("xlnet")
    predicted = (batch["labels"][0, :32] != IGNORE_INDEX).numpy()
    assert (xlnet.loss == predicted).all() and predicted.any()
    assert not xlnet.mask.diagonal()[predicted].any() and xlnet.mask.diagonal()[~predicted].all()
    assert not np.array_equal(xlnet.mask, np.tril(xlnet.mask))  # a factorization order, not left-to-right


def test_word_level_recipes_draw_their_context_shape() -> None:
    """No attention, but a context: skip-gram windows (within the largest window, never the centre itself), GloVe's
    co-occurrence band, ELMo's two directions that never see each other."""
    datamodule, model = build_datamodule([str(ROOT / "configs" / "word2vec.yaml")], [])
    w2v = objective_picture(datamodule, model, 32, name="word2vec")
    distance = np.abs(np.arange(32)[:, None] - np.arange(32)[None, :])
    assert w2v.mask.any() and not w2v.mask.diagonal().any() and not (w2v.mask & (distance > 5)).any()
    assert (w2v.loss == w2v.mask.any(1)).all()
    datamodule, model = build_datamodule([str(ROOT / "configs" / "elmo.yaml")], [])
    elmo = objective_picture(datamodule, model, 32, name="elmo")
    n = len(elmo.tokens)
    assert elmo.mask.shape == (2 * n, n) and [b[0] for b in elmo.row_blocks] == ["forward", "backward"]
    assert (elmo.mask[:n] == np.tril(np.ones((n, n), bool))).all() and (elmo.mask[n:] == np.triu(elmo.mask[n:])).all()
    assert not elmo.loss[n - 1] and not elmo.loss[n] and elmo.loss.sum() == 2 * n - 2


def test_png_files_and_one_line_errors(tmp_path, capsys) -> None:
    run_inspect(["--config", str(ROOT / "configs" / "t5.yaml"), "--png", str(tmp_path / "t5.png"), *SMALL])
    assert _png_size(tmp_path / "t5.png")[0] > 800
    run_inspect(["--all-recipes", "--recipes", "gpt2,word2vec", "--configs-dir", str(ROOT / "configs"),
                 "--png", str(tmp_path / "grid.png")])
    assert _png_size(tmp_path / "grid.png")[0] > 400
    printed = capsys.readouterr().out
    assert "drew 2 recipes" in printed and "not drawn" not in printed
    for argv, words in ((["--all-recipes"], "--png"),
                        (["--all-recipes", "--recipes", "bert,nope", "--configs-dir", str(ROOT / "configs"), "--png",
                          str(tmp_path / "g.png")], "unknown recipe(s) nope"),
                        (["--config", str(ROOT / "configs" / "bert.yaml"), "--png", str(tmp_path / "b.jpg")], ".png")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            run_inspect(argv)


@pytest.mark.slow
def test_every_recipe_in_configs_draws_a_valid_png(tmp_path, capsys) -> None:
    """The whole grid from the recipes' YAML alone (DistilBERT listed as needing its teacher), then DistilBERT with
    a random-weight teacher: every recipe file in configs/ yields a picture with a mask and loss rows, and the PNGs
    decode to images of the size they declare."""
    from matplotlib.image import imread

    from plm_lightning.inspection.picture import draw_all_recipes, recipe_configs
    from tests.test_distilbert import _teacher

    configs = recipe_configs(ROOT / "configs")
    assert set(configs) == {p.stem for p in (ROOT / "configs").glob("*.yaml")}
    # each recipe from the first 80 documents of its text (CoVe: 2000 pairs): the same pipeline, less text to pack
    pictures, skipped = draw_all_recipes(configs, tmp_path / "grid.png", [], log=lambda *_: None, max_documents=80)
    assert list(skipped) == ["distilbert"] and "model.teacher is required" in skipped["distilbert"]
    drawn = {p.title.split(" (")[0]: p for p in pictures}
    assert set(drawn) == set(configs) - {"distilbert"}
    for name, picture in drawn.items():
        assert picture.mask.any() and picture.loss.any() and picture.mask.shape[1] == len(picture.tokens), name
    bert_tokenizer = build_datamodule([str(configs["bert"])], ["--data.max_documents=80"])[0].tokenizer
    _, teacher = _teacher(tmp_path / "teacher.ckpt", layers=2, tokenizer=bert_tokenizer)
    bert_tokenizer.save(tmp_path / "tok")
    run_inspect(["--config", str(configs["distilbert"]), "--model.teacher", teacher, "--data.tokenizer",
                 str(tmp_path / "tok"), "--data.max_documents=80", "--png", str(tmp_path / "distilbert.png")])
    assert "drew distilbert (masked_lm)" in capsys.readouterr().out
    for png in ("grid.png", "distilbert.png"):
        width, height = _png_size(tmp_path / png)
        image = imread(tmp_path / png)
        assert image.shape[:2] == (height, width) and image.std() > 0.05, png  # decodes, and is not blank
