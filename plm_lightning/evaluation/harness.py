"""EleutherAI's lm-evaluation-harness (Gao et al. 2024, "The Language Model Evaluation Harness", ``lm-eval``) on our
checkpoints, with no export step: the ``plm_lightning`` model type.

A task of lm-eval asks three kinds of request, answered here as lm-eval's own ``hf`` model answers them for a
transformers model, so that the same checkpoint scores the same through either (tested within 1e-4):

- ``loglikelihood(context, continuation)``: ``sum_t log p(c_t | context, c_<t)`` and whether greedy decoding would
  produce the continuation. Trailing spaces of the context move to the continuation, the pair is encoded as one text
  and split (lm-eval's ``TemplateLM._encode_pair``), an empty context is the end-of-text token, and what does not fit
  is cut from the left. Encoder-decoders read the context (and ``</s>``) in the encoder and score the continuation
  in the decoder.
- ``loglikelihood_rolling(text)``: the whole text's log-likelihood in disjoint windows of the model's length, each
  token predicted once with as much context as fits (lm-eval's ``get_rolling_token_windows``): perplexity tasks.
- ``generate_until(context, gen_kwargs)``: our KV-cached ``generate`` (greedy unless ``do_sample``), cut at the
  first ``until`` string.

Masked LMs (BERT, RoBERTa, ALBERT, DeBERTa, ModernBERT; ELECTRA's generator), which lm-eval itself cannot score (its
MLM pull requests #202 and #297 were closed), answer ``loglikelihood`` and ``loglikelihood_rolling`` by
pseudo-log-likelihood (Salazar et al. 2020, "Masked Language Model Scoring", eq. 1): each continuation token masked
in turn, ``sum_t log P(w_t | W_\\t)``, the context and the other tokens visible. ``pll=within_word_l2r`` (Kauf &
Ivanova 2023, "A Better Way to Do Masked Language Model Scoring", sec. 2) also masks the tokens of the same word to
the right of the scored one, so that a word split into pieces is not scored from its own later pieces (the original
PLL's inflation of multi-token words). A masked LM cannot generate: ``generate_until`` on it is a one-line error.

Use: ``python -m plm_lightning evaluate CKPT --tasks hellaswag,lambada_openai`` (lm-eval's task definitions; a local
task YAML with its data files through ``--include-path``), or from Python
``lm_eval.simple_evaluate(model=HarnessLM("last.ckpt"), tasks=[...])``; importing this module also registers the
model type, so ``lm_eval.simple_evaluate(model="plm_lightning", model_args="checkpoint=last.ckpt")`` works.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model

from plm_lightning.errors import ConfigError
from plm_lightning.nn.masks import prefix_lm_mask
from plm_lightning.nn.stack_inputs import StackInputs

PLLVariant = Literal["original", "within_word_l2r"]
MASKED_OBJECTIVES = ("MaskedLM", "DistilBERT", "ELECTRA")
"""Objectives scored by pseudo-log-likelihood (ELECTRA through its generator, the MLM of the pair)."""
NEXT_TOKEN_OBJECTIVES = ("CausalLM", "Seq2SeqLM")
GENERATION_KEYS = ("until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p")
"""The ``gen_kwargs`` of lm-eval's tasks that ``generate_until`` follows; any other is refused, not ignored."""


@register_model("plm_lightning")
class HarnessLM(TemplateLM):
    """A plm_lightning checkpoint (or a transformers directory we import) as an lm-eval model."""

    def __init__(self, checkpoint: str, batch_size: int | str = 16, pll: PLLVariant = "original",
                 max_length: int | None = None, add_bos_token: bool = False, device: str = "cpu") -> None:
        """
        Args:
            checkpoint: A ``.ckpt`` of a causal, encoder-decoder or masked objective of ours, or a transformers
                directory of a family we import.
            batch_size: Requests per forward pass (masked LMs: masked copies per pass).
            pll: Masked LMs' pseudo-log-likelihood: ``original`` (Salazar et al. 2020) or ``within_word_l2r``
                (Kauf & Ivanova 2023).
            max_length: Tokens per input (default: the model's positions).
            add_bos_token: Causal LMs: put the end-of-text token before every context, as lm-eval's ``hf`` model
                does with ``add_bos_token=True`` (default: only before an empty one, as it does by default).
            device: Where the model runs (``cpu``, ``cuda``, ``cuda:1``).
        """
        super().__init__()
        from plm_lightning.objectives.loading import load_pretrained, predicts_next_token

        if pll not in ("original", "within_word_l2r"):
            raise ConfigError(f"evaluate: pll={pll!r} is not one of original, within_word_l2r")
        module, self.tokenizer = load_pretrained(checkpoint, (*NEXT_TOKEN_OBJECTIVES, *MASKED_OBJECTIVES), "evaluate")
        self.kind = type(module).__name__
        if self.kind == "CausalLM" and not predicts_next_token(module):
            raise ConfigError(f"evaluate: '{checkpoint}' was pretrained with data.prediction=masked: its head never "
                              "predicts the next token, so it cannot score continuations")
        self.module = module.to(device).eval()
        self._device = torch.device(device)
        self.masked = self.kind in MASKED_OBJECTIVES
        self.backend = "seq2seq" if self.kind == "Seq2SeqLM" else "causal"
        self.pll, self.add_bos_token = pll, bool(add_bos_token)
        self.batch_size = int(batch_size) if str(batch_size) != "auto" else 16
        if self.batch_size < 1:
            raise ConfigError(f"evaluate: batch_size={batch_size} must be >= 1")
        self.checkpoint = str(checkpoint)
        config = module.config
        room = int(config.max_position_embeddings) - int(getattr(config, "position_offset", 0) or 0)
        self._max_length = min(int(max_length), room) if max_length else room
        ids = self.tokenizer.ids
        if self.masked:
            from plm_lightning.knowledge.lm import LanguageModel

            self.view = LanguageModel(module, self.tokenizer, self.checkpoint)  # the stack and head at [MASK]
            self._eot = ids.get("sep", ids.get("eos", 0))
        else:
            from plm_lightning.objectives.loading import reads_bidirectionally
            from plm_lightning.prediction import decoding_ids

            self.tokenizer.require(("eos",), "evaluate")
            self._eot, self.start_id = decoding_ids(module, self.tokenizer)
            self.prefix_lm = reads_bidirectionally(module)

    # -- what lm-eval asks of a model -------------------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return int(self._eot)

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def device(self) -> torch.device:
        return self._device

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        ids = self.tokenizer.encode_batch([string])[0] if string else []
        if self.backend == "causal" and not self.masked and self.add_bos_token and add_special_tokens is not False:
            ids = [self.eot_token_id, *ids]
        return ids

    def tok_decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str] | tuple[None, ...], list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        if self.masked:
            out = []
            for strings, context, continuation in requests:
                if strings[0] == "":  # lm-eval's stand-in for an empty context: the MLM reads [CLS] continuation [SEP]
                    context = []
                words = self._word_ids("".join(strings), context, continuation) if self.pll == "within_word_l2r" \
                    else None
                out.append(self._pseudo_log_likelihood(context, continuation, words))
            return out
        if self.backend == "seq2seq":
            return [self._seq2seq_log_likelihood([] if strings[0] == "" else context, continuation)
                    for strings, context, continuation in requests]
        results: list[tuple[float, bool]] = []
        for start in range(0, len(requests), self.batch_size):
            results.extend(self._causal_batch([(c, t) for _, c, t in requests[start: start + self.batch_size]]))
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        out = []
        for (string,) in (request.args for request in requests):
            if self.masked:  # the whole text's PLL, window by window (each token masked once, its window visible)
                ids = self.tok_encode(string)
                words = self._word_ids(string, [], ids) if self.pll == "within_word_l2r" else None
                total, done = 0.0, 0
                for _, target in lm_utils.get_rolling_token_windows(ids, self.eot_token_id, self.max_length - 2, 1):
                    piece = None if words is None else words[done: done + len(target)]
                    total += self._pseudo_log_likelihood(ids[max(0, done - 1): done], target, piece)[0]
                    done += len(target)
            else:
                windows = lm_utils.get_rolling_token_windows(self.tok_encode(string), self.prefix_token_id,
                                                             self.max_length, 1)
                pieces = [((None,), *lm_utils.make_disjoint_window(w)) for w in windows]
                total = sum(score for score, _ in self._loglikelihood_tokens(pieces))
            out.append(total)
        return out

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        if self.masked:
            raise ConfigError(f"evaluate: '{self.checkpoint}' is a {self.kind} model: it fills masks and cannot "
                              "generate_until; choose loglikelihood tasks (multiple_choice, loglikelihood, "
                              "loglikelihood_rolling) or a causal or encoder-decoder checkpoint")
        from plm_lightning.generation import generate

        out = []
        for context, gen_kwargs in (request.args for request in requests):
            config, until = generation_settings(gen_kwargs, self.tok_decode([self.eot_token_id]))
            room = self.max_length - (0 if self.backend == "seq2seq" else config.max_new_tokens)
            ids = self.tok_encode(context)
            ids = ids[-(room - 1 if self.backend == "seq2seq" else room):] if room > 1 else ids[-1:]
            if self.backend == "seq2seq":
                ids = [*ids, self.eot_token_id]
            tokens = generate(self.module, torch.tensor([ids], device=self.device), None, config, self._eot,
                              self.start_id)[0]
            text = self.tok_decode([t for t in tokens if t != self._eot])
            for stop in until:
                if stop:
                    text = text.split(stop)[0]
            out.append(text)
        return out

    # -- the three readers ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _causal_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """lm-eval's ``hf`` scoring: ``(context + continuation)[-(max_length + 1):][:-1]`` read causally (right
        padding is never attended by the real tokens before it), the continuation's log-probabilities summed."""
        rows = [(context + continuation)[-(self.max_length + 1):][:-1] for context, continuation in pairs]
        length = max(len(r) for r in rows)
        pad = self.tokenizer.ids.get("pad", 0)
        ids = torch.full((len(rows), length), pad, dtype=torch.long, device=self.device)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        shape: dict[str, Any] = {}
        if self.prefix_lm:  # a continuum decoder reads the context as the bidirectional prefix it was pretrained with
            prefixes = torch.tensor([len(r) - len(c) + 1 for r, (_, c) in zip(rows, pairs)], device=self.device)
            shape = {"mask": prefix_lm_mask(prefixes.clamp(min=0), length), "causal": False}
        hidden = self.module.backbone(ids, StackInputs(**shape)).last_hidden_state
        results = []
        for i, (row, (_, continuation)) in enumerate(zip(rows, pairs)):
            end = len(row)
            logprobs = self.module.lm_head(hidden[i, end - len(continuation): end]).float().log_softmax(-1)
            target = torch.tensor(continuation, device=self.device)
            results.append((float(logprobs.gather(1, target[:, None]).sum()),
                            bool((logprobs.argmax(-1) == target).all())))
        return results

    @torch.no_grad()
    def _seq2seq_log_likelihood(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """The context (and end of text) in the encoder, the continuation teacher-forced in the decoder after its
        start token."""
        encoder = [*context[-(self.max_length - 1):], self.eot_token_id]
        target = continuation[: self.max_length]
        batch = {"input_ids": torch.tensor([encoder], device=self.device),
                 "decoder_input_ids": torch.tensor([[self.start_id, *target[:-1]]], device=self.device)}
        logprobs = self.module.lm_head(self.module.decode(batch))[0].float().log_softmax(-1)
        labels = torch.tensor(target, device=self.device)
        return float(logprobs.gather(1, labels[:, None]).sum()), bool((logprobs.argmax(-1) == labels).all())

    @torch.no_grad()
    def _pseudo_log_likelihood(self, context: list[int], continuation: list[int],
                               words: list[int] | None = None) -> tuple[float, bool]:
        """``[CLS] context continuation [SEP]`` with each continuation token masked in turn (and, given the word of
        each continuation token, ``within_word_l2r``'s later pieces of its word): the summed log-probabilities of
        the tokens at their masks, and whether each is its mask's argmax."""
        special = self.tokenizer.ids
        room = self.max_length - 2
        if len(continuation) > room:
            continuation, words = continuation[-room:], None if words is None else words[-room:]
        context = context[len(context) - (room - len(continuation)):] if room > len(continuation) else []
        row = torch.tensor([special["cls"], *context, *continuation, special["sep"]], device=self.device)
        first = 1 + len(context)
        positions = list(range(first, first + len(continuation)))
        total, greedy = 0.0, True
        for start in range(0, len(positions), self.batch_size):
            chunk = positions[start: start + self.batch_size]
            copies = row.repeat(len(chunk), 1)
            for n, p in enumerate(chunk):
                copies[n, p] = special["mask"]
                if words is not None and words[p - first] >= 0:  # the same word's later pieces are hidden too
                    q = p + 1
                    while q < first + len(continuation) and words[q - first] == words[p - first]:
                        copies[n, q] = special["mask"]
                        q += 1
            where = torch.tensor(chunk, device=self.device)
            hidden = self.view.backbone(copies, StackInputs()).last_hidden_state[torch.arange(len(chunk)), where]
            logprobs = self.view.logits(hidden).float().log_softmax(-1)
            target = row[where]
            total += float(logprobs.gather(1, target[:, None]).sum())
            greedy &= bool((logprobs.argmax(-1) == target).all())
        return total, greedy

    def _word_ids(self, text: str, context: list[int], continuation: list[int]) -> list[int]:
        """The word of each continuation token, from the tokenizer's pre-tokenization of the request's whole text
        (which encodes as ``context + continuation``: lm-eval splits the pair's joint encoding)."""
        ids, words, _ = self.tokenizer.encode_batch_with_words([text])[0]
        if ids != [*context, *continuation]:
            raise ConfigError("evaluate: pll=within_word_l2r needs the request's text to encode as its context and "
                              "continuation tokens, and it does not here; use pll=original")
        return words[len(context):]


def generation_settings(gen_kwargs: dict[str, Any], end_of_text: str) -> tuple[Any, list[str]]:
    """(our ``GenerationConfig``, the stop strings) of an lm-eval request's ``gen_kwargs``; a key we would not follow
    is a one-line error naming what is followed."""
    from plm_lightning.generation import GenerationConfig

    kwargs = dict(gen_kwargs or {})
    unknown = sorted(set(kwargs) - set(GENERATION_KEYS))
    if unknown:
        raise ConfigError(f"evaluate: generation setting(s) {', '.join(unknown)} of the task are not followed here; "
                          f"supported: {', '.join(GENERATION_KEYS)}")
    until = kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    if end_of_text not in until:
        until.append(end_of_text)
    sample = bool(kwargs.get("do_sample", False)) and float(kwargs.get("temperature", 1.0) or 0.0) > 0
    config = GenerationConfig(strategy="sample" if sample else "greedy",
                              max_new_tokens=int(kwargs.get("max_gen_toks", 256)),
                              temperature=float(kwargs.get("temperature", 1.0)) if sample else 1.0,
                              top_k=int(kwargs.get("top_k", 0) or 0), top_p=float(kwargs.get("top_p", 1.0) or 1.0),
                              seed=1234 if sample else None)
    return config, until


__all__ = ["HarnessLM", "generation_settings"]
