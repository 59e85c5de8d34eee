"""Transfer techniques: ULMFiT's discriminative rates and slanted triangular schedule match their formulas, gradual
unfreezing freezes what it says, adapters leave the pretrained weights untouched, concat pooling pools."""

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.finetune import ClassificationDataModule, SequenceClassifier
from plm_lightning.finetune.transfer import (
    Transfer,
    discriminative_param_groups,
    layer_groups,
    set_trainable_groups,
    slanted_triangular,
    unfrozen_groups,
)
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import tiny_pretrained


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_pretrained(tmp_path_factory.mktemp("pretrained") / "bert.ckpt", "bert")


def test_discriminative_rates_divide_by_2_6_per_layer_downward(bert):
    model = SequenceClassifier(init_from=bert, transfer=Transfer(layer_lr_decay=1 / 2.6))
    groups = discriminative_param_groups(model, 1e-3, 1 / 2.6, 0.01)
    top = len(layer_groups(model)) - 1  # embeddings, 2 blocks, head = 4 groups
    assert top == 3
    lr_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert lr_of[id(named["classifier.weight"])] == pytest.approx(1e-3)
    assert lr_of[id(named["backbone.layers.1.ffn.fc_in.weight"])] == pytest.approx(1e-3 / 2.6)
    assert lr_of[id(named["backbone.layers.0.ffn.fc_in.weight"])] == pytest.approx(1e-3 / 2.6 ** 2)
    assert lr_of[id(named["backbone.embeddings.token.weight"])] == pytest.approx(1e-3 / 2.6 ** 3)
    assert len(lr_of) == len(named)  # every parameter in exactly one group
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert decay[id(named["classifier.bias"])] == 0.0 and decay[id(named["classifier.weight"])] == 0.01


def test_slanted_triangular_is_ulmfit_equation_3():
    total, cut_frac, ratio = 1000, 0.1, 32
    factor = slanted_triangular(total, cut_frac, ratio)
    cut = 100
    for t in (0, 37, 100, 101, 550, 999, 1000):
        p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
        assert factor(t) == pytest.approx((1 + p * (ratio - 1)) / ratio)
    assert factor(0) == pytest.approx(1 / 32) and factor(100) == pytest.approx(1.0)
    assert factor(1000) == pytest.approx(1 / 32)


def test_gradual_unfreezing_trains_the_top_groups_only(bert):
    model = SequenceClassifier(init_from=bert, transfer=Transfer(unfreeze_every=10))
    groups = layer_groups(model)
    for step, expect in ((0, 1), (9, 1), (10, 2), (25, 3), (30, 4), (500, 4)):
        count = unfrozen_groups(step, 10, len(groups))
        assert count == expect
        set_trainable_groups(model, count)
        for depth, params in enumerate(groups):
            assert all(p.requires_grad == (depth >= len(groups) - count) for _, p in params), (step, depth)


def _train(model, steps=5):
    data = ClassificationDataModule(max_length=48)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    batch = data.collate(data.examples["train"][:8])
    optimizer = torch.optim.AdamW(discriminative_param_groups(model, 1e-2, 1.0, 0.01))
    for _ in range(steps):
        set_trainable_groups(model, len(layer_groups(model)))
        _, loss = model.step(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return batch


def test_adapters_leave_the_pretrained_weights_untouched(bert):
    torch.manual_seed(0)
    plain = SequenceClassifier(init_from=bert).eval()
    torch.manual_seed(0)
    model = SequenceClassifier(init_from=bert, transfer=Transfer(adapter_size=8))
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)  # the same head weights
    assert not unexpected and all("adapter_" in k for k in missing)
    model.eval()
    probe = torch.randint(5, 300, (2, 12))
    with torch.no_grad():  # adapters start as the identity: the same function as without them
        torch.testing.assert_close(model(probe), plain(probe))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    _train(model)
    after = model.state_dict()
    frozen = [k for k in before if k.startswith("backbone.") and "adapter_" not in k and "norm" not in k]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    assert not torch.equal(before["backbone.layers.0.adapter_ffn.up.weight"], after["backbone.layers.0.adapter_ffn.up.weight"])
    assert not torch.equal(before["classifier.weight"], after["classifier.weight"])
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable < 0.2 * sum(p.numel() for p in model.parameters())


def test_concat_pooling_is_last_max_and_mean(bert):
    model = SequenceClassifier(init_from=bert, pooling="concat").eval()
    assert model.classifier.in_features == 3 * model.backbone_config.hidden_size
    from plm_lightning.finetune.classification import concat_pooling

    hidden = torch.tensor([[[1.0, -1.0], [3.0, 5.0], [100.0, 100.0]]])
    pooled = concat_pooling(hidden, torch.tensor([[1, 1, 0]]))
    assert pooled.tolist() == [[3.0, 5.0, 3.0, 5.0, 2.0, 2.0]]
    _train(model, steps=2)


def test_transfer_options_are_checked():
    with pytest.raises(ConfigError, match="layer_lr_decay=2.6 must be in"):
        Transfer(layer_lr_decay=2.6)
    with pytest.raises(ConfigError, match="schedule='cosine'"):
        Transfer(schedule="cosine")


def test_gpt_auxiliary_lm_objective_adds_lambda_times_the_next_token_loss(tmp_path):
    import torch.nn.functional as F

    gpt = tiny_pretrained(tmp_path / "gpt2.ckpt", "gpt2")
    torch.manual_seed(0)
    model = SequenceClassifier(init_from=gpt, lm_weight=0.5).eval()
    data = ClassificationDataModule(task="offline:continuation", max_length=40)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    batch = data.collate(data.examples["train"][:4])
    with torch.no_grad():
        logits, total = model.step(batch)
        task = model.loss(logits, batch["labels"])
        hidden = model.backbone(batch["input_ids"], StackInputs(attention_mask=batch["attention_mask"])).last_hidden_state
        lm_logits = model.lm_head(hidden)[:, :-1]
        real = batch["attention_mask"].bool()
        keep = real[:, :-1] & real[:, 1:]
        lm = F.cross_entropy(lm_logits[keep], batch["input_ids"][:, 1:][keep])
    torch.testing.assert_close(total, task + 0.5 * lm)
    assert model.lm_head.weight is model.backbone.embeddings.token.weight  # GPT's tied output embedding


def test_auxiliary_lm_objective_needs_a_causal_model(bert):
    with pytest.raises(ConfigError, match="give a causal LM checkpoint"):
        SequenceClassifier(init_from=bert, lm_weight=0.5)
