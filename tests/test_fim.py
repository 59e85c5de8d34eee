"""Fill-in-the-middle (Bavarian et al. 2022): the PSM/SPM layouts give the document back, character-level cuts
re-encode each piece, context-level FIM keeps the row length, the rates hold, and `predict` builds the PSM prompt."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.data.corruption.fim import fim_document

IDS = {"fim_prefix": 1, "fim_middle": 2, "fim_suffix": 3, "eos": 0}


def _unfim(tokens: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(prefix, middle, suffix) of a PSM or SPM layout."""
    assert tokens[0] == IDS["fim_prefix"]
    if tokens[1] == IDS["fim_suffix"]:  # SPM: <PRE> <SUF> suffix <MID> prefix+middle
        mid = tokens.index(IDS["fim_middle"])
        return [], tokens[mid + 1:], tokens[2:mid]
    suf, mid = tokens.index(IDS["fim_suffix"]), tokens.index(IDS["fim_middle"])
    return tokens[1:suf], tokens[mid + 1:], tokens[suf + 1:mid]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(10, 500), min_size=1, max_size=80), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_token_level_fim_is_a_rearrangement(tokens, spm_rate, seed):
    out, (i, j) = fim_document(tokens, np.random.default_rng(seed), IDS, spm_rate, split="token")
    assert len(out) == len(tokens) + 3 and sorted(t for t in out if t > 3) == sorted(tokens)
    prefix, middle, suffix = _unfim(out)
    assert prefix + middle + suffix == tokens and 0 <= i <= j <= len(tokens)


@pytest.fixture(scope="module")
def tok():
    from plm_lightning.corpus import embedded_corpus
    from plm_lightning.corpus.tokenizer import train_tokenizer

    return train_tokenizer("gpt2", embedded_corpus()[:80], 600)


def test_character_level_fim_reencodes_each_piece(tok):
    text = "def add(a, b):\n    return a + b\n"
    tokens = tok.encode_batch([text])[0]
    ids = {r: tok.ids[r] for r in ("fim_prefix", "fim_middle", "fim_suffix")}
    cuts = set()
    for seed in range(40):
        out, (i, j) = fim_document(tokens, np.random.default_rng(seed), ids, 0.0, "character", tok.decode,
                                   lambda s: tok.encode_batch([s])[0] if s else [])
        suf, mid = out.index(ids["fim_suffix"]), out.index(ids["fim_middle"])
        prefix, suffix, middle = tok.decode(out[1:suf]), tok.decode(out[suf + 1:mid]), tok.decode(out[mid + 1:])
        assert (prefix, middle, suffix) == (text[:i], text[i:j], text[j:])
        cuts.add((i, j))
    assert len(cuts) > 30  # cuts fall anywhere in the characters, inside words too


def test_context_level_fim_keeps_rows_and_rates(tmp_path):
    from plm_lightning.data import FIMDataModule

    dm = FIMDataModule(seq_len=64, batch_size=16, tokenizer_vocab_size=2048, cache_dir=str(tmp_path), fim_rate=0.5)
    dm.setup()
    collate = dm.collator()
    fim = docs = 0
    for i, batch in enumerate(dm.train_dataloader()):
        assert batch["input_ids"].shape == (16, 64)
        real = batch["attention_mask"]
        assert torch.equal(batch["labels"][:, :-1][real[:, 1:]], batch["input_ids"][:, 1:][real[:, 1:]])
        fim, docs = fim + int(batch["fim_documents"].sum()), docs + int(batch["documents"].sum())
        if i == 30:
            break
    assert abs(fim / docs - 0.5) < 0.06
    sentinels = torch.tensor([dm.tokenizer.ids[r] for r in ("fim_prefix", "fim_middle", "fim_suffix")])
    assert torch.isin(batch["input_ids"], sentinels).any() and collate.objective == "fill_in_the_middle"
    off = FIMDataModule(seq_len=64, batch_size=16, tokenizer_vocab_size=2048, cache_dir=str(tmp_path), fim_rate=0.0)
    off.setup()
    plain = next(iter(off.train_dataloader()))
    assert not torch.isin(plain["input_ids"], sentinels).any() and int(plain["fim_documents"].sum()) == 0
    with pytest.raises(ConfigError, match="data.fim_rate"):
        FIMDataModule(fim_rate=1.5)
    with pytest.raises(ConfigError, match="data.fim_split"):
        FIMDataModule(fim_split="word")


def test_predict_builds_the_psm_prompt(tok, monkeypatch, tmp_path):
    from plm_lightning import prediction
    from plm_lightning.generation import GenerationConfig
    from plm_lightning.objectives import CausalLM

    model = CausalLM(vocab_size=tok.vocab_size).eval()
    monkeypatch.setattr(prediction, "load_generator", lambda path: (model, tok))
    seen = {}
    middle = tok.encode_batch(["a + b"])[0]

    def fake_generate(model, ids, mask, config, eos, start=None, generator=None):
        seen["ids"] = ids[0].tolist()
        return [[*middle, eos]]

    monkeypatch.setattr(prediction, "generate", fake_generate)
    (tmp_path / "p.txt").write_text("def add(a, b):\\n    return <fim_middle>\\n\n".replace("\\\\n", "\\n"))
    (row,) = prediction.predict_file("ckpt", str(tmp_path / "p.txt"), GenerationConfig())
    ids = seen["ids"]
    assert ids[0] == tok.ids["fim_prefix"] and ids[-1] == tok.ids["fim_middle"] and tok.ids["fim_suffix"] in ids
    assert row["output"] == "a + b" and row["filled"] == row["prompt"].replace("<fim_middle>", "a + b")
