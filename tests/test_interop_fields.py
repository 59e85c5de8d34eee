"""No silent approximation at import: every field of every transformers config class we import is honoured (and a
parity variant below gives it a non-default value), refused off its supported values with one line, or inert for a
stated reason (``plm_lightning.interop.fields``). The fields are enumerated from the config classes themselves, so a
field a later transformers release adds fails here until it is classified."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from plm_lightning.errors import ConfigError  # noqa: E402
from plm_lightning.interop import export_checkpoint  # noqa: E402
from plm_lightning.interop.fields import FIELDS, Fixed, Honoured, Inert  # noqa: E402
from plm_lightning.interop.hf import config_from_hf  # noqa: E402
from plm_lightning.nn.stack_inputs import text_inputs  # noqa: E402
from plm_lightning.objectives import Seq2SeqLM  # noqa: E402
from plm_lightning.objectives.loading import import_hf  # noqa: E402
from tests.conftest import decoder_logits, seq2seq_batch  # noqa: E402
from tests.test_parity import TOL, _close, _hf_logits, _inputs, _load_module, _ours_logits  # noqa: E402

CLASSES = {"bert": "BertConfig", "roberta": "RobertaConfig", "albert": "AlbertConfig", "electra": "ElectraConfig",
           "deberta-v2": "DebertaV2Config", "modernbert": "ModernBertConfig", "gpt2": "GPT2Config",
           "t5": "T5Config", "mt5": "MT5Config", "bart": "BartConfig", "xlnet": "XLNetConfig"}
ENC = dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
DROP = dict(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05, layer_norm_eps=1e-6)
DEBERTA = dict(**ENC, max_position_embeddings=64, relative_attention=True, position_buckets=8, max_relative_positions=32,
               pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", **DROP)
T5 = dict(vocab_size=101, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4,
          relative_attention_num_buckets=8, relative_attention_max_distance=20, eos_token_id=1, dropout_rate=0.2,
          layer_norm_epsilon=1e-5, initializer_factor=0.5)

# (model type, transformers model class, config keyword arguments): each a parity check below
VARIANTS = [
    ("bert", "BertForPreTraining", dict(**ENC, **DROP, max_position_embeddings=40, hidden_act="relu",
                                        type_vocab_size=3, pad_token_id=3)),
    ("bert", "BertForMaskedLM", dict(**ENC, max_position_embeddings=40, hidden_act="silu")),
    ("roberta", "RobertaForMaskedLM", dict(**ENC, **DROP, max_position_embeddings=66, hidden_act="relu",
                                           type_vocab_size=1, pad_token_id=3)),
    ("roberta", "RobertaForMaskedLM", dict(**ENC, max_position_embeddings=66)),  # transformers' default: 2 types
    ("albert", "AlbertForPreTraining", dict(**ENC, **DROP, embedding_size=16, max_position_embeddings=40,
                                            hidden_act="gelu", type_vocab_size=3, pad_token_id=3)),
    ("electra", "ElectraForPreTraining", dict(**ENC, **DROP, embedding_size=16, max_position_embeddings=40,
                                              hidden_act="relu", pad_token_id=3, type_vocab_size=3)),
    # an unfactorized generator: its head applies gelu whatever hidden_act says
    ("electra", "ElectraForMaskedLM", dict(**ENC | {"num_attention_heads": 2}, embedding_size=32,
                                           max_position_embeddings=40, hidden_act="relu")),
    ("deberta-v2", "DebertaV2ForMaskedLM", dict(**DEBERTA, position_biased_input=False, share_att_key=True,
                                                conv_kernel_size=3, conv_act="gelu", legacy=False,
                                                type_vocab_size=2, hidden_act="relu", pad_token_id=3)),
    ("deberta-v2", "DebertaV2ForMaskedLM", dict(**DEBERTA, position_biased_input=True, legacy=True)),
    ("modernbert", "ModernBertForMaskedLM", dict(
        **ENC | {"num_hidden_layers": 3}, local_attention=8, global_attn_every_n_layers=2, norm_bias=True,
        attention_bias=True, mlp_bias=True, classifier_bias=True, norm_eps=1e-6, max_position_embeddings=512,
        attention_dropout=0.2, embedding_dropout=0.3, initializer_range=0.05, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, cls_token_id=1, sep_token_id=2,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}})),
    ("modernbert", "ModernBertForMaskedLM", dict(  # the bias switches apart
        **ENC, local_attention=8, norm_bias=True, attention_bias=False, mlp_bias=True, classifier_bias=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)),
    ("modernbert", "ModernBertForMaskedLM", dict(
        **ENC, local_attention=8, norm_bias=False, attention_bias=True, mlp_bias=False, classifier_bias=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)),
    ("gpt2", "GPT2LMHeadModel", dict(vocab_size=101, n_embd=32, n_layer=3, n_head=4, n_positions=64, n_inner=40,
                                     activation_function="gelu", scale_attn_by_inverse_layer_idx=True,
                                     layer_norm_epsilon=1e-6, resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.3,
                                     initializer_range=0.05, bos_token_id=100, eos_token_id=100)),
    ("gpt2", "GPT2LMHeadModel", dict(vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     activation_function="relu", reorder_and_upcast_attn=True,
                                     scale_attn_weights=False, bos_token_id=100, eos_token_id=100)),
    ("t5", "T5ForConditionalGeneration", dict(**T5, feed_forward_proj="gated-silu", tie_word_embeddings=False,
                                              pad_token_id=3, decoder_start_token_id=3)),
    ("t5", "T5ForConditionalGeneration", dict(**T5, feed_forward_proj="gelu", scale_decoder_outputs=False,
                                              pad_token_id=0)),
    ("mt5", "MT5ForConditionalGeneration", dict(**T5, feed_forward_proj="gated-silu", pad_token_id=3,
                                                decoder_start_token_id=3, tie_word_embeddings=False)),
    ("bart", "BartForConditionalGeneration", dict(
        vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64, init_std=0.2,
        scale_embedding=True, activation_function="relu", dropout=0.2, attention_dropout=0.3, activation_dropout=0.1,
        pad_token_id=3, bos_token_id=0, eos_token_id=5, decoder_start_token_id=5)),
    ("xlnet", "XLNetLMHeadModel", dict(vocab_size=101, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=48,
                                       ff_activation="relu", clamp_len=5, layer_norm_eps=1e-6, dropout=0.2,
                                       mem_len=8, bi_data=True, initializer_range=0.05, pad_token_id=3)),
]


def _config(model_type: str, kwargs: dict):
    return getattr(transformers, CLASSES[model_type])(**kwargs)


def _class_fields(model_type: str) -> set[str]:
    return set(getattr(transformers, CLASSES[model_type])().to_dict()) - {"model_type"}


@pytest.mark.parametrize("model_type", CLASSES)
def test_every_field_of_the_config_class_is_classified(model_type):
    unclassified = _class_fields(model_type) - set(FIELDS[model_type])
    assert not unclassified, f"classify {sorted(unclassified)} in plm_lightning/interop/fields.py"
    assert all(isinstance(rule, Honoured | Fixed | Inert) for rule in FIELDS[model_type].values())


def _off(value):
    """A value that is not ``value`` (of a plausible type)."""
    if isinstance(value, bool):
        return not value
    if value is None or isinstance(value, int):
        return 7 if value in (None, 0, 1) else value + 5
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return "relative_key" if value == "absolute" else value + "-other"
    if isinstance(value, dict):
        return {"0": [1]}
    return ["c2p"]


@pytest.mark.parametrize("model_type", CLASSES)
def test_a_fixed_field_off_its_values_is_refused_in_one_line(model_type):
    """Each Fixed field, set off its values in an otherwise importable config, is one ConfigError naming it."""
    kwargs = next(k for t, _, k in VARIANTS if t == model_type)
    base = _config(model_type, kwargs).to_dict()
    config_from_hf(base)  # the base imports
    fixed = {k: r for k, r in FIELDS[model_type].items() if isinstance(r, Fixed)}
    assert fixed
    for field, rule in fixed.items():
        bad = _off(rule.values[0])
        assert bad not in rule.values
        with pytest.raises(ConfigError, match=rf"{field}=") as err:
            config_from_hf({**base, field: bad})
        assert "\n" not in str(err.value) and repr(bad) in str(err.value)


@pytest.mark.parametrize("model_type", CLASSES)
def test_every_honoured_field_has_a_non_default_parity_variant(model_type):
    default = getattr(transformers, CLASSES[model_type])().to_dict()
    # a field counts when the saved config or the class's arguments (T5Config rewrites tie_word_embeddings) move it
    saved = [({**_config(t, k).to_dict(), "architectures": [arch]}, k) for t, arch, k in VARIANTS if t == model_type]
    honoured = {k for k, r in FIELDS[model_type].items() if isinstance(r, Honoured)} & _class_fields(model_type)
    uncovered = {f for f in honoured
                 if all(c.get(f) == default.get(f) and k.get(f, default.get(f)) == default.get(f) for c, k in saved)}
    assert not uncovered, f"add a variant with a non-default {sorted(uncovered)} to VARIANTS"


def _spread(model):
    torch.manual_seed(0)
    with torch.no_grad():  # off their initial values: a swapped or missing tensor cannot hide under the tolerance
        for name, p in model.named_parameters():
            if p.ndim == 1 or "layer_norm" in name.lower() or name.endswith((".r_w_bias", ".r_r_bias", ".r_s_bias",
                                                                             ".seg_embed", "mask_emb")):
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.mul_(3.0)
    return model.eval()


def _logits_both(model_type, hf, ours):
    """(ours, theirs, real-token mask) on one batch: right-padded rows for encoders."""
    if model_type in ("t5", "mt5", "bart"):
        pad = hf.config.pad_token_id
        start = getattr(hf.config, "decoder_start_token_id", None)
        start = pad if start is None else start
        batch = seq2seq_batch(pad_id=pad, start_id=start)
        with torch.no_grad():
            theirs = hf(**batch).logits
        return decoder_logits(ours, batch), theirs, torch.ones(theirs.shape[:2], dtype=torch.bool)
    if model_type == "xlnet":
        ids, types, mask = torch.randint(4, 100, (2, 12), generator=torch.Generator().manual_seed(1)), None, None
        types = torch.zeros_like(ids)
        types[:, 6:] = 1
        mask = torch.ones_like(ids)
        with torch.no_grad():
            theirs = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
            out = ours.backbone(ids, text_inputs(ours.backbone, mask, types))
            return ours.lm_head(out.last_hidden_state), theirs, mask.bool()
    kind = {"gpt2": "gpt2", "roberta": "roberta"}.get(model_type, "bert")
    ids, mask, types = _inputs(kind)
    if kind != "gpt2":  # padding where the mask says so, and only there
        pad = hf.config.pad_token_id
        ids = torch.where(mask == 0, pad, torch.where(ids == pad, 4, ids))
    if getattr(hf.config, "type_vocab_size", 0) < 2 or model_type in ("roberta", "modernbert"):
        types = torch.zeros_like(ids)  # transformers' RoBERTa/ModernBERT/GPT-2 calls pass no segments
    ours_logits, _ = _ours_logits(ours, ids, mask, types)
    theirs, _ = _hf_logits(hf, ids, mask, types)
    return ours_logits, theirs, mask.bool()


CARRIED_CHECKED = 0


@pytest.mark.parametrize("variant", range(len(VARIANTS)),
                         ids=[f"{t}-{a}-{i}" for i, (t, a, _) in enumerate(VARIANTS)])
def test_a_variant_imports_and_exports_as_transformers_computes(variant, tmp_path):
    model_type, arch, kwargs = VARIANTS[variant]
    hf = _spread(getattr(transformers, arch)(_config(model_type, kwargs)))
    hf.save_pretrained(tmp_path / "hf")
    info = import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ckpt = torch.load(tmp_path / "ours.ckpt", weights_only=True)
    if info["objective"] == "Seq2SeqLM":
        hparams = {k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")}
        ours = Seq2SeqLM(**hparams).eval()
        ours.load_state_dict(ckpt["state_dict"])
    else:
        ours = _load_module(tmp_path / "ours.ckpt")
    saved = json.loads((tmp_path / "hf" / "config.json").read_text())
    for field, rule in FIELDS[model_type].items():  # what eval logits cannot show: carried into our config
        if isinstance(rule, Honoured) and rule.carried and field in saved:
            assert getattr(ours.config, rule.carried) == saved[field], field

    a, b, real = _logits_both(model_type, hf, ours)
    assert b.std() > 0.1  # spread weights: logits far from uniform
    assert _close(a, b, real) <= TOL

    export_checkpoint(tmp_path / "ours.ckpt", tmp_path / "exported")  # and back, as the family it came from
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["architectures"] == [arch]
    again = getattr(transformers, arch).from_pretrained(tmp_path / "exported").eval()
    _, c, real = _logits_both(model_type, again, ours)
    assert _close(c, b, real) <= TOL


SHIFT_INVARIANT = [i for i, (t, _, k) in enumerate(VARIANTS)
                   if t in ("roberta", "modernbert") or (t == "deberta-v2" and not k["position_biased_input"])]


@pytest.mark.parametrize("variant", SHIFT_INVARIANT, ids=[VARIANTS[i][0] + f"-{i}" for i in SHIFT_INVARIANT])
def test_a_row_left_padded_right_padded_or_alone_gives_the_same_logits(variant, tmp_path):
    """Where transformers numbers positions from the first real token or uses relative positions only (RoBERTa,
    DeBERTa without absolute positions, ModernBERT's rotary ones), a row's logits do not depend on its padding, in
    ours as in theirs."""
    model_type, arch, kwargs = VARIANTS[variant]
    hf = _spread(getattr(transformers, arch)(_config(model_type, kwargs)))
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ours = _load_module(tmp_path / "ours.ckpt")
    pad = hf.config.pad_token_id
    row = torch.randint(4, 100, (9,), generator=torch.Generator().manual_seed(2))
    row[row == pad] = 4
    alone = row[None]
    right = torch.cat([row, torch.full((5,), pad)])[None]
    left = torch.cat([torch.full((5,), pad), row])[None]
    results = []
    for ids, keep in ((alone, slice(0, 9)), (right, slice(0, 9)), (left, slice(5, 14))):
        mask = (torch.arange(ids.shape[1]) >= keep.start) & (torch.arange(ids.shape[1]) < keep.stop)
        mask = mask.long()[None]
        types = torch.zeros_like(ids)
        a, _ = _ours_logits(ours, ids, mask, types)
        b, _ = _hf_logits(hf, ids, mask, types)
        assert (a[0, keep] - b[0, keep]).abs().max() <= TOL
        results.append(a[0, keep])
    assert (results[1] - results[0]).abs().max() <= TOL and (results[2] - results[0]).abs().max() <= TOL


def _bad_hf_dirs(root):
    """(name, HF directory, command-line tail) of broken transformers directories and output paths."""
    good = root / "good"
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**ENC, max_position_embeddings=40))
    hf.save_pretrained(good)
    config = json.loads((good / "config.json").read_text())
    cases = {}

    def variant(name, config_text=None, weights=None):
        directory = root / name
        directory.mkdir()
        (directory / "config.json").write_text(config_text if config_text is not None else json.dumps(config))
        (directory / "model.safetensors").write_bytes(weights if weights is not None
                                                      else (good / "model.safetensors").read_bytes())
        cases[name] = directory

    variant("broken-json", "{not json")
    variant("json-list", "[1, 2]")
    variant("latin-1")  # not UTF-8
    (cases["latin-1"] / "config.json").write_bytes(json.dumps(config, ensure_ascii=False)
                                                   .replace("{", '{"x": "caf\u00e9", ', 1).encode("latin-1"))
    variant("no-hidden-size", json.dumps({k: v for k, v in config.items() if k != "hidden_size"}))
    variant("more-layers", json.dumps({**config, "num_hidden_layers": 3}))
    variant("huge-vocab", json.dumps({**config, "vocab_size": 10**9}))
    variant("random-weights", None, bytes(range(256)) * 40)
    variant("zero-heads", json.dumps({**config, "num_attention_heads": 0}))
    variant("fixed-field", json.dumps({**config, "is_decoder": True}))
    return good, cases


def test_a_broken_transformers_directory_is_one_line_at_the_cli(tmp_path):
    from tests.conftest import run_cli

    good, cases = _bad_hf_dirs(tmp_path)
    (tmp_path / "a-file").write_text("x")
    runs = {name: ["import", str(d), str(tmp_path / f"{name}.ckpt")] for name, d in cases.items()}
    runs["out-under-a-file"] = ["import", str(good), str(tmp_path / "a-file" / "out.ckpt")]
    for name, args in runs.items():
        res = run_cli(args, cwd=tmp_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2, (name, res.stderr[-1500:])
        assert len(lines) == 1 and lines[0].startswith("plm_lightning: error: import"), (name, res.stderr[-1500:])
        assert "Traceback" not in res.stderr and not (tmp_path / f"{name}.ckpt").exists(), name
    assert (tmp_path / "a-file").read_text() == "x"
