"""``attention_backend: flex`` (``nn.flex``): the T5 bias and the masks inside FlexAttention's kernel, against the
eager reference in fp32. On CPU FlexAttention computes forward only (torch raises for a backward there): the forward
is checked here for every mask shape and for the T5 family end to end with packed rows; the backward, and the
kernel it runs, in ``tests/test_gpu.py``."""

import pytest
import torch

from plm_lightning.nn import EncoderDecoder, MultiHeadAttention, get_preset
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.positions import RelativePositionBias
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import ATTENTION_CASES, attention_case


@pytest.mark.parametrize("kind", [*ATTENTION_CASES, "bias+document+causal"])
def test_flex_matches_eager_on_every_mask_shape(kind):
    torch.manual_seed(0)
    eager = MultiHeadAttention(64, 4, backend="eager").eval()
    flex = MultiHeadAttention(64, 4, backend="flex").eval()
    flex.load_state_dict(eager.state_dict())
    x = torch.randn(3, 20, 64)
    if kind == "bias+document+causal":  # T5's decoder over packed rows: bias, documents and causality at once
        documents = attention_case("document", length=20)
        case = LayerAttention(mask=documents.mask, is_causal=True,
                              position_bias=RelativePositionBias(4, bidirectional=False)(20, 20).detach())
    else:
        case = attention_case(kind, length=20)
    with torch.no_grad():
        assert (eager(x, case) - flex(x, case)).abs().max().item() < 1e-5


def test_flex_refuses_what_it_cannot_compute_on_cpu():
    flex = MultiHeadAttention(64, 4, backend="flex")
    x = torch.randn(2, 8, 64, requires_grad=True)
    with pytest.raises(RuntimeError, match="attention_backend='flex': FlexAttention has no backward on cpu"):
        flex.eval()(x)
    flex = MultiHeadAttention(64, 4, backend="flex", dropout=0.1).train()
    with torch.no_grad(), pytest.raises(RuntimeError, match="no attention dropout; set attention_dropout: 0"):
        flex(x)


@pytest.mark.parametrize("preset", ["tiny-t5", "tiny-t5-v1_1"])
def test_the_t5_family_on_flex_equals_eager_with_packed_rows_and_padding(preset):
    """The whole encoder-decoder (relative bias in every layer's kernel, packed documents on the encoder, padding
    and causality on the decoder, cross-attention) gives the eager model's hidden states."""
    cfg = get_preset(preset).replace(dropout=0.0, attention_dropout=0.0, attention_backend="eager")
    torch.manual_seed(0)
    eager = EncoderDecoder(cfg).eval()
    flex = EncoderDecoder(cfg.replace(attention_backend="flex")).eval()
    flex.load_state_dict(eager.state_dict())
    src, tgt = torch.randint(5, cfg.vocab_size, (2, 24)), torch.randint(5, cfg.vocab_size, (2, 10))
    documents = torch.tensor([[0] * 10 + [1] * 14, [0] * 24])
    real = torch.ones(2, 24, dtype=torch.long)
    real[1, 18:] = 0
    dec_real = torch.ones(2, 10, dtype=torch.long)
    dec_real[0, 7:] = 0
    with torch.no_grad():
        outs = [m(src, tgt, StackInputs(attention_mask=real, document_ids=documents),
                  StackInputs(attention_mask=dec_real)) for m in (eager, flex)]
    for a, b in zip(*outs):
        assert (a.last_hidden_state - b.last_hidden_state).abs().max().item() < 1e-4


def test_a_batch_builds_its_block_mask_once_for_every_layer():
    """Every layer of a stack gets the same mask tensor from the plan: the BlockMask is built for the first and
    reused; a new mask (the next batch) gets its own."""
    from plm_lightning.nn import flex

    mask = attention_case("document", length=20).mask
    first = flex._block_mask(mask, True, 3, 20, 20, torch.device("cpu"))
    assert flex._block_mask(mask, True, 3, 20, 20, torch.device("cpu")) is first
    assert flex._block_mask(mask, False, 3, 20, 20, torch.device("cpu")) is not first
    assert flex._block_mask(mask.clone(), True, 3, 20, 20, torch.device("cpu")) is not first
