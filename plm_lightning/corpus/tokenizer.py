"""Tokenizers: train one with Hugging Face `tokenizers` on the corpus (cached), or load a local one.

Kinds: ``wordpiece`` (BERT: lower-cased WordPiece, [PAD] [UNK] [CLS] [SEP] [MASK]), ``bpe`` (RoBERTa: byte-level BPE
with <s> <pad> </s> <unk> <mask>), ``gpt2`` (byte-level BPE with <|endoftext|> only), ``unigram`` (T5: a
SentencePiece-style Unigram LM (Kudo 2018) over NFKC text, whitespace runs collapsed, with the metaspace; <pad> </s>
<unk> and UL2's mode tokens [R] [S] [X] first, 100 sentinels <extra_id_99> .. <extra_id_0> last, so <extra_id_0> is
the highest id). Special
tokens are addressed by role (pad, unk, cls, sep, mask, bos, eos) so objectives never hard-code strings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from plm_lightning.errors import ConfigError

KINDS: dict[str, dict[str, str]] = {
    "wordpiece": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    # sop / eop start and end GLM's blank spans (Du et al. 2022: <|startofpiece|>, <|endofpiece|>)
    "bpe": {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>", "bos": "<s>", "eos": "</s>",
            "sop": "<|startofpiece|>", "eop": "<|endofpiece|>"},
    # the fill-in-the-middle sentinels (Bavarian et al. 2022; StarCoder's spelling)
    "gpt2": {"eos": "<|endoftext|>", "bos": "<|endoftext|>", "unk": "<|endoftext|>", "pad": "<|endoftext|>",
             "fim_prefix": "<fim_prefix>", "fim_middle": "<fim_middle>", "fim_suffix": "<fim_suffix>"},
    "unigram": {"pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mode_r": "[R]", "mode_s": "[S]", "mode_x": "[X]"},
}
TRAINING_VERSION = {"wordpiece": 2, "bpe": 3, "gpt2": 3, "unigram": 4}
"""Bumped when a kind's training changes, so cached tokenizers of the old recipe are not reused."""
SENTINELS = 100
"""Sentinel tokens ``<extra_id_0>`` .. ``<extra_id_99>`` appended to a trained unigram vocabulary (T5)."""
SENTENCE_BREAK = "\U000f0000\U000f0001"
"""What joins a document's sentences into one text for :meth:`TextTokenizer.encode_sentences`: two private-use
characters, an added token of a private copy of the tokenizer."""
ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "mode_r", "mode_s", "mode_x", "sop", "eop", "fim_prefix",
         "fim_middle", "fim_suffix")
HF_ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")
"""The roles transformers' special_tokens_map knows; the others stay in our tokenizer_config.json."""
_HF_CLASSES = {"wordpiece": "BertTokenizer", "bpe": "RobertaTokenizer", "gpt2": "GPT2Tokenizer", "unigram": "T5Tokenizer"}


def concatenated(id_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, starts, ends)``: the id lists end to end in one int64 array, list i at ``ids[starts[i]:ends[i]]``."""
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    ends = np.cumsum(lengths)
    ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(ends[-1]) if len(ends) else 0)
    return ids, ends - lengths, ends


class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the ids of its special tokens by role."""

    def __init__(self, tokenizer: Tokenizer, special: dict[str, str], kind: str = "custom",
                 name: str = "tokenizer", file: str | None = None) -> None:
        self.tokenizer, self.special, self.kind, self.name = tokenizer, dict(special), kind, name
        self.file = file
        """The ``tokenizer.json`` it was loaded from (None when built in memory); its bytes key the packing cache."""
        self.ids: dict[str, int] = {}
        for role, token in self.special.items():
            token_id = tokenizer.token_to_id(token)
            if token_id is not None:
                self.ids[role] = token_id

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def require(self, roles: Iterable[str], recipe: str) -> None:
        """Raise a `ConfigError` naming each special-token role ``recipe`` needs that this tokenizer lacks."""
        missing = [r for r in roles if r not in self.ids]
        if missing:
            have = ", ".join(f"{r}={self.special[r]!r}" for r in self.ids) or "none"
            raise ConfigError(
                f"data.tokenizer '{self.name}' has no {'/'.join(missing)} token, which {recipe} needs; it has {have}"
            )

    def sentinel_ids(self) -> np.ndarray:
        """Ids of ``<extra_id_0>``, ``<extra_id_1>``, ... while they exist (T5 span corruption's sentinels)."""
        ids = []
        while (token_id := self.tokenizer.token_to_id(f"<extra_id_{len(ids)}>")) is not None:
            ids.append(token_id)
        return np.asarray(ids, dtype=np.int64)

    def special_ids(self) -> np.ndarray:
        return np.array(sorted(set(self.ids.values())), dtype=np.int64)

    def word_continuations(self) -> np.ndarray | None:
        """Per id, whether the token continues the word before it, where the vocabulary alone says so: a WordPiece
        model behind BERT's pre-tokenizer (its ``##`` pieces continue a word, every other piece starts one; the
        pre-tokenizer makes every ``#`` a word of its own, so a word's first piece never begins with ``##``; added
        tokens are words of their own). None for every other tokenizer: there only the encodings' word ids tell.
        Saves reading each encoding's word ids back from ``tokenizers`` (a third of the flagging of a batch)."""
        if "_word_continuations" not in self.__dict__:
            table = None
            model, pre = self.tokenizer.model, self.tokenizer.pre_tokenizer
            if isinstance(model, models.WordPiece) and isinstance(pre, pre_tokenizers.BertPreTokenizer):
                prefix = model.continuing_subword_prefix
                table = np.zeros(self.vocab_size, dtype=bool)
                for token, token_id in self.tokenizer.get_vocab(with_added_tokens=False).items():
                    table[token_id] = token.startswith(prefix)
                table[list(self.tokenizer.get_added_tokens_decoder())] = False
            self._word_continuations = table
        return self._word_continuations

    def encode_sentences(self, units: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The ids of every sentence of ``units`` (documents, each a list of sentences) as ``(ids, starts, ends)``:
        sentence i, counted over all documents in order, is ``ids[starts[i]:ends[i]]``, exactly the ids of encoding
        it alone. One encoding per document instead of one per sentence, and without offsets (``encode_batch_fast``):
        a document's sentences are joined by :data:`SENTENCE_BREAK`, an added token that ``tokenizers`` cuts out
        of the text before anything else, so each sentence is normalized, pre-tokenized and encoded on its own
        (about a fifth less encoding time on BERT's sentence modes, issue 35's note). None, and the caller encodes
        each sentence, where the vocabulary cannot give the word-start flags (see :meth:`word_continuations`: only
        the encodings' word ids could, and only from offsets), where truncation or padding is set (they would act
        on the joined text), or where a sentence holds the break itself."""
        if self.word_continuations() is None or self.tokenizer.truncation or self.tokenizer.padding:
            return None
        texts = [SENTENCE_BREAK.join(u) for u in units]
        expected = sum(max(len(u) - 1, 0) for u in units)
        if "_sentence_joiner" not in self.__dict__:
            joiner = Tokenizer.from_str(self.tokenizer.to_str())
            joiner.add_special_tokens([AddedToken(SENTENCE_BREAK, special=True, normalized=False)])
            self._sentence_joiner = joiner, joiner.token_to_id(SENTENCE_BREAK)
        joiner, break_id = self._sentence_joiner
        encode = getattr(joiner, "encode_batch_fast", joiner.encode_batch)  # tokenizers < 0.20 has no fast one
        flat, doc_starts, doc_ends = concatenated([e.ids for e in encode(texts, add_special_tokens=False)])
        breaks = np.flatnonzero(flat == break_id)
        if len(breaks) != expected:  # a sentence holds the break (each join is one match, any other adds one)
            return None
        has_sentences = np.fromiter((len(u) > 0 for u in units), dtype=bool, count=len(units))
        starts = np.sort(np.concatenate([doc_starts[has_sentences], breaks + 1]))
        ends = np.sort(np.concatenate([doc_ends[has_sentences], breaks]))
        return flat, starts, ends

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode_batch_with_words(self, texts: Sequence[str], segmenter: str = "tokenizer",
                                ) -> list[tuple[list[int], list[int], list[str]]]:
        """Ids, the word index of each token (-1 for none) and the words' text. Words are the tokenizer's
        pre-tokenization, or with ``segmenter="jieba"`` the words of the jieba segmenter (Chinese whole-word masking,
        Cui et al. 2019: a Chinese BERT tokenizes characters, so only a segmenter knows where words end)."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        if segmenter == "jieba":
            return [_jieba_words(text, e) for text, e in zip(texts, encodings)]
        if segmenter != "tokenizer":
            raise ConfigError(f"data.word_segmenter={segmenter!r} is not one of tokenizer, jieba")
        out = []
        for text, e in zip(texts, encodings):
            spans: dict[int, list[int]] = {}
            for w, (start, end) in zip(e.word_ids, e.offsets):
                if w is not None:
                    span = spans.setdefault(w, [start, end])
                    span[0], span[1] = min(span[0], start), max(span[1], end)
            index = {w: i for i, w in enumerate(sorted(spans))}
            words = [text[spans[w][0]:spans[w][1]].strip() for w in sorted(spans)]  # byte-level BPE offsets keep the space
            out.append((e.ids, [index[w] if w is not None else -1 for w in e.word_ids], words))
        return out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        return self.tokenizer.id_to_token(int(token_id)) or f"<{token_id}>"

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``tokenizer.json`` plus the HF ``tokenizer_config.json`` / ``special_tokens_map.json``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(out / "tokenizer.json"))
        hf_roles = {f"{role}_token": token for role, token in self.special.items() if role in self.ids}
        config = {"tokenizer_class": _HF_CLASSES.get(self.kind, "PreTrainedTokenizerFast") + "Fast",
                  "plm_lightning_kind": self.kind, "model_max_length": 1_000_000, **hf_roles}
        if self.kind == "wordpiece":
            config["do_lower_case"] = True
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        standard = {k: v for k, v in hf_roles.items() if k[: -len("_token")] in HF_ROLES}
        (out / "special_tokens_map.json").write_text(json.dumps(standard, indent=2))

    @classmethod
    def load(cls, path: str | os.PathLike) -> TextTokenizer:
        """Load a directory with ``tokenizer.json`` (ours or a Hugging Face one), or a ``tokenizer.json`` file."""
        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise ConfigError(f"data.tokenizer: '{path}' is neither a tokenizer kind ({', '.join(KINDS)}) nor a "
                              "tokenizer.json file or a directory holding one")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as err:
            raise ConfigError(f"data.tokenizer: cannot read '{file}': {err}") from err
        special: dict[str, str] = {}
        kind = "custom"
        config_file = file.parent / "tokenizer_config.json"
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise ConfigError(f"data.tokenizer: '{config_file}' is not JSON text ({err}); fix it, or remove it "
                                  "to take the special tokens from tokenizer.json's vocabulary") from err
            if not isinstance(config, dict):
                raise ConfigError(f"data.tokenizer: '{config_file}' holds a JSON {type(config).__name__}, not an "
                                  "object of settings (bos_token, eos_token, ...)")
            kind = config.get("plm_lightning_kind", kind)
            for role in ROLES:
                value = config.get(f"{role}_token")
                if isinstance(value, dict):
                    value = value.get("content")
                if isinstance(value, str):
                    special[role] = value
        if not special:  # infer roles from well-known token strings
            vocab = tok.get_vocab()
            for known in KINDS.values():
                special.update({r: t for r, t in known.items() if t in vocab and r not in special})
        return cls(tok, special, kind, name=str(path), file=str(file))


MAX_TRAINING_WORD = 100
"""Characters of a run without whitespace that the tokenizer trainers see as one word; a longer run is shown to them
in pieces of this length. One word of a million characters (a line of zeros, a minified file) takes the trainers
minutes (BPE: 14 s for 600,000 characters, quadratic); no vocabulary entry of ours comes near this length, and
encoding is not affected."""
_LONG_WORD = re.compile(rf"\S{{{MAX_TRAINING_WORD + 1},}}")


def bounded_words(text: str) -> str:
    """``text`` with every run of more than ``MAX_TRAINING_WORD`` non-space characters cut into pieces of that
    length (separated by a space): what the tokenizer trainers see."""
    if len(text) <= MAX_TRAINING_WORD:
        return text
    return _LONG_WORD.sub(lambda m: " ".join(m.group()[i:i + MAX_TRAINING_WORD]
                                             for i in range(0, len(m.group()), MAX_TRAINING_WORD)), text)


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int) -> TextTokenizer:
    """Train a tokenizer of ``kind`` on ``texts`` (Schuster & Nakajima 2012 WordPiece; Sennrich et al. 2016 BPE with
    Radford et al. 2019's byte-level alphabet). Runs without whitespace longer than ``MAX_TRAINING_WORD`` are cut
    for training (``bounded_words``)."""
    texts = (bounded_words(text) for text in texts)
    if kind not in KINDS:
        raise ConfigError(f"data.tokenizer={kind!r} is not a kind to train ({', '.join(KINDS)}) nor an existing path")
    special = KINDS[kind]
    special_tokens = list(dict.fromkeys(special.values()))
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=special["unk"]))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False)
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        # SentencePiece's nmt_nfkc with remove_extra_whitespaces: NFKC, whitespace runs to one space, trimmed
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "),
                                               normalizers.Strip()])
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=max(len(special_tokens) + 1, vocab_size - SENTINELS),
                                          special_tokens=special_tokens, unk_token=special["unk"], show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        tok.add_special_tokens([f"<extra_id_{i}>" for i in range(SENTINELS - 1, -1, -1)])
        return TextTokenizer(tok, special, kind, name=kind)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok, special, kind, name=kind)


def get_tokenizer(spec: str, texts: Callable[[], Iterable[str]], vocab_size: int, cache_dir: Path,
                  fingerprint: str) -> TextTokenizer:
    """A tokenizer kind is trained on the corpus once and cached under ``cache_dir``; anything else is a path.
    ``texts`` is only called when training."""
    if spec not in KINDS:
        return TextTokenizer.load(spec)
    import hashlib

    key = hashlib.sha256(f"{spec}|{vocab_size}|{fingerprint}|{TRAINING_VERSION[spec]}".encode()).hexdigest()[:16]
    target = cache_dir / "tokenizers" / f"{spec}-{vocab_size}-{key}"
    if not (target / "tokenizer.json").is_file():
        tok = train_tokenizer(spec, texts(), vocab_size)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
        tok.save(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    loaded = TextTokenizer.load(target)
    loaded.name = f"{spec} (trained, {target})"
    return loaded


def _jieba_words(text: str, encoding) -> tuple[list[int], list[int], list[str]]:  # noqa: ANN001
    """Token ids, the jieba word of each token (by the token's first character) and the words."""
    try:
        import jieba
    except ImportError as err:
        raise ConfigError("data.word_segmenter=jieba needs jieba: pip install 'plm-lightning[zh]'") from err
    jieba.setLogLevel(60)
    spans = [(start, end) for word, start, end in jieba.tokenize(text) if word.strip()]
    word_of_char = [-1] * (len(text) + 1)
    for w, (start, end) in enumerate(spans):
        word_of_char[start:end] = [w] * (end - start)
    index = [word_of_char[start] if end > start else -1 for start, end in encoding.offsets]
    return encoding.ids, index, [text[a:b] for a, b in spans]
