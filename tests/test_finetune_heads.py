"""Task heads (sequence classification, multiple choice, BIO tagging, extractive QA) on BERT-like and GPT-2 backbones:
a few steps lower the loss; the heads export to and load from the transformers task classes with the same logits;
bad input fails with one-line errors."""

import itertools

import pytest
import torch

from plm_lightning.corpus.sources import embedded_corpus
from plm_lightning.corpus.tokenizer import train_tokenizer
from plm_lightning.errors import ConfigError
from plm_lightning.finetune import (
    ChoiceDataModule,
    ClassificationDataModule,
    MultipleChoice,
    QADataModule,
    SequenceClassifier,
    SpanExtractor,
    TaggingDataModule,
    TokenClassifier,
)
from plm_lightning.interop.io import export_checkpoint
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import tiny_pretrained

HEADS = {"classification": (SequenceClassifier, ClassificationDataModule), "choice": (MultipleChoice, ChoiceDataModule),
         "tagging": (TokenClassifier, TaggingDataModule), "qa": (SpanExtractor, QADataModule)}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrained")
    return {family: tiny_pretrained(root / f"{family}.ckpt", family) for family in ("bert", "gpt2", "bart", "roberta")}


def _ready(head, init_from, **kwargs):
    model_cls, data_cls = HEADS[head]
    model = model_cls(init_from=init_from, **kwargs)
    data = data_cls(max_length=96 if head == "qa" else 64)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    model.check_data(data)
    return model, data


@pytest.mark.parametrize("head,family", [("classification", "bert"), ("classification", "gpt2"),
                                         ("classification", "bart"), ("choice", "bert"),
                                         ("choice", "gpt2"), ("tagging", "bert"), ("tagging", "gpt2"), ("qa", "bert")])
def test_a_few_steps_lower_the_loss(head, family, checkpoints):
    torch.manual_seed(0)
    model, data = _ready(head, checkpoints[family])
    rows = data.examples["train"]
    if head == "classification":  # both classes
        rows = [r for r in rows if r["label"] == 0][:4] + [r for r in rows if r["label"] == 1][:4]
    batch = data.collate(rows[:8])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for _ in range(30 if head == "choice" else 20):  # fit one batch: the head and backbone must be wired to the labels
        _, loss = model.step(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses
    model.eval()
    with torch.no_grad():
        outputs, _ = model.step(batch)
    model.update_metrics(model.val_metrics, batch, outputs)
    scores = {k: float(v) for k, v in model.val_metrics.compute().items()}
    main = {"classification": "val/accuracy", "choice": "val/accuracy", "tagging": "val/token_accuracy",
            "qa": "val/f1"}[head]
    assert scores[main] > 0.6, scores


def _saved(model, path):
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


def _spread(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("backbone."):
                p.normal_(0, 0.5)


PARITY = [("classification", "bert", "BertForSequenceClassification"),
          ("classification", "gpt2", "GPT2ForSequenceClassification"),
          ("tagging", "bert", "BertForTokenClassification"), ("qa", "bert", "BertForQuestionAnswering"),
          ("choice", "bert", "BertForMultipleChoice"), ("classification", "roberta", "RobertaForSequenceClassification"),
          ("tagging", "roberta", "RobertaForTokenClassification"), ("qa", "roberta", "RobertaForQuestionAnswering"),
          ("choice", "roberta", "RobertaForMultipleChoice")]


@pytest.mark.parametrize("head,family,architecture", PARITY)
def test_heads_match_transformers_both_ways(head, family, architecture, checkpoints, tmp_path):
    transformers = pytest.importorskip("transformers")
    model, data = _ready(head, checkpoints[family])
    _spread(model)
    model.eval()
    ckpt = _saved(model, tmp_path / "ft.ckpt")
    assert export_checkpoint(ckpt, tmp_path / "hf") == architecture
    hf = getattr(transformers, architecture).from_pretrained(tmp_path / "hf").eval()
    batch = data.collate(data.examples["validation"][:3])
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    if family == "gpt2":
        inputs.pop("token_type_ids")
    if head == "choice":
        inputs = {k: v.view(3, batch["num_choices"], -1) for k, v in inputs.items()}
    with torch.no_grad():
        ours, _ = model.step(batch)
        if family == "gpt2":  # no pad token distinct from end-of-text: transformers scores one unpadded row at a time
            theirs = torch.cat([hf(input_ids=ids[mask.bool()][None]).logits for ids, mask in
                                zip(inputs["input_ids"], inputs["attention_mask"])])
        else:
            out = hf(**inputs)
            theirs = (out.start_logits, out.end_logits) if head == "qa" else out.logits
    ours_t = torch.stack(ours) if head == "qa" else ours
    theirs_t = torch.stack(theirs) if head == "qa" else theirs
    if head == "qa":  # padding positions are masked in our loss only
        keep = batch["attention_mask"].bool().expand_as(ours_t)
        ours_t, theirs_t = ours_t[keep], theirs_t[keep]
    if head == "tagging":  # RoBERTa gives padding its own position: compare the real tokens
        keep = batch["attention_mask"].bool()
        ours_t, theirs_t = ours_t[keep], theirs_t[keep]
    torch.testing.assert_close(ours_t, theirs_t, atol=1e-4, rtol=1e-4)
    # and back: init_from the transformers directory brings the head along
    model_cls = HEADS[head][0]
    kwargs = {"num_labels": model.hparams.num_labels} if "num_labels" in model.hparams else {}
    back = model_cls(init_from=str(tmp_path / "hf"), **kwargs).eval()
    with torch.no_grad():
        again, _ = back.step(batch)
    torch.testing.assert_close(torch.stack(again) if head == "qa" else again, torch.stack(ours) if head == "qa" else ours)


def test_a_task_model_with_the_wrong_label_count_is_refused(checkpoints, tmp_path):
    model, _ = _ready("classification", checkpoints["bert"])
    export_checkpoint(_saved(model, tmp_path / "ft.ckpt"), tmp_path / "hf")
    with pytest.raises(ConfigError, match="set model.num_labels to 2"):
        SequenceClassifier(init_from=str(tmp_path / "hf"), num_labels=3)
    with pytest.raises(ConfigError, match="no transformers class"):  # GPT-2 has no token-classification head here
        tagger, _ = _ready("tagging", checkpoints["gpt2"])
        export_checkpoint(_saved(tagger, tmp_path / "t.ckpt"), tmp_path / "hf2")


def test_a_tokenizer_that_does_not_fit_the_checkpoint_is_refused(checkpoints, tmp_path):
    big = train_tokenizer("wordpiece", list(itertools.islice(embedded_corpus(), 150)), 2000)
    big.save(tmp_path / "tok")
    with pytest.raises(ConfigError, match=r"has \d+ tokens but the checkpoint's embedding table has \d+ rows"):
        SequenceClassifier(init_from=checkpoints["bert"], tokenizer=str(tmp_path / "tok"))


def test_random_init_keeps_the_architecture_and_drops_the_weights(checkpoints):
    pretrained = SequenceClassifier(init_from=checkpoints["bert"])
    control = SequenceClassifier(init_from=checkpoints["bert"], random_init=True)
    a, b = pretrained.backbone.state_dict(), control.backbone.state_dict()
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    assert not torch.equal(a["layers.0.self_attn.qkv_proj.weight"], b["layers.0.self_attn.qkv_proj.weight"])


def test_extractive_qa_needs_an_encoder(checkpoints):
    with pytest.raises(ConfigError, match="give an encoder"):
        SpanExtractor(init_from=checkpoints["gpt2"])


def test_gpt_similarity_adds_the_representations_of_both_orders(checkpoints):
    from plm_lightning.finetune.classification import pooled_states

    model = SequenceClassifier(init_from=checkpoints["gpt2"]).eval()
    data = ClassificationDataModule(task="offline:continuation", both_orders=True, max_length=48)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    rows = data.examples["train"][:3]
    batch = data.collate(rows)
    eos = model.tokenizer.ids["eos"]
    first = model.tokenizer.encode_batch([rows[0]["text_a"], rows[0]["text_b"]])
    swapped_ids = batch["swapped_input_ids"][0][batch["swapped_attention_mask"][0].bool()].tolist()
    assert swapped_ids == first[1] + [eos] + first[0] + [eos] or len(swapped_ids) == 48
    with torch.no_grad():
        logits, _ = model.step(batch)
        states = [model.backbone(batch[f"{p}input_ids"], StackInputs(attention_mask=batch[f"{p}attention_mask"]))
                  .last_hidden_state for p in ("", "swapped_")]
        one = pooled_states(model, states[0], batch["attention_mask"])
        two = pooled_states(model, states[1], batch["swapped_attention_mask"])
        torch.testing.assert_close(logits, model.classifier(one + two))
    data.both_orders = None  # default: only GLUE's similarity tasks (mrpc, qqp, stsb) on a GPT tokenizer
    assert "swapped_input_ids" not in data.collate(rows)


def test_bart_classifier_reads_the_decoder_at_the_last_token(checkpoints):
    model = SequenceClassifier(init_from=checkpoints["bart"]).eval()
    assert model.pooling == "summary" and model.decoder_start_id == model.tokenizer.ids["eos"]
    ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 1, 1]])
    mask = (torch.arange(5) < torch.tensor([[5], [3]])).long()
    with torch.no_grad():
        logits = model(ids, mask)
        alone = model(ids[1:, :3], mask[1:, :3])  # padding changes nothing
        _, dec = model.backbone(ids[:1], torch.tensor([[model.decoder_start_id, 5, 6, 7, 8]]))
        torch.testing.assert_close(logits[:1], model.classifier(model.pooler(dec.last_hidden_state[:, -1:])))
    torch.testing.assert_close(logits[1:], alone, atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="pooling auto or summary"):
        SequenceClassifier(init_from=checkpoints["bart"], pooling="first")


@pytest.mark.parametrize("family", ["albert", "electra", "deberta", "modernbert", "xlnet", "transformer-xl"])
def test_heads_fit_every_encoder_family(family, tmp_path):
    """ALBERT (shared layers, factorized embeddings), ELECTRA's discriminator, DeBERTa (disentangled attention),
    ModernBERT (RoPE, local/global layers), XLNet and Transformer-XL (relative positions, the XL stack): the same
    heads, the same few steps."""
    ckpt = tiny_pretrained(tmp_path / f"{family}.ckpt", family)
    for head in ("classification", "tagging"):
        torch.manual_seed(0)
        model, data = _ready(head, ckpt)
        rows = data.examples["train"]
        if head == "classification":
            rows = [r for r in rows if r["label"] == 0][:4] + [r for r in rows if r["label"] == 1][:4]
        batch = data.collate(rows[:8])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(20):
            _, loss = model.step(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < 0.6 * losses[0], (family, head, losses)


@pytest.mark.parametrize("head,family", [("classification", "bert"), ("classification", "gpt2"),
                                         ("classification", "bart"), ("tagging", "roberta")])
def test_fine_tuning_trains_the_pretrained_backbone_with_its_dropout(head, family, checkpoints, tmp_path):
    """The checkpoint loads in eval mode; fine-tuning must train every module (the backbone's dropout included) from
    its first step in Lightning's own loop, which keeps the modes a module was handed over in."""
    import lightning as L

    model, data = _ready(head, checkpoints[family])
    modes: list[set[bool]] = []

    class Modes(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):  # noqa: ANN001
            modes.append({m.training for m in module.modules()})

    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=[Modes()], default_root_dir=tmp_path)
    trainer.fit(model, datamodule=data)
    assert modes == [{True}, {True}]
