"""Position-wise feed-forward layers: the two-layer MLP and the gated linear unit family.

MLP: Vaswani et al. 2017, eq. 2. GLU variants: Shazeer 2020, "GLU Variants Improve Transformer", eqs. 5-6:
FFN_GEGLU(x) = (GELU(x W) * x V) W2, with sigmoid (GLU), ReLU (ReGLU), GELU (GeGLU) or Swish (SwiGLU) gates.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.dropout import Dropout, relu_dropout

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's tanh approximation
    "relu": F.relu,
    "silu": F.silu,
}
GATES = {"glu": F.sigmoid, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu,
         "geglu_tanh": lambda x: F.gelu(x, approximate="tanh")}  # T5.1.1's gated-gelu (gelu_new)


class FeedForward(nn.Module):
    """``fc_out(act(fc_in(x)))``, or ``fc_out(gate(fc_gate(x)) * fc_in(x))`` for the GLU family."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "gelu", bias: bool = True,
                 dropout: float = 0.0) -> None:
        """``dropout`` acts on the inner activation (T5); BERT and GPT-2 use 0."""
        super().__init__()
        if activation not in ACTIVATIONS and activation not in GATES:
            raise ValueError(f"activation={activation!r} is not one of {', '.join([*ACTIVATIONS, *GATES])}")
        self.gated = activation in GATES
        self.act = GATES[activation] if self.gated else ACTIVATIONS[activation]
        self.fc_in = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.fc_gate = nn.Linear(hidden_size, intermediate_size, bias=bias) if self.gated else None
        self.fc_out = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.fc_gate is not None:
            h = self.dropout(self.act(self.fc_gate(x)) * self.fc_in(x))
        elif self.act is F.relu:
            h = relu_dropout(self.fc_in(x), self.dropout.p, self.training)
        else:
            h = self.dropout(self.act(self.fc_in(x)))
        return self.fc_out(h)
