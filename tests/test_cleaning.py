"""C4 cleaning: every filter, on hand-written pages, removes exactly what it should and counts it; the steps compose
in the given order; bad settings are one-line errors; ``prepare`` writes a JSONL corpus ``fit`` can read."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus.c4_filters import STEPS, Cleaner, CleaningConfig, ends_in_terminal_punctuation, word_count
from plm_lightning.errors import ConfigError
from tests.conftest import cli_error, run_cli

GOOD = ["The river rises in the northern hills every spring.", "Farmers along its banks plant rice in early May.",
        "By autumn the water has fallen to half its height."]
"""Three lines of one sentence each that every C4 filter keeps."""


def _clean(pages, **config):
    cleaner = Cleaner(CleaningConfig(**config))
    return [cleaner.clean(p) for p in pages], cleaner.report


def test_line_filters_remove_exactly_the_lines_they_name() -> None:
    page = "\n".join([GOOD[0], "Click here to subscribe", "Short line here.", GOOD[1],
                      "Please enable JavaScript to view the comments.", GOOD[2], 'He said "it is over."'])
    (out,), report = _clean([page], steps=("terminal_punctuation",))
    assert out.splitlines() == [GOOD[0], "Short line here.", GOOD[1], "Please enable JavaScript to view the comments.",
                                GOOD[2], 'He said "it is over."']
    assert report.steps["terminal_punctuation"].lines == 1 and report.steps["terminal_punctuation"].pages == 0
    (out,), report = _clean([page], steps=("min_words",))  # 4 and 3 words: gone; 'He said "it is over."' has 5
    assert out.splitlines() == [GOOD[0], GOOD[1], "Please enable JavaScript to view the comments.", GOOD[2],
                                'He said "it is over."']
    assert report.steps["min_words"].lines == 2
    (out,), report = _clean([page], steps=("javascript",))
    assert "JavaScript" not in out and out.count("\n") == 5 and report.steps["javascript"].lines == 1
    (out,), _ = _clean([page], steps=("terminal_punctuation", "min_words", "javascript"))
    assert out.splitlines() == [*GOOD, 'He said "it is over."']


@pytest.mark.parametrize("bad_line, step", [
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem_ipsum"),
    ("The function body reads { return x; } in the listing.", "curly_bracket"),
])
def test_page_filters_drop_whole_pages(bad_line: str, step: str) -> None:
    (dropped, kept), report = _clean(["\n".join([*GOOD, bad_line]), "\n".join(GOOD)], steps=(step,))
    assert dropped is None and kept == "\n".join(GOOD)
    assert report.steps[step].pages == 1 and report.steps[step].lines == 4 and report.pages_out == 1


def test_bad_words_match_whole_words_only(tmp_path) -> None:
    words = tmp_path / "bad.txt"
    words.write_text("grape\nsour milk\n")
    pages = ["\n".join([*GOOD, "They ate a Grape at noon."]), "\n".join([*GOOD, "They drank sour milk today."]),
             "\n".join([*GOOD, "The grapefruit tasted sour, like milk."])]
    out, report = _clean(pages, steps=("bad_words",), bad_words=str(words))
    assert out[:2] == [None, None] and out[2] is not None and report.steps["bad_words"].pages == 2


def test_min_sentences_counts_sentences_not_lines() -> None:
    two = "The river rises in spring. It falls in autumn."
    three = "The river rises in spring. It falls in autumn. Farmers plant rice in May."
    out, report = _clean([two, three], steps=("min_sentences",))
    assert out == [None, three] and report.steps["min_sentences"].pages == 1


def test_dedup_keeps_the_first_copy_of_a_three_sentence_span() -> None:
    shared = "The bridge opened in spring. It carries two lanes. Tolls were dropped in May."
    first = f"{shared}\nVisitors come from far away to see it."
    second = f"A new page starts here with its own words. {shared}"
    unrelated = "The river rises in spring. It falls in autumn. Farmers plant rice in May."
    out, report = _clean([first, second, unrelated, first], steps=("dedup",))
    assert out[0] == first and out[2] == unrelated
    assert out[1] == "A new page starts here with its own words."  # the later copy's span is removed
    assert out[3] is None  # every sentence of an exact repeat is in a seen span
    assert report.steps["dedup"].pages == 1 and report.steps["dedup"].lines == 2


def test_language_identification_keeps_confident_english() -> None:
    german = ("Der Fluss steigt jedes Jahr im Frühling in den nördlichen Hügeln. Die Bauern an seinen Ufern pflanzen "
              "im Mai Reis. Im Herbst ist das Wasser auf die Hälfte gesunken.")
    out, report = _clean(["\n".join(GOOD), german], steps=("language",))
    assert out == ["\n".join(GOOD), None] and report.steps["language"].pages == 1
    out, _ = _clean([german], steps=("language",), language="de")
    assert out == [german]


def test_the_report_adds_up_and_steps_run_in_order() -> None:
    pages = ["\n".join([*GOOD, "menu home about"]), "\n".join([*GOOD, "The set is written {1, 2, 3} in code."]),
             "Too short.", ""]
    out, report = _clean(pages)
    assert out[0] == "\n".join(GOOD) and out[1:] == [None, None, None]
    assert report.pages_in == 4 and report.pages_out == 1 and report.lines_in == 9 and report.lines_out == 3
    assert list(report.steps) == [s for s in STEPS if s != "bad_words"]
    removed = sum(c.lines for c in report.steps.values())
    assert removed == report.lines_in - report.lines_out
    # the brace line passes the line filters, so curly_bracket drops its page whole
    assert report.steps["terminal_punctuation"].lines == 1 and report.steps["terminal_punctuation"].pages == 0
    assert report.steps["curly_bracket"].pages == 1 and report.steps["curly_bracket"].lines == 4
    assert report.steps["min_words"].pages == 1  # "Too short."


@given(st.lists(st.sampled_from([*GOOD, "short one.", "no punctuation at the end here", "call {x} now please.",
                                 "lorem ipsum dolor sit amet today.", "Enable javascript in your browser now."]),
                min_size=0, max_size=8))
@settings(max_examples=60, deadline=None)
def test_cleaning_only_removes_lines_and_is_idempotent(lines: list[str]) -> None:
    steps = ("terminal_punctuation", "min_words", "javascript", "lorem_ipsum", "curly_bracket", "min_sentences")
    page = "\n".join(lines)
    (out,), _ = _clean([page], steps=steps)
    if out is not None:
        assert set(out.splitlines()) <= set(lines)
        assert all(ends_in_terminal_punctuation(x) and word_count(x) >= 5 for x in out.splitlines())
        assert _clean([out], steps=steps)[0] == [out]


@pytest.mark.parametrize("config, words", [
    ({"steps": ("nope",)}, "unknown step(s) nope"),
    ({"steps": ("bad_words",)}, "needs --bad-words FILE"),
    ({"steps": ("dedup", "dedup")}, "names a step twice"),
    ({"bad_words": "/no/such/file.txt"}, "no such file '/no/such/file.txt'"),
    ({"language_threshold": 1.5}, "must be in [0, 1]"),
])
def test_bad_settings_are_one_line_errors(config: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        CleaningConfig(**config)


def test_prepare_cli_writes_a_corpus_and_its_report(tmp_path, capsys) -> None:
    pages = ["\n".join([*GOOD, "Share this page"]), "Buy now!", "\n".join(GOOD),
             "\n".join([*GOOD, "The set is written {1, 2, 3} in code."])]
    (tmp_path / "raw.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in pages))
    (tmp_path / "bad.txt").write_text("rice\n")
    res = run_cli(["prepare", str(tmp_path / "raw.jsonl"), str(tmp_path / "clean.jsonl"), "--report",
                   str(tmp_path / "report.json"), "--steps", "terminal_punctuation,min_words,curly_bracket,dedup"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    kept = [json.loads(line)["text"] for line in (tmp_path / "clean.jsonl").read_text().splitlines()]
    assert kept == ["\n".join(GOOD)]  # the second copy of GOOD is a repeated span, the fourth page has a bracket
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["pages_in"] == 4 and report["pages_out"] == 1 and report["steps"]["dedup"]["pages_removed"] == 1
    assert "wrote 1 pages" in res.stdout
    error = cli_error(["prepare", str(tmp_path / "raw.jsonl"), str(tmp_path / "o.jsonl"), "--bad-words",
                       str(tmp_path / "missing.txt")], capsys)
    assert "--bad-words: no such file" in error


@pytest.mark.parametrize("workers", [1, 2])
def test_streamed_cleaning_equals_the_in_memory_cleaner(tmp_path, workers) -> None:
    """The partitioned two-pass deduplication (hashes sorted on disk) keeps and reports exactly what the in-memory
    cleaner does, in corpus order, over many partitions and workers; spans repeat within and across partitions."""
    from plm_lightning.corpus.clean_partitions import clean_corpus
    from plm_lightning.corpus.pack_partitions import corpus_partitions
    from plm_lightning.corpus.sources import embedded_corpus

    docs = list(embedded_corpus())[:40]
    pages = [*docs, *docs[5:15], "\n".join(docs[3].splitlines()[:12]), docs[20] + "\n" + docs[21]]
    pages = [p.replace("\n\n", "\n") for p in pages]  # one page per JSON line
    source = tmp_path / "raw.jsonl"
    source.write_text("".join(json.dumps({"text": p}) + "\n" for p in pages), encoding="utf-8")
    config = CleaningConfig(steps=("min_words", "curly_bracket", "min_sentences", "dedup"), min_words=3)
    cleaner = Cleaner(config)
    want = list(cleaner.run(pages))
    partitions, _ = corpus_partitions(str(source), "text", "train", partition_bytes=30_000)
    assert len(partitions) > 3
    out = tmp_path / "clean.jsonl"
    report = clean_corpus(partitions, "text", config, out, workers=workers, progress=False)
    got = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert got == want and report.as_dict() == cleaner.report.as_dict()
    assert report.steps["dedup"].lines > 0 and report.steps["dedup"].pages > 0
    assert not list(tmp_path.glob(".clean.jsonl.work-*"))
