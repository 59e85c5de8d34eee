"""ELECTRA (Clark et al. 2020) and the embedding-sharing modes DeBERTaV3 compares (He et al. 2023): generator shape,
replaced-token labels, where the gradients of each loss go."""

import pytest
import torch

from plm_lightning import ConfigError, get_preset
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.objectives import ELECTRA
from plm_lightning.objectives.electra import generator_config
from tests.conftest import masked_batch


def test_generator_config_follows_the_reference_code():
    base = generator_config(get_preset("electra-base"), 3)  # Clark et al. 2020, Table 6: 1/3 for Base
    assert (base.hidden_size, base.num_heads, base.intermediate_size, base.num_layers) == (256, 4, 1024, 12)
    assert base.embedding_size == 768  # projects the shared 768-wide table down to 256
    small = generator_config(get_preset("electra-small"), 4)  # 1/4 for Small and Large
    assert (small.hidden_size, small.num_heads, small.embedding_size) == (64, 1, 128)
    assert generator_config(get_preset("electra-base"), 1, num_layers=6).num_layers == 6  # DeBERTaV3: half depth
    with pytest.raises(ConfigError, match="generator_size_divisor=5 does not divide the hidden size 768"):
        generator_config(get_preset("electra-base"), 5)


def _batch(seed=0):
    batch = masked_batch(batch=4, length=24, mask_prob=0.3, seed=seed, pad_from=18)
    return batch, batch["labels"] != IGNORE_INDEX


def _module(sharing="shared"):
    torch.manual_seed(0)
    return ELECTRA(backbone="tiny", vocab_size=101, embedding_sharing=sharing)


def test_a_sample_equal_to_the_original_counts_as_original(monkeypatch):
    module = _module()
    batch, chosen = _batch()
    real = batch["attention_mask"].bool()
    monkeypatch.setattr(module, "sample_replacements", lambda logits: batch["labels"][chosen])  # always right
    out = module.compute_loss(batch)
    assert out["replaced_fraction"] == 0.0
    monkeypatch.setattr(module, "sample_replacements", lambda logits: (batch["labels"][chosen] + 1) % 101)
    out = module.compute_loss(batch)
    assert out["replaced_fraction"].item() == pytest.approx(chosen.sum().item() / real.sum().item())
    assert out["loss"].item() == pytest.approx((out["mlm_loss"] + 50 * out["rtd_loss"]).item(), rel=1e-6)


def test_loss_positions_are_every_real_token():
    module = _module()
    batch, _ = _batch()
    assert torch.equal(module.loss_positions(batch), batch["attention_mask"].bool())


def _grads_of_rtd_loss(module):
    module.zero_grad(set_to_none=True)
    batch, _ = _batch()
    module.compute_loss(batch)["rtd_loss"].backward()
    return module


@pytest.mark.parametrize("sharing", ["shared", "gdes", "none"])
def test_discriminator_loss_gradients_by_sharing_mode(sharing):
    """No gradient through sampling into the generator's layers, ever; into the generator's token table only when the
    table is plainly shared (GDES: E_D = sg(E_G) + E_delta stops it, and E_delta takes it)."""
    module = _grads_of_rtd_loss(_module(sharing))
    head = [module.lm_head.dense.weight, module.lm_head.norm.weight, module.lm_head.bias]  # (its weight is the table)
    gen_layers = [p.grad for p in [*module.generator.layers.parameters(), *head]]
    assert all(g is None or not g.any() for g in gen_layers)
    gen_token = module.generator.embeddings.token.weight.grad
    disc_layers = [p.grad for p in module.backbone.layers.parameters()]
    assert all(g is not None and g.any() for g in disc_layers)
    if sharing == "shared":
        assert module.backbone.embeddings.token is module.generator.embeddings.token
        assert gen_token is not None and gen_token.any()
    else:
        assert gen_token is None or not gen_token.any()
    if sharing == "gdes":
        assert module.backbone.embeddings.token.delta.grad.any()
        # the generator's own MLM loss still trains the table the discriminator reads
        module.zero_grad(set_to_none=True)
        module.compute_loss(_batch()[0])["mlm_loss"].backward()
        assert module.generator.embeddings.token.weight.grad.any()


def test_sharing_modes_differ_in_parameter_count():
    counts = {m: sum(p.numel() for p in _module(m).parameters()) for m in ("shared", "gdes", "none")}
    table = 101 * 64
    assert counts["gdes"] - counts["shared"] == table  # E_delta
    # separate token, position and segment tables and embedding norm
    assert counts["none"] - counts["shared"] == table + 256 * 64 + 2 * 64 + 2 * 64


def test_bad_switches_are_config_errors():
    with pytest.raises(ConfigError, match="embedding_sharing"):
        ELECTRA(backbone="tiny", vocab_size=101, embedding_sharing="tied")
    with pytest.raises(ConfigError, match="sampling_temperature"):
        ELECTRA(backbone="tiny", vocab_size=101, sampling_temperature=0.0)
