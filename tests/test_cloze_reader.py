"""The LAMA probe asks every objective through its own head: T5 fills a sentinel, BART reconstructs a mask, XLNet runs
its query stream at the hidden slot, ELECTRA answers with its generator. The answer logits are the model's own
teacher-forced logits at that slot, independent of padding, and see exactly the context each form promises."""

import json

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.cloze import ClozeReader, load_reader
from plm_lightning.knowledge.lm import LanguageModel
from plm_lightning.knowledge.probing import probe
from tests.conftest import cli_error, run_cli, tiny_pretrained

PREFIX, ANSWER, SUFFIX = "The module is used to", "read", "files from the disk."
ROWS = [{"relation": relation, "template": template, "sub_label": subject, "obj_label": obj}
        for relation, template in (("R1", "[X] is used to [Y] files."), ("R2", "The [X] can [Y] the value"))
        for subject, obj in (("The module", "read"), ("The function", "return"), ("This class", "set"))]
"""LAMA-format probes whose objects are one token under tokenizers trained on the embedded corpus."""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cloze")
    return {family: tiny_pretrained(root / f"{family}.ckpt", family) for family in ("t5", "bart", "xlnet", "electra")}


@pytest.fixture(scope="module")
def readers(checkpoints):
    return {family: load_reader(path) for family, path in checkpoints.items()}


def _logits(reader, *queries):
    with torch.no_grad():
        return reader.answer_logits_of(list(queries))


def test_each_objective_gets_its_own_cloze_form(readers) -> None:
    assert isinstance(readers["electra"], LanguageModel) and readers["electra"].backbone is readers["electra"].module.generator
    assert [readers[f].form for f in ("t5", "bart", "xlnet")] == ["t5", "bart", "xlnet"]
    t5 = readers["t5"]
    q = t5.query(PREFIX, ANSWER, SUFFIX)
    sentinel = int(t5.tokenizer.sentinel_ids()[0])
    assert q.ids.count(sentinel) == 1 and q.ids[-1] == t5.tokenizer.ids["eos"]
    assert q.decoder_ids == (t5.tokenizer.ids["pad"], sentinel) and q.position == 1
    bart = readers["bart"]
    q = bart.query(PREFIX, ANSWER, SUFFIX)
    ids = bart.tokenizer.ids
    assert q.ids[0] == ids["bos"] and q.ids.count(ids["mask"]) == 1 and q.decoder_ids[:2] == (ids["eos"], ids["bos"])
    assert q.decoder_ids[2:] == tuple(bart.encode(PREFIX)) and q.position == len(q.decoder_ids) - 1
    xl = readers["xlnet"]
    q = xl.query(PREFIX, ANSWER, SUFFIX)
    assert q.ids[-2:] == (xl.tokenizer.ids["sep"], xl.tokenizer.ids["cls"]) and q.position == len(xl.encode(PREFIX))


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_encoder_decoder_answer_is_the_teacher_forced_logit_at_the_slot(readers, family) -> None:
    """The reader's logits equal the decoder's logits at the same step when the whole target is teacher-forced
    (the decoder is causal, so what follows the slot does not change them), and padding in a batch changes nothing."""
    reader = readers[family]
    q = reader.query(PREFIX, ANSWER, SUFFIX)
    alone = _logits(reader, q)[0]
    target = torch.tensor([[*q.decoder_ids, *q.answer, reader.tokenizer.ids["eos"]]])
    hidden = reader.module.decode({"input_ids": torch.tensor([q.ids]), "decoder_input_ids": target})
    torch.testing.assert_close(alone, reader.module.lm_head(hidden)[0, q.position], atol=1e-5, rtol=1e-5)
    longer = reader.query("In a much longer prompt than the first one, the function is used to", ANSWER, SUFFIX)
    torch.testing.assert_close(_logits(reader, longer, q)[1], alone, atol=1e-5, rtol=1e-5)
    other_suffix = _logits(reader, reader.query(PREFIX, ANSWER, "numbers in a list."))[0]
    assert not torch.allclose(other_suffix, alone)  # the encoder reads the text after the slot


def test_xlnet_slot_is_hidden_and_both_sides_are_seen(readers) -> None:
    reader = readers["xlnet"]
    q = reader.query(PREFIX, ANSWER, SUFFIX)
    alone = _logits(reader, q)[0]
    slot_token = list(q.ids)
    slot_token[q.position] = reader.encode("disk")[0]  # the answer slot's own token is invisible to the query stream
    torch.testing.assert_close(_logits(reader, type(q)(tuple(slot_token), q.position, q.answer))[0], alone,
                               atol=1e-5, rtol=1e-5)
    longer = reader.query("In a much longer prompt than the first one, the function is used to", ANSWER, SUFFIX)
    torch.testing.assert_close(_logits(reader, longer, q)[1], alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_logits(reader, reader.query(PREFIX, ANSWER, "numbers in a list."))[0], alone)


def test_probe_reports_the_final_layer_and_rejects_per_layer_readers(readers) -> None:
    rows = ROWS
    for family in ("t5", "bart", "xlnet"):
        report = probe(readers[family], rows)
        assert [row["layer"] for row in report.layers] == ["final"] and 0 <= report.last["p@1"] <= report.last["p@10"]
        assert report.ranks.shape == (1, len(report.rows)) and report.forgotten() == 0.0 and len(report.rows) >= 3
    long = {"relation": "R3", "template": "[X] reads [Y]", "sub_label": "The parser", "obj_label": "Zorblaxquint"}
    assert len(readers["t5"].query("The parser reads", "Zorblaxquint").answer) > 1
    assert len(probe(readers["t5"], [*rows, long]).rows) == len(rows)  # LAMA: one-token objects only
    first = probe(readers["t5"], [*rows, long], first_token=True)
    assert len(first.rows) == len(rows) + 1 and first.summary()["objects"] == "first-token"
    electra = probe(readers["electra"], rows)
    assert len(electra.layers) == readers["electra"].num_layers + 1  # the generator's every layer (logit lens)
    with pytest.raises(ConfigError, match="--reader lens"):
        probe(readers["t5"], rows, heads=torch.nn.ModuleList())


def test_probe_cli_on_an_encoder_decoder(checkpoints, tmp_path, capsys) -> None:
    ckpt = checkpoints["t5"]
    probes = tmp_path / "probes.jsonl"
    probes.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    res = run_cli(["probe", ckpt, "--probes", str(probes), "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    (reader,) = json.loads(res.stdout.strip().splitlines()[-1])["readers"]
    assert reader["layers"][0]["layer"] == "final" and reader["probes"] > 0
    assert "only --reader lens applies" in cli_error(["probe", ckpt, "--probes", str(probes), "--reader", "trained"],
                                                      capsys)


def test_cloze_reader_refuses_other_objectives(readers) -> None:
    with pytest.raises(ConfigError, match="cloze reader reads Seq2SeqLM, PermutationLM"):
        ClozeReader(readers["electra"].module, readers["electra"].tokenizer)
