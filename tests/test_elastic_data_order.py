"""Elastic data order: a run stopped (SIGKILLed) on 2 processes and resumed on 1, or the reverse, with another
number of loader workers, continues the same global sequence of samples with the same corruption draws from where
it stopped: within the epoch no sample is seen twice and none is skipped. The rows each rank trained on are
fingerprinted by ``plm_lightning.callbacks.BatchLog`` (token ids, masks and labels of every row)."""

from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.loss_compare import leg_config
from plm_lightning.callbacks.batch_log import global_rows, row_fingerprints
from tests.conftest import ROOT, run_cli

RECIPE = ROOT / "configs" / "bert.yaml"
COMMON = ["fit", "--config", str(RECIPE), "--data.seq_len", "64", "--trainer.limit_val_batches", "0",
          "--trainer.max_steps", "8"]
DDP = ["--config", str(ROOT / "configs" / "strategy" / "ddp.yaml")]
LAYOUTS = {1: ["--data.num_workers", "0"], 2: [*DDP, "--data.num_workers", "2"]}
"""One process, or two (DDP over gloo) with two loader workers each."""


def _sequence(rows: dict[int, list]) -> list[str]:
    return [r for step in sorted(rows) for r in rows[step]]


def _leg(directory: Path, world: int, batch: int, kill_at: int | None = None, resume: Path | None = None
         ) -> dict[int, list]:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"rows-{'resumed' if resume else 'first'}.jsonl"
    config = directory / f"callbacks-{log.stem}.yaml"
    batch_log = {"class_path": "plm_lightning.callbacks.BatchLog", "init_args": {"path": str(log)}}
    config.write_text(yaml.safe_dump(leg_config(RECIPE, 4, kill_at, extra=[batch_log])))
    args = [*COMMON, *LAYOUTS[world], "--data.batch_size", str(batch), "--config", str(config)]
    if resume is not None:
        args += ["--ckpt_path", str(resume)]
    res = run_cli(args, cwd=directory, fresh=world > 1)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.returncode == (-9 if kill_at else 0), res.stderr[-3000:]
    return global_rows(sorted(directory.glob(f"{log.stem}*.jsonl")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list]:
    """8 steps on one process without a stop."""
    rows = _leg(tmp_path_factory.mktemp("reference"), 1, 16)
    everything = _sequence(rows)
    assert len(rows) == 8 and len(everything) == 8 * 16
    assert len(set(everything)) == len(everything), "the check needs distinct rows"
    return rows


@pytest.mark.slow
@pytest.mark.parametrize(("first", "then"), [((2, 8), (1, 16)), ((1, 16), (2, 8)), ((2, 8), (1, 8))],
                         ids=["2->1", "1->2", "2->1 same per-device batch"])
def test_resumed_on_another_world_size_continues_the_same_samples(first, then, tmp_path, reference):
    """Killed after step 6 (checkpoint at 4), resumed under the other layout to step 8: the global sequence of rows
    is the reference's, step for step where the global batch is kept; with the per-device batch kept instead (the
    global batch halves), the sequence still continues at the next unseen sample."""
    rows = _leg(tmp_path, *first, kill_at=6)
    (last,) = tmp_path.rglob("last.ckpt")
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 4
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["samples_consumed"] == 4 * 16
    resumed = _leg(tmp_path, *then, resume=last)
    assert sorted(rows) == [1, 2, 3, 4, 5, 6] and sorted(resumed) == [5, 6, 7, 8]
    joined = _sequence({s: r for s, r in rows.items() if s <= 4}) + _sequence(resumed)
    assert len(joined) == 4 * 16 + 4 * then[0] * then[1]
    assert joined == _sequence(reference)[: len(joined)], f"{first} -> {then}"


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
