"""Elastic data order: a run stopped (SIGKILLed) on 2 processes and resumed on 1, or the reverse, with another
number of loader workers, continues the same global sequence of samples with the same corruption draws from where
it stopped: within the epoch no sample is seen twice and none is skipped (``benchmarks/elastic_order.py``; the rows
each rank trained on are logged by ``plm_lightning.callbacks.BatchLog``: token ids, masks and labels)."""

from pathlib import Path

import pytest
import torch

from benchmarks.elastic_order import elastic, reference_rows
from plm_lightning.callbacks.batch_log import compare_steps, global_rows, row_fingerprints, row_values, same_row
from tests.conftest import ROOT, run_cli

ARGS = ["--data.seq_len", "64"]
RECIPES = ["bert", "xlm", "transformer-xl", "unilm", "bart", "word2vec"]
"""One per sampler: blocks in a seeded permutation (BERT), a mixture of language streams (XLM), Transformer-XL's
ordered streams carried by its memory; one per way a batch depends on more than its samples: UniLM's LM drawn per
global batch, BART's rows padded to the longest of their batch, word2vec's chunks making several pairs each."""
RECIPE_ARGS = {"word2vec": []}


def _runner(args: list[str], cwd: Path, env: dict[str, str]) -> int:
    res = run_cli(args, cwd=cwd, env=env, fresh="--trainer.devices" in args and
                  args[args.index("--trainer.devices") + 1] != "1")
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return res.returncode


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list]]:
    """8 steps on one process without a stop, per recipe (a global batch of 16)."""
    out = {}
    for recipe in RECIPES:
        out[recipe] = rows = reference_rows(ROOT / "configs" / f"{recipe}.yaml", RECIPE_ARGS.get(recipe, ARGS),
                                            tmp_path_factory.mktemp(recipe), 16, 8, 4, runner=_runner)
        assert sorted(rows) == list(range(1, 9))
        if recipe != "word2vec":  # 16 rows a step, all distinct, or the check could not fail
            flat = [str(r) for step in rows.values() for r in step]
            assert len(flat) == 8 * 16 and len(set(flat)) == len(flat)
    return out


CASES = [("bert", 2, 1, 16), ("bert", 1, 2, 8), ("bert", 2, 1, 8), ("transformer-xl", 2, 1, 16),
         ("transformer-xl", 1, 2, 8), ("xlm", 2, 1, 16), ("unilm", 1, 2, 8), ("bart", 2, 1, 16), ("word2vec", 1, 2, 8)]
"""Both directions on BERT and Transformer-XL (and BERT with its per-device batch kept), one direction on each
other recipe (``benchmarks/elastic_order.py`` runs both for every recipe; the closing notes of issue 53 list them)."""


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "first", "then", "then_batch"), CASES,
                         ids=[f"{r}-{a}->{b}" + ("-per-device-batch-kept" if b * n != 16 else "") for r, a, b, n in CASES])
def test_resumed_on_another_world_size_continues_the_same_samples(recipe, first, then, then_batch, tmp_path,
                                                                  references):
    """Killed after step 6 (checkpoint at 4), resumed under the other layout to step 8: the global sequence of rows
    is the reference's; with the per-device batch kept instead (the global batch halves), the sequence still
    continues at the next unseen sample."""
    result = elastic(ROOT / "configs" / f"{recipe}.yaml", RECIPE_ARGS.get(recipe, ARGS), tmp_path, first, then,
                     references[recipe], runner=_runner, then_batch=then_batch)
    assert result.resumed_from == 4 and result.order == ("multiset" if recipe == "word2vec" else "ordered"), \
        result.line()
    (last,) = [p for p in tmp_path.rglob("last.ckpt") if "version_0" in str(p)]
    state = torch.load(last, weights_only=True)
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["samples_consumed"] == 4 * 16


def test_row_fingerprints_see_every_tensor_of_a_row():
    batch = {"input_ids": torch.tensor([[1, 2], [1, 2]]), "labels": torch.tensor([[-100, 2], [-100, 3]]),
             "scale": torch.tensor(2.0)}
    a, b = row_fingerprints(batch)
    assert a != b
    assert row_fingerprints({**batch, "scale": torch.tensor(3.0)}) == [a, b]


def test_global_rows_interleave_the_ranks(tmp_path):
    import json

    for rank, rows in ((0, ["a", "c"]), (1, ["b", "d"])):
        (tmp_path / f"r.rank{rank}.jsonl").write_text(json.dumps({"step": 1, "rank": rank, "world": 2,
                                                                  "rows": rows}) + "\n")
    assert global_rows(sorted(tmp_path.glob("r.*.jsonl"))) == {1: ["a", "b", "c", "d"]}
    (tmp_path / "r.rank1.jsonl").unlink()
    with pytest.raises(ValueError, match="1 of 2 ranks"):
        global_rows(sorted(tmp_path.glob("r.*.jsonl")))


def test_rows_padded_differently_compare_equal_and_nothing_else_does():
    short = {"input_ids": torch.tensor([[5, 6, 0], [7, 0, 0]]), "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
             "labels": torch.tensor([[-100, 6, -100], [7, -100, -100]])}
    wide = {k: torch.nn.functional.pad(v, (0, 2), value=v[1, -1].item()) for k, v in short.items()}
    a, b = row_values(short), row_values(wide)
    assert same_row(a[0], b[0]) and same_row(a[1], b[1]) and not same_row(a[0], b[1])
    altered = [dict(r) for r in b]
    altered[0]["labels"] = [-100, 6, -100, -100, 3]  # a value beyond the shorter row's width is not padding
    assert not same_row(a[0], altered[0])


def test_compare_steps_says_ordered_multiset_or_differs():
    assert compare_steps({1: ["a", "b"], 2: ["c", "d"]}, {1: ["a", "b"], 2: ["c", "d"]}) == "ordered"
    assert compare_steps({1: ["a", "b"], 2: ["c", "d"]}, {1: ["b", "a"], 2: ["c", "d"]}) == "multiset"
    assert compare_steps({1: ["a", "b"], 2: ["c", "d"]}, {1: ["a", "c"], 2: ["b", "d"]}) == "differs"
    assert compare_steps({1: ["a"]}, {2: ["a"]}) == "differs"


def test_global_rows_of_ranks_with_uneven_rows_are_a_sorted_multiset(tmp_path):
    import json

    for rank, rows in ((0, ["c", "a", "e"]), (1, ["b"])):
        (tmp_path / f"r.rank{rank}.jsonl").write_text(json.dumps({"step": 1, "rank": rank, "world": 2,
                                                                  "rows": rows}) + "\n")
    assert global_rows(sorted(tmp_path.glob("r.*.jsonl"))) == {1: ["a", "b", "c", "e"]}
