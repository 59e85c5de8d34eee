"""The benchmarks' own measuring helpers (the benchmarks themselves run by hand; their figures go to issue notes)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import matmul_replay, record_matmuls


def test_matmul_replay_runs_exactly_the_recorded_products() -> None:
    torch.manual_seed(0)
    linear, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 3, bias=False)
    x = torch.randn(4, 8, requires_grad=True)
    out = torch.empty(5, 16)

    def step() -> None:
        head(linear(x).relu()).sum().backward()
        torch.mm(torch.randn(5, 8), linear.weight.detach().t(), out=out)  # an out= product, kept with its operand
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 6))

    calls = record_matmuls(step)
    ops = sorted(f.__name__ for f, _, _ in calls)
    # forward: addmm (the linear with a bias), mm (the head); backward: each layer's input and weight gradients
    assert ops == ["addmm.default", "bmm.default", "mm.default", "mm.default", "mm.default", "mm.default",
                   "mm.default", "mm.out"]
    f32 = torch.float32
    assert any(kwargs == {"out": ((5, 16), (16, 1), f32)} for _, _, kwargs in calls)
    assert calls[0][1] == [((16,), (1,), f32), ((4, 8), (8, 1), f32), ((8, 16), (1, 8), f32)]  # bias, x, weight.t()

    replayed = record_matmuls(matmul_replay(calls))
    assert [(f, args, kwargs) for f, args, kwargs in replayed] == calls
    bf16 = record_matmuls(lambda: torch.randn(4, 8, dtype=torch.bfloat16) @ torch.randn(8, 2, dtype=torch.bfloat16))
    assert record_matmuls(matmul_replay(bf16)) == bf16 and bf16[0][1][0][2] == torch.bfloat16


def test_matmul_replay_deals_out_copies_of_each_layout_in_turn() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    calls = record_matmuls(lambda: [x @ w for _ in range(3)])
    assert len(calls) == 3 and calls[0] == calls[1] == calls[2]

    class Operands(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.pointers: list[int] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.pointers.append(args[0].data_ptr())
            return func(*args, **(kwargs or {}))

    for copies, pattern in ((1, [0, 0, 0]), (2, [0, 1, 0]), (3, [0, 1, 2])):
        replay, seen = matmul_replay(calls, copies=copies), Operands()
        with seen:
            replay()
        first_seen = list(dict.fromkeys(seen.pointers))
        assert [first_seen.index(p) for p in seen.pointers] == pattern
