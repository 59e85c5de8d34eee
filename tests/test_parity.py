"""Numerical parity with Hugging Face transformers: random HF models imported into ours, ours exported into HF,
both through the real `import` / `export` code paths (files on disk), same logits to 1e-4."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from plm_lightning.checkpoint_format import CHECKPOINT_KEY  # noqa: E402
from plm_lightning.interop import export_checkpoint  # noqa: E402
from plm_lightning.objectives import ELECTRA, CausalLM, MaskedLM, PermutationLM  # noqa: E402
from plm_lightning.objectives.loading import import_hf  # noqa: E402

TOL = 1e-4
SMALL = dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)


def _hf(kind):
    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(**SMALL, max_position_embeddings=64)
        model = transformers.BertForPreTraining(cfg)
    elif kind == "roberta":
        cfg = transformers.RobertaConfig(**SMALL, max_position_embeddings=66, pad_token_id=1, type_vocab_size=1)
        model = transformers.RobertaForMaskedLM(cfg)
    elif kind == "albert":
        cfg = transformers.AlbertConfig(**SMALL, embedding_size=16, max_position_embeddings=64, hidden_act="gelu_new")
        model = transformers.AlbertForPreTraining(cfg)
    elif kind == "modernbert":
        ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
        cfg = transformers.ModernBertConfig(**{**SMALL, "num_hidden_layers": 3}, local_attention=8, **ids)
        model = transformers.ModernBertForMaskedLM(cfg)
    elif kind.startswith("deberta"):
        v3 = kind == "deberta-v3"  # v3: shared position/content projections, the released (non-legacy) MLM head;
        # v2: separate projections + convolution, the legacy head
        cfg = transformers.DebertaV2Config(legacy=not v3, **SMALL, max_position_embeddings=64, relative_attention=True,
                                           position_buckets=8, max_relative_positions=32, pos_att_type=["p2c", "c2p"],
                                           position_biased_input=False, norm_rel_ebd="layer_norm", share_att_key=v3,
                                           conv_kernel_size=0 if v3 else 3, conv_act="gelu", type_vocab_size=0 if v3 else 2)
        model = transformers.DebertaV2ForMaskedLM(cfg)
    elif kind == "electra":
        cfg = transformers.ElectraConfig(**SMALL, embedding_size=16, max_position_embeddings=64)
        model = transformers.ElectraForPreTraining(cfg)
    elif kind == "electra-generator":
        cfg = transformers.ElectraConfig(vocab_size=101, hidden_size=8, num_hidden_layers=2, num_attention_heads=1,
                                         intermediate_size=32, embedding_size=16, max_position_embeddings=64)
        model = transformers.ElectraForMaskedLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                      bos_token_id=100, eos_token_id=100)
        model = transformers.GPT2LMHeadModel(cfg)
    # non-trivial norms and biases, and weights 5x the init scale so attention is far from uniform and position
    # terms move the logits: a swapped, missing or mis-indexed tensor cannot hide under the tolerance
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.mul_(5.0)
    return model.eval()


def _inputs(kind):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (2, 17), generator=g)
    mask = torch.ones(2, 17, dtype=torch.long)
    if kind != "gpt2":
        mask[1, 12:] = 0
        ids[1, 12:] = 1 if kind == "roberta" else 0
    types = torch.zeros_like(ids)
    if kind in ("bert", "albert", "electra", "electra-generator", "deberta-v2"):
        types[:, 9:] = 1
    return ids, mask, types


def _ours_logits(module, ids, mask, types):
    """(token logits, sentence logits or None) of our module, whichever head it has."""
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    with torch.no_grad():
        if isinstance(module, CausalLM):
            hidden = module.backbone(ids).last_hidden_state
            return module.lm_head(hidden), None
        if isinstance(module, ELECTRA):
            return module.rtd_head(module.run_stack(module.backbone, batch)), None
        hidden = module.encode(batch)
        sentence = module.sentence_head(hidden) if module.sentence_head is not None else None
        return module.lm_head(hidden), sentence


def _hf_logits(model, ids, mask, types):
    with torch.no_grad():
        if isinstance(model, transformers.GPT2LMHeadModel):
            return model(input_ids=ids).logits, None
        no_types = (transformers.RobertaForMaskedLM, transformers.ModernBertForMaskedLM)
        if isinstance(model, transformers.DebertaV2ForMaskedLM) and model.config.type_vocab_size == 0:
            no_types = transformers.DebertaV2ForMaskedLM
        kwargs = {} if isinstance(model, no_types) else {"token_type_ids": types}
        out = model(input_ids=ids, attention_mask=mask, **kwargs)
        if isinstance(model, transformers.BertForPreTraining):
            return out.prediction_logits, out.seq_relationship_logits
        if isinstance(model, transformers.AlbertForPreTraining):
            return out.prediction_logits, out.sop_logits
        return out.logits, None


def _load_module(ckpt_path):
    """Plain Lightning's loader: an imported checkpoint opens as any checkpoint does (every weight, strictly), and
    it names no class for a loader to import."""
    ckpt = torch.load(ckpt_path, weights_only=True)
    cls = {"MaskedLM": MaskedLM, "CausalLM": CausalLM, "ELECTRA": ELECTRA,
           "PermutationLM": PermutationLM}[ckpt[CHECKPOINT_KEY]["objective"]]
    assert not [k for k in ckpt["hyper_parameters"] if k.startswith("_")]
    return cls.load_from_checkpoint(ckpt_path, map_location="cpu").eval()


def _close(a, b, mask):
    real = mask.bool()
    return (a[real] - b[real]).abs().max().item()


HF_KINDS = ["bert", "roberta", "albert", "electra", "electra-generator", "modernbert", "deberta-v2", "deberta-v3",
            "gpt2"]


@pytest.mark.parametrize("kind", HF_KINDS)
def test_import_then_export_matches_transformers(kind, tmp_path):
    hf = _hf(kind)
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ours = _load_module(tmp_path / "ours.ckpt")
    ids, mask, types = _inputs(kind)
    (a, a_nsp), (b, b_nsp) = _ours_logits(ours, ids, mask, types), _hf_logits(hf, ids, mask, types)
    assert _close(a, b, mask) <= TOL
    if b_nsp is not None:
        assert (a_nsp - b_nsp).abs().max() <= TOL

    # and back: our checkpoint exported loads in transformers with the same logits
    export_checkpoint(tmp_path / "ours.ckpt", tmp_path / "exported")
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config["architectures"][0] == type(hf).__name__
    again = transformers.AutoConfig.from_pretrained(tmp_path / "exported")
    reloaded = getattr(transformers, config["architectures"][0]).from_pretrained(tmp_path / "exported", config=again).eval()
    c, c_nsp = _hf_logits(reloaded, ids, mask, types)
    assert _close(c, b, mask) <= TOL
    if b_nsp is not None:
        assert (c_nsp - b_nsp).abs().max() <= TOL


@pytest.mark.parametrize("kind", ["bert", "roberta", "albert", "modernbert", "gpt2"])
def test_trained_checkpoint_exports_to_transformers(kind, tmp_path):
    """A model built the way our recipes build it (random init, our tokenizer roles) loads in transformers."""
    torch.manual_seed(3)
    if kind == "gpt2":
        module = CausalLM(backbone="tiny-gpt", vocab_size=101)
    elif kind == "bert":
        module = MaskedLM(backbone="tiny", vocab_size=101, sentence_prediction="nsp")
    elif kind == "albert":
        module = MaskedLM(backbone="tiny-albert", vocab_size=101, sentence_prediction="sop")
    elif kind == "modernbert":
        module = MaskedLM(backbone="tiny-modernbert", vocab_size=101, backbone_overrides={"local_attention_window": 8,
                                                                                          "pad_token_id": 0})
    else:
        module = MaskedLM(backbone="tiny", vocab_size=101, backbone_overrides={"type_vocab_size": 1, "pad_token_id": 1})
    module.eval()
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
            CHECKPOINT_KEY: {"objective": type(module).__name__, "backbone": module.config.to_dict()}}
    torch.save(ckpt, tmp_path / "m.ckpt")
    export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    hf = getattr(transformers, config["architectures"][0]).from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = _inputs(kind)
    if kind == "gpt2":
        mask = torch.ones_like(mask)
    (a, a_nsp), (b, b_nsp) = _ours_logits(module, ids, mask, types), _hf_logits(hf, ids, mask, types)
    assert _close(a, b, mask) <= TOL
    if b_nsp is not None:
        assert (a_nsp - b_nsp).abs().max() <= TOL


def _save_perturbed(module, path):
    """Perturb every parameter (GDES residuals and biases non-zero), switch to eval and save as our checkpoint."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    module.eval()
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                CHECKPOINT_KEY: {"objective": type(module).__name__, "backbone": module.config.to_dict()}}, path)


@pytest.mark.parametrize("sharing", ["shared", "gdes", "none"])
def test_electra_exports_discriminator_and_generator(sharing, tmp_path):
    """An ELECTRA trained here exports its discriminator (ElectraForPreTraining) and its generator
    (ElectraForMaskedLM), each with the same logits as in our module; importing both back restores the module."""
    torch.manual_seed(4)
    module = ELECTRA(backbone="tiny", vocab_size=101, embedding_sharing=sharing,
                     backbone_overrides={"embedding_size": 32})
    _save_perturbed(module, tmp_path / "m.ckpt")
    assert export_checkpoint(tmp_path / "m.ckpt", tmp_path / "disc") == "ElectraForPreTraining"
    assert export_checkpoint(tmp_path / "m.ckpt", tmp_path / "gen", part="generator") == "ElectraForMaskedLM"
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "disc").eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "gen").eval()
    ids, mask, types = _inputs("electra")
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    with torch.no_grad():
        ours_rtd = module.rtd_head(module.run_stack(module.backbone, batch))
        ours_mlm = module.lm_head(module.run_stack(module.generator, batch))
    assert _close(ours_rtd, _hf_logits(disc, ids, mask, types)[0], mask) <= TOL
    assert _close(ours_mlm, _hf_logits(gen, ids, mask, types)[0], mask) <= TOL
    if sharing == "shared":  # one table: importing discriminator + generator gives back the same module
        import_hf(tmp_path / "disc", tmp_path / "back.ckpt", generator_dir=tmp_path / "gen")
        back = _load_module(tmp_path / "back.ckpt")
        assert back.generator_size_divisor == 4 and back.generator_cfg == module.generator_cfg
        a, _ = _ours_logits(back, ids, mask, types)
        assert _close(a, ours_rtd, mask) <= TOL
        with torch.no_grad():
            assert _close(back.lm_head(back.run_stack(back.generator, batch)), ours_mlm, mask) <= TOL


def test_continued_pretraining_from_a_transformers_directory(tmp_path):
    """``init_from`` a BertForPreTraining directory into an MLM-only recipe: the backbone and MLM head load exactly
    (same logits), the NSP head is dropped with a warning."""
    hf = _hf("bert")
    hf.save_pretrained(tmp_path / "hf")
    with pytest.warns(UserWarning, match="sentence_head"):
        module = MaskedLM(backbone="tiny", init_from=str(tmp_path / "hf")).eval()
    assert module.sentence_head is None and module.config.hidden_size == 32
    ids, mask, types = _inputs("bert")
    assert _close(_ours_logits(module, ids, mask, types)[0], _hf_logits(hf, ids, mask, types)[0], mask) <= TOL
    with pytest.raises(Exception, match="holds a MaskedLM checkpoint; this recipe's objective is ELECTRA"):
        ELECTRA(backbone="tiny", init_from=str(tmp_path / "hf"))


def test_deberta_v3_exports_encoder_and_generator(tmp_path):
    """DeBERTaV3 (ELECTRA + GDES over DeBERTa): the discriminator exports as DebertaV2Model (same hidden states, the
    GDES table materialised as E_G + E_delta), the generator as DebertaV2ForMaskedLM (same logits)."""
    torch.manual_seed(5)
    module = ELECTRA(backbone="tiny-deberta-v3", vocab_size=101, embedding_sharing="gdes", generator_size_divisor=1,
                     generator_num_layers=2)
    _save_perturbed(module, tmp_path / "m.ckpt")
    assert export_checkpoint(tmp_path / "m.ckpt", tmp_path / "disc") == "DebertaV2Model"
    assert export_checkpoint(tmp_path / "m.ckpt", tmp_path / "gen", part="generator") == "DebertaV2ForMaskedLM"
    ids, mask, _ = _inputs("deberta-v3")
    batch = {"input_ids": ids, "attention_mask": mask}
    disc = transformers.DebertaV2Model.from_pretrained(tmp_path / "disc").eval()
    gen = transformers.DebertaV2ForMaskedLM.from_pretrained(tmp_path / "gen").eval()
    with torch.no_grad():
        assert _close(module.run_stack(module.backbone, batch), disc(input_ids=ids, attention_mask=mask)
                      .last_hidden_state, mask) <= TOL
        assert _close(module.lm_head(module.run_stack(module.generator, batch)),
                      gen(input_ids=ids, attention_mask=mask).logits, mask) <= TOL


def test_imported_and_trained_checkpoints_validate_in_plain_lightning(tmp_path):
    """``MaskedLM.load_from_checkpoint`` opens an imported checkpoint and a trained one, and ``trainer.validate``
    runs on both (the imported model's tokenizer directory feeds the DataModule)."""
    import itertools

    import lightning as L

    from plm_lightning.corpus.sources import embedded_corpus
    from plm_lightning.corpus.tokenizer import train_tokenizer
    from plm_lightning.data import MaskedLMDataModule

    tok = train_tokenizer("wordpiece", list(itertools.islice(embedded_corpus(), 150)), 800)
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**{**SMALL, "vocab_size": tok.vocab_size},
                                                              max_position_embeddings=64, pad_token_id=tok.ids["pad"]))
    hf.save_pretrained(tmp_path / "hf")
    tok.save(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "imported.ckpt")

    def validate(model):
        data = MaskedLMDataModule(tokenizer=str(tmp_path / "hf"), seq_len=32, batch_size=4,
                                  cache_dir=str(tmp_path / "cache"))
        trainer = L.Trainer(accelerator="cpu", limit_val_batches=2, max_steps=2, limit_train_batches=2, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
        return trainer, data, trainer.validate(model, data, verbose=False)[0]

    _, _, imported = validate(MaskedLM.load_from_checkpoint(tmp_path / "imported.ckpt", map_location="cpu"))
    assert 0 < imported["val/loss"] < 2 * torch.log(torch.tensor(float(tok.vocab_size)))

    trainer, data, _ = validate(MaskedLM(backbone="tiny", vocab_size=tok.vocab_size, sentence_prediction="none"))
    trained = MaskedLM(backbone="tiny", vocab_size=tok.vocab_size, sentence_prediction="none")
    trainer.fit(trained, data)
    trainer.save_checkpoint(tmp_path / "trained.ckpt")
    reopened = MaskedLM.load_from_checkpoint(tmp_path / "trained.ckpt", map_location="cpu")
    assert torch.load(tmp_path / "trained.ckpt", weights_only=True)[CHECKPOINT_KEY]["family"] == "bert"
    _, _, again = validate(reopened)
    assert again["val/loss"] > 0
