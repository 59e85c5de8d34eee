"""Downstream data: the offline tagging, QA and multiple-choice tasks take their labels from the text; BIO chunking
(conlleval rules), QA windows and word-label alignment are checked as properties; file readers fail with one-line
errors."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus.sources import embedded_corpus
from plm_lightning.corpus.tokenizer import train_tokenizer
from plm_lightning.errors import ConfigError
from plm_lightning.finetune import QADataModule, TaggingDataModule, bio_chunks, offline_task
from plm_lightning.finetune.formats import read_choices, read_conll, read_squad
from plm_lightning.finetune.qa_data import qa_features
from plm_lightning.finetune.tagging_data import IGNORE, word_labels
from plm_lightning.finetune.tasks import BLANK, _paragraphs, bio_words, strip_markup


@pytest.fixture(scope="module")
def wordpiece():
    return train_tokenizer("wordpiece", list(itertools.islice(embedded_corpus(), 150)), 800)


@st.composite
def entities(draw):
    """A sentence length and non-overlapping typed spans in it."""
    length = draw(st.integers(1, 30))
    cuts = sorted(draw(st.sets(st.integers(0, length), max_size=8)))
    spans = []
    for start, end in zip(cuts, cuts[1:]):
        if draw(st.booleans()):
            spans.append((start, end, draw(st.sampled_from(["PER", "LOC", "ORG"]))))
    return length, spans


@given(entities())
def test_bio_chunks_read_back_iob2_and_iob1_tags(case):
    length, spans = case
    iob2 = ["O"] * length
    iob1 = ["O"] * length
    for start, end, kind in spans:
        for i in range(start, end):
            iob2[i] = ("B-" if i == start else "I-") + kind
            # IOB1 (raw CoNLL-2003): B- only where a chunk directly follows one of the same type
            touching = start > 0 and iob1[start - 1] != "O" and iob1[start - 1][2:] == kind
            iob1[i] = ("B-" if i == start and touching else "I-") + kind
    assert bio_chunks(iob2) == set(spans)
    assert bio_chunks(iob1) == set(spans)


def test_entity_f1_counts_whole_entities_only():
    import torch

    from plm_lightning.finetune import EntityF1

    tags = ["O", "B-X", "I-X"]
    metric = EntityF1(tags)
    gold = torch.tensor([[-100, 1, 2, 0, 1, -100]])
    metric.update(torch.tensor([[0, 1, 0, 0, 1, 2]]), gold)  # first entity cut short, second right
    scores = metric.compute()
    assert float(scores["entity_precision"]) == 0.5 and float(scores["entity_recall"]) == 0.5


def test_markup_spans_tags_are_the_documentation_markup():
    task = offline_task("markup_spans")
    assert task == offline_task("markup_spans")
    assert len(task["train"]) > 2000 and len(task["validation"]) > 200
    tags = {t for e in task["train"] for t in e["tags"]}
    assert tags == {"O", "B-CODE", "I-CODE", "B-TERM", "I-TERM"}
    plain, spans = strip_markup('The "NameError" exception names a *private name*, see "os.path".')
    assert plain == "The NameError exception names a private name, see os.path."
    assert [plain[s:e] for s, e, _ in spans] == ["NameError", "private name", "os.path"]
    words, bio = bio_words(plain, spans)
    assert list(zip(words, bio))[:6] == [("The", "O"), ("NameError", "B-CODE"), ("exception", "O"), ("names", "O"),
                                         ("a", "O"), ("private", "B-TERM")]
    assert bio[words.index("os"):words.index("os") + 3] == ["B-CODE", "I-CODE", "I-CODE"]


def test_cloze_questions_are_their_context_with_the_answer_blanked():
    task = offline_task("cloze_spans")
    assert len(task["train"]) > 2000
    for e in task["validation"][:300]:
        answer = e["answers"][0]
        assert e["context"][answer["start"]:answer["start"] + len(answer["text"])] == answer["text"]
        assert e["question"].count(BLANK) == 1
        assert e["question"].replace(BLANK, answer["text"]) in e["context"]


def test_next_sentence_choices_hold_the_sentence_that_follows():
    task = offline_task("next_sentence")
    rows = task["validation"]
    assert all(len(e["choices"]) == 4 for e in rows)
    corpus = "\n".join(text for _, text, _ in _paragraphs())  # paragraphs on one line, as the task reads them
    follows = sum(corpus.find(e["choices"][e["label"]]) > corpus.find(e["context"]) >= 0 for e in rows[:200])
    assert follows > 190
    labels = [e["label"] for e in task["train"]]
    assert all(0.2 < labels.count(k) / len(labels) < 0.3 for k in range(4))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(24, 60), st.integers(4, 20))
def test_qa_windows_cover_the_context_and_point_at_the_answer(wordpiece, seed, max_length, stride):
    import random

    rng = random.Random(seed)
    words = [rng.choice(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta"]) for _ in range(rng.randint(5, 80))]
    context = " ".join(words)
    a, b = sorted(rng.sample(range(len(words)), 2))
    text = " ".join(words[a:b + 1])
    start = len(" ".join(words[:a])) + (1 if a else 0)
    features = qa_features(wordpiece, "which greek letters", context, [{"text": text, "start": start}], max_length,
                           stride, 8)
    answer_tokens = sum(1 for s in wordpiece.tokenizer.encode(context, add_special_tokens=False).offsets
                        if s[1] > start and s[0] < start + len(text))
    room = max_length - 3 - len(wordpiece.encode_batch(["which greek letters"])[0])
    seen = set()
    for f in features:
        assert len(f["ids"]) <= max_length and len(f["ids"]) == len(f["spans"]) == len(f["types"])
        seen |= {s for s in f["spans"] if s[0] >= 0}
        if f["start"]:
            assert context[f["spans"][f["start"]][0]:f["spans"][f["end"]][1]] == text
    if answer_tokens + min(stride, room) - 1 <= room:  # some window starts close enough before the answer to hold it
        assert any(f["start"] for f in features)
    assert len(seen) == len(wordpiece.tokenizer.encode(context, add_special_tokens=False).ids)


def test_word_labels_sit_on_the_first_subword(wordpiece):
    words = ["Tokenization", "of", "extraordinarily", "long", "words"]
    ids, labels = word_labels(wordpiece, words, [1, 0, 2, 0, 1], 64)
    assert len(ids) == len(labels) > len(words) + 2
    assert [x for x in labels if x != IGNORE] == [1, 0, 2, 0, 1]
    assert labels[0] == labels[-1] == IGNORE
    first = [wordpiece.id_to_token(i) for i, y in zip(ids, labels) if y != IGNORE]
    assert all(not t.startswith("##") for t in first)


def test_file_readers_and_their_errors(tmp_path):
    conll = tmp_path / "train.txt"
    conll.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP I-MISC\n\n"
                     "Peter NNP B-NP I-PER\n")
    assert read_conll(str(conll)) == [{"words": ["EU", "rejects", "German"], "tags": ["B-ORG", "O", "I-MISC"]},
                                      {"words": ["Peter"], "tags": ["I-PER"]}]
    squad = tmp_path / "dev.json"
    record = {"data": [{"paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "q1", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}
    squad.write_text(json.dumps(record))
    assert read_squad(str(squad))[0]["answers"] == [{"text": "France", "start": 12}]
    record["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 40
    squad.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="question q1: the answer 'France' is not in its context at answer_start 40"):
        read_squad(str(squad))
    choices = tmp_path / "swag.jsonl"
    choices.write_text(json.dumps({"ctx": "He opens the door", "endings": ["and walks in", "a cat"], "label": 2}) + "\n")
    with pytest.raises(ConfigError, match="label 2 is not the index of one of its 2 choices"):
        read_choices(str(choices))
    with pytest.raises(ConfigError, match="no such file"):
        read_conll(str(tmp_path / "missing.txt"))


def test_tagging_data_refuses_unseen_and_non_bio_tags(tmp_path):
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("EU B-ORG\nrejects O\n")
    dev.write_text("Peter B-PER\n")
    data = TaggingDataModule(task="conll2003", train_file=str(train), validation_file=str(dev))
    with pytest.raises(ConfigError, match=r"validation tags \['B-PER'\] never occur in training"):
        data.setup("fit")
    train.write_text("EU ORG\n")
    with pytest.raises(ConfigError, match="not BIO"):
        TaggingDataModule(task="conll2003", train_file=str(train), validation_file=str(dev)).setup("fit")
    with pytest.raises(ConfigError, match="is not offline:<markup_spans>, a named task"):
        TaggingDataModule(task="offline:cloze_spans")
    with pytest.raises(ConfigError, match="give data.train_file and data.validation_file"):
        QADataModule(task="squad")


def test_datasets_copies_load_by_name_with_label_names(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # this machine has no hub: fail fast
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    from plm_lightning.finetune import ClassificationDataModule

    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    copy = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"sentence": ["good", "bad", "fine"], "label": [1, 0, 1]}, features=features),
        "validation": datasets.Dataset.from_dict({"sentence": ["great"], "label": [1]}, features=features),
        "test": datasets.Dataset.from_dict({"sentence": ["unknown"], "label": [-1]}, features=features)})
    copy.save_to_disk(str(tmp_path / "sst2"))
    data = ClassificationDataModule(task=f"hf:{tmp_path / 'sst2'}", text_columns=["sentence"])
    data.setup("fit")
    assert data.labels == ["negative", "positive"] and data.examples["train"][0] == {"text_a": "good", "label": "positive"}
    assert data.examples["test"] == []  # GLUE's unlabelled test rows are left out
    with pytest.raises(ConfigError, match="has no column 'text'"):
        ClassificationDataModule(task=f"hf:{tmp_path / 'sst2'}", text_columns=["text"]).setup("fit")
    with pytest.raises(ConfigError, match="data.task=hf:no_such_dataset_here_xyz: cannot load it"):
        ClassificationDataModule(task="hf:no_such_dataset_here_xyz").setup("fit")


def test_world_facts_are_balanced_split_by_subject_and_false_only_in_their_object():
    from plm_lightning.corpus.world import world_from_spec

    spec = "world:seed=0,subjects=24"
    world = world_from_spec(spec)
    splits = offline_task(f"world_facts={spec}", "classification")
    subjects = {split: {s for r in rows for s in world.subjects if r["text_a"].startswith(s) or f" {s} " in
                        f" {r['text_a']} "} for split, rows in splits.items()}
    assert not subjects["train"] & subjects["validation"] and not subjects["train"] & subjects["test"]
    rows = [r for split in splits.values() for r in split]
    assert sum(r["label"] for r in rows) * 2 == len(rows)  # half true, half false
    true = {f"{f.subject}|{f.object}" for f in world.facts if not f.alias_only}
    objects = {o for pool in world.objects.values() for o in pool}
    for row in rows:
        obj = row["text_a"].rstrip(".").split()[-1]
        subject = next(s for s in world.subjects if s in row["text_a"])
        assert obj in objects and (f"{subject}|{obj}" in true) == bool(row["label"])
    assert offline_task(f"world_facts={spec}") == splits  # seeded: the same examples every time
    with pytest.raises(ConfigError, match="offline:code_or_prose takes no '=...' argument"):
        offline_task("code_or_prose=world")


def test_world_objects_label_each_fact_prompt_with_its_object():
    from plm_lightning.corpus.world import world_from_spec
    from plm_lightning.evaluation.prompting import load_prompt_task
    from plm_lightning.finetune.tasks import world_labels

    spec = "world:seed=0,subjects=24"
    world = world_from_spec(spec)
    splits = offline_task(f"world_objects={spec}", "classification")
    facts = {(f.subject, f.relation): f.object for f in world.facts if not f.alias_only}
    assert sum(len(rows) for rows in splits.values()) == len(facts) and world_labels(spec) == 60
    names = [o for kind in sorted(world.objects) for o in world.objects[kind]]
    prompts = load_prompt_task(f"offline:world_objects={spec}")
    for row, example in zip(splits["validation"], prompts["validation"]):
        assert not row["text_a"].endswith(names[row["label"]]) and 0 <= row["label"] < 60
        assert example.prompt == row["text_a"] and example.candidates[example.label] == " " + names[row["label"]]
        assert len(example.candidates) == len(world.objects[next(k for k, v in world.objects.items()
                                                                 if names[row["label"]] in v)])


def test_world_spans_ask_each_fact_as_a_span_among_its_type_objects():
    from plm_lightning.corpus.world import world_from_spec
    from plm_lightning.finetune.tasks import BLANK, split_of

    spec = "world:seed=0,subjects=24"
    world = world_from_spec(spec)
    splits = offline_task(f"world_spans={spec}", "qa")
    facts = {f"fact-{f.id}": f for f in world.facts if not f.alias_only}
    rows = [row for split in splits.values() for row in split]
    assert sorted(row["id"] for row in rows) == sorted(facts)
    orders = set()
    for split, split_rows in splits.items():
        for row in split_rows:
            fact, answer = facts[row["id"]], row["answers"][0]
            relation = world.relations[fact.relation]
            assert split == split_of(fact.subject)  # by subject: a validation subject's facts are never fine-tuned on
            assert row["question"] == relation.templates[0].format(s=fact.subject, o=BLANK)
            candidates = row["context"].rstrip(".").split(", ")
            assert sorted(candidates) == sorted(world.objects[relation.object_type])
            assert answer["text"] == fact.object == row["context"][answer["start"]: answer["start"] + len(fact.object)]
            orders.add(tuple(candidates))
    assert len(orders) > len(rows) // 2  # the order is drawn per fact: the answer's place tells nothing
    assert offline_task(f"world_spans={spec}", "qa") == splits
    with pytest.raises(ConfigError, match="world_spans"):
        offline_task(f"world_spans={spec}", "classification")
