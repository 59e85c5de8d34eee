"""Text generation for the causal (GPT-2, Transformer-XL) and encoder-decoder (T5) objectives: greedy, top-k / top-p sampling and
beam search, with a key-value cache so each new token costs one position of work (``use_cache=False`` recomputes
the whole prefix at every step, the reference the cache is tested against).

Sampling follows Holtzman et al. 2020 (nucleus: the smallest set of tokens whose probability reaches ``top_p``)
and Fan et al. 2018 (top-k); beam search keeps the ``num_beams`` best partial sequences by summed log-probability
and ranks finished ones by that sum / length^``length_penalty`` (Wu et al. 2016, as transformers does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.nn.attention import LayerCache
from plm_lightning.nn.masks import prefix_lm_mask
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.nn.xl_stack import XLStack

Strategy = Literal["greedy", "sample", "beam"]


@dataclass
class GenerationConfig:
    strategy: Strategy = "greedy"
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_k: int = 0
    """Sample among the k most probable tokens (0 = all)."""
    top_p: float = 1.0
    """Sample among the smallest set of tokens whose probability reaches p (1 = all)."""
    num_beams: int = 4
    length_penalty: float = 1.0
    use_cache: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("greedy", "sample", "beam"):
            raise ConfigError(f"--strategy={self.strategy!r} is not one of greedy, sample, beam")
        if self.max_new_tokens < 1 or self.num_beams < 1 or self.top_k < 0:
            raise ConfigError(f"--max-new-tokens={self.max_new_tokens} and --num-beams={self.num_beams} must be >= 1 "
                              f"and --top-k={self.top_k} >= 0")
        if not 0.0 < self.top_p <= 1.0 or self.temperature <= 0:
            raise ConfigError(f"--top-p={self.top_p} must lie in (0, 1] and --temperature={self.temperature} be > 0")


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """``logits`` ``[N, V]`` with everything outside the top-k and the top-p nucleus set to -inf."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True, dim=-1)
        probs = ordered.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # keep the token that crosses p
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


class Decoding:
    """One model's incremental interface: ``start`` encodes the prompt (and caches it), ``step`` scores the next
    token given the new tokens, ``reorder`` follows beam search's choice of parents."""

    def __init__(self, model: torch.nn.Module, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.encoder_out: Tensor | None = None
        self.encoder_mask: Tensor | None = None
        self.cache: list[LayerCache] | None = None
        self.memory: list[Tensor] | None = None
        self.prompt_mask: Tensor | None = None
        """A causal LM's left-padded prompts: which prompt tokens are real (None: no padding)."""
        self.prefix: int | None = None
        """A prefix-LM decoder's (continuum, ``data.bidirectional_fraction > 0``) bidirectional prefix: the prompt."""

    def _decoder(self) -> torch.nn.Module:
        backbone = self.model.backbone
        return backbone.decoder if hasattr(backbone, "decoder") else backbone

    def start(self, input_ids: Tensor, attention_mask: Tensor, start_id: int | None) -> Tensor:
        """The decoder's first tokens: the prompt itself (causal LM) or ``start_id`` (encoder-decoder)."""
        backbone = self.model.backbone
        if hasattr(backbone, "encoder"):
            self.encoder_out = backbone.encoder(input_ids, StackInputs(attention_mask=attention_mask)).last_hidden_state
            self.encoder_mask = attention_mask
            return torch.full((input_ids.shape[0], 1), start_id, dtype=input_ids.dtype, device=input_ids.device)
        if not bool(attention_mask.all()):
            if bool((attention_mask[:, 1:] < attention_mask[:, :-1]).any()):
                raise ConfigError("generate: pad causal prompts on the left (padding after a real token would sit "
                                  "between the prompt and its continuation)")
            if isinstance(self._decoder(), XLStack):
                raise ConfigError("generate: Transformer-XL prompts in one batch must have the same length (its "
                                  "memory has no padding mask)")
            self.prompt_mask = attention_mask
        from plm_lightning.objectives.loading import reads_bidirectionally

        if reads_bidirectionally(self.model):  # the prompt is read as it was pretrained: as the bidirectional prefix
            self.prefix = input_ids.shape[1]
        return input_ids

    def step(self, sequence: Tensor, new: int) -> Tensor:
        """Next-token logits ``[N, V]`` after ``sequence`` ``[N, T]``, of which the last ``new`` are not cached."""
        decoder = self._decoder()
        if isinstance(decoder, XLStack):  # Transformer-XL: its segment memory (hidden states of every earlier token)
            tokens = sequence[:, -new:] if self.use_cache else sequence  # is the cache (Dai et al. 2019, sec. 3.2)
            out = decoder(tokens, StackInputs(memory=self.memory if self.use_cache else None,
                                              memory_length=sequence.shape[1] if self.use_cache else 0))
            self.memory = out.memory
            return self.model.lm_head(out.last_hidden_state[:, -1]).float()
        if self.use_cache and self.cache is None:
            self.cache = [LayerCache() for _ in decoder.blocks()]
        tokens = sequence[:, -new:] if self.use_cache else sequence
        kwargs = {}
        mask = None
        if self.encoder_out is not None:
            kwargs = {"encoder_out": self.encoder_out, "encoder_attention_mask": self.encoder_mask}
        elif self.prompt_mask is not None:  # left padding: keys masked, positions counted from the first real token
            grown = sequence.shape[1] - self.prompt_mask.shape[1]
            mask = torch.cat([self.prompt_mask, self.prompt_mask.new_ones(sequence.shape[0], grown)], dim=1)
            kwargs = {"position_ids": (mask.cumsum(1) - 1).clamp(min=0)[:, -tokens.shape[1]:]}
        if self.prefix is not None and tokens.shape[1] == sequence.shape[1]:  # the prompt's tokens see each other
            prefix = torch.full((sequence.shape[0],), self.prefix, device=sequence.device)
            kwargs.update(mask=prefix_lm_mask(prefix, sequence.shape[1]), causal=False)
        out = decoder(tokens, StackInputs(attention_mask=mask, cache=self.cache if self.use_cache else None, **kwargs))
        hidden = out.last_hidden_state[:, -1]
        cfg = self.model.config
        if self.encoder_out is not None and cfg.tie_word_embeddings and cfg.tied_output_scaling:
            hidden = hidden * cfg.hidden_size ** -0.5
        return self.model.lm_head(hidden).float()

    def reorder(self, parents: Tensor) -> None:
        if self.encoder_out is not None:
            self.encoder_out = self.encoder_out.index_select(0, parents)
            self.encoder_mask = self.encoder_mask.index_select(0, parents)
        if self.prompt_mask is not None:
            self.prompt_mask = self.prompt_mask.index_select(0, parents)
        for layer in self.cache or []:
            layer.reorder(parents)
        if self.memory is not None:
            self.memory = [m.index_select(0, parents) for m in self.memory]


@torch.no_grad()
def generate(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor | None, config: GenerationConfig,
             eos_id: int | None, start_id: int | None = None, generator: torch.Generator | None = None
             ) -> list[list[int]]:
    """The new tokens for each row of ``input_ids`` (a causal LM continues it; an encoder-decoder reads it and writes
    from ``start_id``), stopping at ``eos_id`` (kept) or ``max_new_tokens``. Causal prompts of different lengths
    are padded on the left: each row then continues exactly as it would alone (positions count its real tokens,
    padding is never attended), as transformers' ``generate`` does. Sampling draws from ``generator`` (one for a
    whole file of prompts, so that each prompt gets draws of its own), else from one seeded by ``config.seed``."""
    model.eval()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if config.strategy == "beam":
        return _beam_search(model, input_ids, attention_mask, config, eos_id, start_id)
    state = Decoding(model, config.use_cache)
    sequence = state.start(input_ids, attention_mask, start_id)
    prompt = sequence.shape[1]
    if generator is None and config.seed is not None:
        generator = torch.Generator().manual_seed(config.seed)
    done = torch.zeros(sequence.shape[0], dtype=torch.bool, device=sequence.device)
    new = prompt
    for _ in range(config.max_new_tokens):
        logits = state.step(sequence, new)
        if config.strategy == "greedy":
            token = logits.argmax(-1)
        else:
            probs = filter_logits(logits / config.temperature, config.top_k, config.top_p).softmax(-1)
            # drawn on the generator's device (the CPU): the same seed gives the same draws on every device
            where = probs.device if generator is None else generator.device
            token = torch.multinomial(probs.to(where), 1, generator=generator).squeeze(-1).to(probs.device)
        if eos_id is not None:
            token = torch.where(done, torch.full_like(token, eos_id), token)
            done |= token == eos_id
        sequence = torch.cat([sequence, token[:, None]], dim=1)
        new = 1
        if bool(done.all()):
            break
    return [_until_eos(row[prompt:].tolist(), eos_id) for row in sequence]


def _until_eos(tokens: list[int], eos_id: int | None) -> list[int]:
    return tokens[: tokens.index(eos_id) + 1] if eos_id is not None and eos_id in tokens else tokens


def _beam_search(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, config: GenerationConfig,
                 eos_id: int | None, start_id: int | None) -> list[list[int]]:
    results = []
    for row in range(input_ids.shape[0]):  # one prompt at a time keeps the beams of different prompts apart
        ids, mask = input_ids[row:row + 1], attention_mask[row:row + 1]
        if not hasattr(model.backbone, "encoder"):
            ids = ids[:, mask[0].bool()]
            mask = torch.ones_like(ids)
        results.append(_beam_one(model, ids, mask, config, eos_id, start_id))
    return results


def _beam_one(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, config: GenerationConfig,
              eos_id: int | None, start_id: int | None) -> list[int]:
    k = config.num_beams
    state = Decoding(model, config.use_cache)
    sequence = state.start(input_ids, attention_mask, start_id)
    prompt = sequence.shape[1]
    device = sequence.device
    scores = torch.zeros(1, device=device)
    finished: list[tuple[float, list[int]]] = []
    new = prompt
    for step in range(config.max_new_tokens):
        logprobs = state.step(sequence, new).log_softmax(-1)
        candidates = (scores[:, None] + logprobs).flatten()
        top = torch.topk(candidates, min(2 * k, candidates.numel()))
        vocab = logprobs.shape[-1]
        keep_parents, keep_tokens, keep_scores = [], [], []
        for score, flat in zip(top.values.tolist(), top.indices.tolist()):
            parent, token = divmod(flat, vocab)
            if eos_id is not None and token == eos_id:
                tokens = [*sequence[parent, prompt:].tolist(), token]
                finished.append((score / len(tokens) ** config.length_penalty, tokens))
            else:
                keep_parents.append(parent)
                keep_tokens.append(token)
                keep_scores.append(score)
            if len(keep_parents) == k:
                break
        best_open = max(keep_scores) / (step + 1) ** config.length_penalty if keep_scores else float("-inf")
        if len(finished) >= k and max(f[0] for f in finished) >= best_open or not keep_parents:
            break
        parents = torch.tensor(keep_parents, device=device)
        state.reorder(parents)
        sequence = torch.cat([sequence.index_select(0, parents), torch.tensor(keep_tokens, device=device)[:, None]], dim=1)
        scores = torch.tensor(keep_scores, device=device)
        new = 1
    if not finished:
        best = int(scores.argmax())
        return sequence[best, prompt:].tolist()
    return max(finished, key=lambda f: f[0])[1]


def sequence_logprob(model: torch.nn.Module, input_ids: Tensor, continuation: list[int],
                     start_id: int | None = None) -> float:
    """Summed log-probability of ``continuation`` after ``input_ids`` (one prompt), by full recomputation."""
    state = Decoding(model, use_cache=False)
    sequence = state.start(input_ids, torch.ones_like(input_ids), start_id)
    total = 0.0
    for token in continuation:
        total += float(state.step(sequence, sequence.shape[1]).log_softmax(-1)[0, token])
        sequence = torch.cat([sequence, torch.tensor([[token]], device=sequence.device)], dim=1)
    return total


__all__ = ["GenerationConfig", "filter_logits", "generate", "sequence_logprob"]
