"""One per-batch value through the stack: ``stack(input_ids, StackInputs)``; a new id input is an embedding table
registered for its batch key, read without an edit to ``nn/`` or ``run_stack``."""

import pytest
import torch
from torch import nn

from plm_lightning.nn import Encoder, get_preset
from plm_lightning.nn.stack_inputs import StackInputs, batch_inputs, text_inputs
from plm_lightning.objectives import MaskedLM


def _encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(get_preset("tiny").replace(vocab_size=50, dropout=0.0, attention_dropout=0.0)).eval()


def test_a_new_id_input_is_read_by_its_own_table_and_zero_where_the_batch_has_none():
    stack = _encoder()
    assert stack.input_keys() == ("token_type_ids",)
    stack.embeddings.add_input("reading_order_ids", nn.Embedding(3, stack.cfg.hidden_size))
    assert stack.input_keys() == ("token_type_ids", "reading_order_ids")
    assert "embeddings.extra_inputs.reading_order_ids.weight" in stack.state_dict()
    ids = torch.randint(5, 50, (2, 7))
    order = torch.tensor([[0, 1, 2, 0, 1, 2, 0], [2, 2, 2, 1, 1, 0, 0]])
    with torch.no_grad():
        plain = stack(ids).last_hidden_state
        zeros = stack(ids, StackInputs(ids={"reading_order_ids": torch.zeros_like(ids)})).last_hidden_state
        ordered = stack(ids, StackInputs(ids={"reading_order_ids": order})).last_hidden_state
        per_row = stack(ids, StackInputs(ids={"reading_order_ids": torch.tensor([1, 1])})).last_hidden_state
        everywhere = stack(ids, StackInputs(ids={"reading_order_ids": torch.ones_like(ids)})).last_hidden_state
    assert torch.equal(plain, zeros) and not torch.allclose(plain, ordered)
    assert torch.equal(per_row, everywhere)  # a [B] input is one id per row
    with pytest.raises(ValueError, match="already read"):
        stack.embeddings.add_input("token_type_ids", nn.Embedding(2, stack.cfg.hidden_size))


def test_an_objective_passes_every_key_its_stack_reads_and_no_other():
    model = MaskedLM(backbone="tiny", vocab_size=50)
    model.backbone.embeddings.add_input("reading_order_ids", nn.Embedding(3, model.config.hidden_size))
    batch = {"input_ids": torch.randint(5, 50, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 6, dtype=torch.long), "reading_order_ids": torch.ones(2, 6).long(),
             "labels": torch.full((2, 6), -100), "sentence_label": torch.zeros(2).long()}
    inputs = model.stack_inputs(model.backbone, batch)
    assert set(inputs.ids) == {"token_type_ids", "reading_order_ids"}
    assert inputs.attention_mask is batch["attention_mask"] and inputs.mask is None and inputs.causal is None
    prefix = model.stack_inputs(model.backbone, {**batch, "prefix_lengths": torch.tensor([2, 3])})
    assert prefix.causal is False and prefix.mask.shape == (2, 1, 6, 6)


def test_unknown_id_inputs_and_the_old_positional_mask_are_refused():
    stack = _encoder()
    ids = torch.randint(5, 50, (1, 4))
    with pytest.raises(ValueError, match=r"no table for \['task_type_ids'\]"):
        stack(ids, StackInputs(ids={"task_type_ids": torch.zeros(1).long()}))
    with pytest.raises(TypeError, match="StackInputs"):
        stack(ids, torch.ones_like(ids))
    # a stack without segment embeddings has nothing to read token types with: text_inputs leaves them out
    gpt = get_preset("tiny-gpt")
    assert gpt.type_vocab_size == 0
    assert text_inputs(Encoder(gpt), torch.ones_like(ids), torch.zeros_like(ids)).ids == {}
    assert batch_inputs({"attention_mask": None, "token_type_ids": None}, ("token_type_ids",)).ids == {}
