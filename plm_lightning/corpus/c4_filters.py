"""C4-style corpus cleaning (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", sec. 2.2), as composable steps run in order over pages (documents, lines separated by
newlines):

- ``terminal_punctuation``: keep only lines that end in a terminal punctuation mark (``.``, ``!``, ``?`` or a closing
  quotation mark after one);
- ``min_words``: keep only lines with at least ``min_words`` (5) words;
- ``javascript``: drop lines that contain the word "javascript";
- ``lorem_ipsum``: drop pages that contain "lorem ipsum";
- ``curly_bracket``: drop pages that contain a curly bracket (code);
- ``bad_words``: drop pages that contain a word of a user-supplied list (C4 used the "List of Dirty, Naughty,
  Obscene or Otherwise Bad Words"; none ships here);
- ``min_sentences``: drop pages with fewer than ``min_sentences`` (3) sentences;
- ``dedup``: keep one copy of any three-sentence span that occurs more than once in the corpus (the first, in
  corpus order; later copies' sentences are removed);
- ``language``: keep pages that ``langid`` (Lui & Baldwin 2012; its model ships with the package) classifies as
  ``language`` with probability at least ``language_threshold`` (C4: English, 0.99).

Line steps edit a page (a page left with no line is dropped); page steps keep or drop it whole. Every step counts
the pages and lines it removed, for the report ``prepare`` prints. All steps but ``language`` are pure functions of
the text and the order of the corpus.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from plm_lightning.corpus.sentences import check_splitter
from plm_lightning.errors import ConfigError

STEPS = ("terminal_punctuation", "min_words", "javascript", "lorem_ipsum", "curly_bracket", "bad_words",
         "min_sentences", "dedup", "language")
"""Every step, in C4's order (line filters, then page filters, deduplication, language identification)."""
TERMINAL = re.compile(r"[.!?][\"'\u201d\u2019)]*$")
WORD = re.compile(r"\w+(?:['\u2019-]\w+)*", re.UNICODE)


@dataclass
class StepCount:
    """What one step removed: whole pages, and lines (those of the pages it dropped included)."""

    pages: int = 0
    lines: int = 0


@dataclass
class CleaningReport:
    """Pages and lines before and after, and what each step removed."""

    pages_in: int = 0
    lines_in: int = 0
    pages_out: int = 0
    lines_out: int = 0
    steps: dict[str, StepCount] = field(default_factory=dict)

    def add(self, other: CleaningReport) -> None:
        """Add the counts of ``other`` (another part of the corpus) to these."""
        for name in ("pages_in", "lines_in", "pages_out", "lines_out"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, count in other.steps.items():
            mine = self.steps.setdefault(name, StepCount())
            mine.pages += count.pages
            mine.lines += count.lines

    def as_dict(self) -> dict:
        return {"pages_in": self.pages_in, "lines_in": self.lines_in, "pages_out": self.pages_out,
                "lines_out": self.lines_out,
                "steps": {name: {"pages_removed": c.pages, "lines_removed": c.lines} for name, c in self.steps.items()}}

    def table(self) -> str:
        rows = [f"{'step':<22}{'pages removed':>15}{'lines removed':>15}"]
        rows += [f"{name:<22}{c.pages:>15,}{c.lines:>15,}" for name, c in self.steps.items()]
        rows.append(f"{'kept':<22}{self.pages_out:>15,}{self.lines_out:>15,}   (of {self.pages_in:,} pages, "
                     f"{self.lines_in:,} lines)")
        return "\n".join(rows)


@dataclass(frozen=True)
class CleaningConfig:
    """The steps to run (in this order) and their settings; C4's values by default.

    Attributes:
        steps: Names of :data:`STEPS`, run in the order given.
        min_words: Fewest words a line keeps (``min_words``).
        min_sentences: Fewest sentences a page keeps (``min_sentences``).
        bad_words: A UTF-8 file, one word or phrase per line (``bad_words``; required by that step).
        language: The language ``langid`` must find (``language``), an ISO 639-1 code.
        language_threshold: Its least probability.
        dedup_span: Sentences per deduplicated span (``dedup``; 3 in C4).
        sentence_splitter: What counts sentences (``min_sentences``) and cuts the spans (``dedup``): one of
            :data:`~plm_lightning.corpus.sentences.SENTENCE_SPLITTERS`.
    """

    steps: tuple[str, ...] = tuple(s for s in STEPS if s != "bad_words")
    min_words: int = 5
    min_sentences: int = 3
    bad_words: str | None = None
    language: str = "en"
    language_threshold: float = 0.99
    dedup_span: int = 3
    sentence_splitter: str = "pysbd"

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in STEPS]
        if unknown:
            raise ConfigError(f"prepare: unknown step(s) {', '.join(unknown)}; valid: {', '.join(STEPS)}")
        if len(set(self.steps)) != len(self.steps):
            raise ConfigError(f"prepare: --steps names a step twice: {', '.join(self.steps)}")
        if "bad_words" in self.steps and not self.bad_words:
            raise ConfigError("prepare: the bad_words step needs --bad-words FILE (one word or phrase per line)")
        if self.bad_words and not Path(self.bad_words).is_file():
            raise ConfigError(f"prepare: --bad-words: no such file '{self.bad_words}'")
        if not 0.0 <= self.language_threshold <= 1.0:
            raise ConfigError(f"prepare: --language-threshold={self.language_threshold} must be in [0, 1]")
        check_splitter(self.sentence_splitter, "prepare: --sentence-splitter")
        for name in ("min_words", "min_sentences", "dedup_span"):
            if getattr(self, name) < 1:
                raise ConfigError(f"prepare: --{name.replace('_', '-')}={getattr(self, name)} must be >= 1")


Lines = list[str]


def ends_in_terminal_punctuation(line: str) -> bool:
    return bool(TERMINAL.search(line.rstrip()))


def word_count(line: str) -> int:
    return len(WORD.findall(line))


def read_bad_words(path: str) -> tuple[re.Pattern, int]:
    """One pattern matching any listed word or phrase as whole words (case-insensitive), and the list's size."""
    try:
        words = [w.strip() for w in Path(path).read_text(encoding="utf-8").splitlines() if w.strip()]
    except UnicodeDecodeError as err:
        raise ConfigError(f"prepare: --bad-words '{path}' is not UTF-8 text (byte {err.start})") from err
    if not words:
        raise ConfigError(f"prepare: --bad-words '{path}' lists no word")
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE), len(words)


@cache
def _language_identifier():  # noqa: ANN202
    from langid.langid import LanguageIdentifier, model

    return LanguageIdentifier.from_modelstring(model, norm_probs=True)


def identify_language(text: str) -> tuple[str, float]:
    """(language, probability) by langid with normalised probabilities."""
    language, probability = _language_identifier().classify(text)
    return language, float(probability)


class Cleaner:
    """Runs a :class:`CleaningConfig` over pages in corpus order (the dedup step remembers the spans it saw)."""

    def __init__(self, config: CleaningConfig) -> None:
        self.config = config
        self.report = CleaningReport(steps={name: StepCount() for name in config.steps})
        self.bad_words = read_bad_words(config.bad_words)[0] if config.bad_words else None
        self.seen_spans: set[str] = set()
        line_steps: dict[str, Callable[[str], bool]] = {
            "terminal_punctuation": ends_in_terminal_punctuation,
            "min_words": lambda line: word_count(line) >= config.min_words,
            "javascript": lambda line: "javascript" not in line.lower(),
        }
        page_steps: dict[str, Callable[[Lines], bool]] = {
            "lorem_ipsum": lambda lines: not any("lorem ipsum" in line.lower() for line in lines),
            "curly_bracket": lambda lines: not any("{" in line or "}" in line for line in lines),
            "bad_words": lambda lines: not any(self.bad_words.search(line) for line in lines),
            "min_sentences": lambda lines: _sentence_count(lines, config.sentence_splitter) >= config.min_sentences,
            "language": self._in_language,
        }
        self.steps: list[tuple[str, Callable[[Lines], Lines]]] = []
        for name in config.steps:
            if name in line_steps:
                self.steps.append((name, _line_filter(line_steps[name])))
            elif name == "dedup":
                self.steps.append((name, self._dedup))
            else:
                self.steps.append((name, _page_filter(page_steps[name])))

    def _in_language(self, lines: Lines) -> bool:
        language, probability = identify_language(" ".join(lines))
        return language == self.config.language and probability >= self.config.language_threshold

    def _dedup(self, lines: Lines) -> Lines:
        """Remove the sentences of every ``dedup_span``-sentence window already seen earlier in the corpus."""
        from plm_lightning.corpus.sentences import split_sentences

        sentences = [(i, s) for i, line in enumerate(lines) for s in split_sentences(line, self.config.sentence_splitter)]
        n = self.config.dedup_span
        drop: set[int] = set()
        for start in range(len(sentences) - n + 1):
            key = " ".join(" ".join(s.lower().split()) for _, s in sentences[start: start + n])
            if self.seen_before(key, start):
                drop.update(range(start, start + n))
        if not drop:
            return lines
        kept: dict[int, list[str]] = {}
        for k, (i, s) in enumerate(sentences):
            if k not in drop:
                kept.setdefault(i, []).append(s)
        return [" ".join(kept[i]) for i in sorted(kept)]

    def seen_before(self, key: str, start: int) -> bool:
        """Whether span ``key`` (the window starting at sentence ``start`` of this page) occurred earlier in the
        corpus; remembers it. In memory here; ``clean_partitions`` answers it from hashes sorted on disk."""
        if key in self.seen_spans:
            return True
        self.seen_spans.add(key)
        return False

    def clean(self, page: str) -> str | None:
        """The cleaned page, or None when a step dropped it (counted in the report)."""
        lines = [line.strip() for line in page.splitlines() if line.strip()]
        self.report.pages_in += 1
        self.report.lines_in += len(lines)
        for name, step in self.steps:
            if not lines:
                break
            kept = step(lines)
            count = self.report.steps[name]
            count.lines += len(lines) - len(kept)
            count.pages += not kept
            lines = kept
        if not lines:
            return None
        self.report.pages_out += 1
        self.report.lines_out += len(lines)
        return "\n".join(lines)

    def run(self, pages: Iterable[str], progress: Callable[[], None] | None = None) -> Iterator[str]:
        """The pages that survive, cleaned, in order; ``progress`` is called once per page read."""
        for page in pages:
            cleaned = self.clean(page)
            if progress is not None:
                progress()
            if cleaned is not None:
                yield cleaned


def _line_filter(keep: Callable[[str], bool]) -> Callable[[Lines], Lines]:
    return lambda lines: [line for line in lines if keep(line)]


def _page_filter(keep: Callable[[Lines], bool]) -> Callable[[Lines], Lines]:
    return lambda lines: lines if keep(lines) else []


def _sentence_count(lines: Lines, splitter: str) -> int:
    from plm_lightning.corpus.sentences import split_sentences

    return sum(len(split_sentences(line, splitter)) for line in lines)
