"""The value search shared by ROME and MEMIT (``optimise_shifts``), on a tiny random GPT-2: batching requests whose
answers differ in length changes nothing, and a search through an update sees exactly the model the written update
makes."""

import pytest
import torch

from plm_lightning.knowledge.editing import (
    EditRequest,
    TargetConfig,
    answer_log_probs,
    mlp_keys,
    optimise_shift,
    optimise_shifts,
    prefixed_queries,
)
from plm_lightning.knowledge.lm import LanguageModel
from tests.conftest import tiny_pretrained

# never stops early: every request runs all steps, so separate and batched searches are comparable step for step
NO_STOP = TargetConfig(steps=6, stop_loss=float("-inf"))
REQUESTS = [EditRequest("{} returns a", "The function", "list of values"), EditRequest("{} is a", "The value", "new")]


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> LanguageModel:
    return LanguageModel.load(tiny_pretrained(tmp_path_factory.mktemp("edit") / "gpt2.ckpt", "gpt2"))


def test_batched_shifts_equal_one_search_per_request(lm) -> None:
    lengths = [len(lm.query(r.text, r.target_new).answer) for r in REQUESTS]
    assert lengths[0] > 1 and lengths[0] != lengths[1]  # the padded answer steps must carry no loss
    contexts = ["{}", "It is. {}"]
    module, block = lm.ffn(0), lm.block(0)  # the subject's token reaches the answer through the next layer's attention
    deltas, originals = optimise_shifts(lm, REQUESTS, contexts, [module], NO_STOP, [block])
    assert deltas.shape == originals.shape == (1, 2, lm.backbone.cfg.hidden_size)
    for i, request in enumerate(REQUESTS):
        delta, original = optimise_shift(lm, request, contexts, module, NO_STOP, block)
        assert delta.abs().max() > 0
        torch.testing.assert_close(deltas[0, i], delta, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(originals[0, i], original)


def test_a_search_through_the_update_sees_the_written_model(lm) -> None:
    request, layer = REQUESTS[0], 0
    fc_out = lm.ffn(layer).fc_out
    key = mlp_keys(lm, layer, prefixed_queries(lm, request, ["{}"]))[0]
    direction = torch.randn(key.shape[0], generator=torch.Generator().manual_seed(0))
    direction = direction / (direction @ key)  # d . k* = 1: the subject's value moves by delta exactly
    delta, _ = optimise_shift(lm, request, ["{}"], fc_out, NO_STOP, lm.block(layer), key_direction=direction)
    query = lm.query(request.text, subject=request.subject)
    answer = list(lm.query(request.text, request.target_new).answer)
    hook = fc_out.register_forward_hook(lambda _m, inputs, out: out + (inputs[0] @ direction)[..., None] * delta)
    with torch.no_grad():
        try:
            searched = answer_log_probs(lm, [query], answer)
        finally:
            hook.remove()
        before = answer_log_probs(lm, [query], answer)
        original = fc_out.weight.detach().clone()
        fc_out.weight += torch.outer(delta, direction)
        try:
            written = answer_log_probs(lm, [query], answer)
        finally:
            fc_out.weight.copy_(original)
    torch.testing.assert_close(written, searched, rtol=1e-4, atol=1e-4)
    assert written > before  # and the search made the new answer likelier
