"""Two nodes simulated on one machine: two `torchrun` launchers (``--nnodes 2 --nproc_per_node 2``, node ranks 0
and 1, one rendezvous address), as docs/multi-node.md starts a real 2-node job."""

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from tests.test_cli import _train_losses
from tests.test_scale_and_resume import SMALL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_of_two_processes_match_one_process(tmp_path):
    """Global batch 16 = 1 x 16 = 2 nodes x 2 processes x 4: the same samples, so the same loss trajectory; every one
    of the 4 ranks joins (Lightning's ``GLOBAL_RANK: r, MEMBER: r+1/4`` on each node's log)."""
    gpt2, ddp = str(ROOT / "configs" / "gpt2.yaml"), str(ROOT / "configs" / "strategy" / "ddp.yaml")
    (tmp_path / "single").mkdir()
    res = run_cli(["fit", "--config", gpt2, *SMALL, "--data.batch_size", "16"], cwd=tmp_path / "single")
    assert res.returncode == 0, res.stderr[-3000:]

    port, shared = _free_port(), tmp_path / "nodes"  # `shared`: the file system both nodes see
    shared.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    launchers = [
        subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
                          "--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port),
                          "-m", "plm_lightning", "fit", "--config", gpt2, "--config", ddp, "--trainer.num_nodes", "2",
                          *SMALL, "--data.batch_size", "4"],
                         cwd=shared, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    logs = [p.communicate(timeout=900)[0] for p in launchers]
    for node, (proc, log) in enumerate(zip(launchers, logs)):
        assert proc.returncode == 0, (node, log[-3000:])
    joined = "\n".join(logs)
    for rank in range(4):
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/4" in joined, joined[-3000:]

    single, nodes = _train_losses(tmp_path / "single" / "runs"), _train_losses(shared / "runs")
    assert len(single) == len(nodes) == 8
    assert max(abs(a - b) for a, b in zip(single, nodes)) < 2e-3, (single, nodes)
