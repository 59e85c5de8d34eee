"""``predict``: generate from a text file of prompts with a trained causal LM (continue each prompt, or fill the
``<fim_middle>`` hole of a FIM-trained one) or an encoder-decoder (T5: fill the sentinels of each prompt; BART:
reconstruct the prompt, its ``<mask>`` tokens filled), one output per prompt."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import torch

from plm_lightning.errors import ConfigError
from plm_lightning.files import read_user_text
from plm_lightning.generation import GenerationConfig, generate

SENTINEL = re.compile(r"<extra_id_(\d+)>")
FIM_HOLE = "<fim_middle>"
"""Where a fill-in-the-middle prompt's hole is: ``prefix<fim_middle>suffix``."""


def load_generator(path: str, purpose: str = "predict (generation)") -> tuple[torch.nn.Module, Any]:
    """(model in eval mode, tokenizer) of a CausalLM / Seq2SeqLM checkpoint of ours or a transformers directory."""
    from plm_lightning.objectives.loading import load_pretrained, predicts_next_token

    model, tok = load_pretrained(path, ("CausalLM", "Seq2SeqLM"), purpose)
    if not predicts_next_token(model):
        raise ConfigError(f"{purpose}: '{path}' was pretrained with data.prediction=masked: its head fills masked positions in "
                          "place and never predicts the next token, so it cannot generate or score continuations "
                          "(a data.prediction=next_token checkpoint can)")
    return model, tok


def decoding_ids(model: torch.nn.Module, tok: Any) -> tuple[int | None, int | None]:
    """A generator's (end-of-sequence id, decoder start id); the start id is None for a causal LM, else the token
    its decoder starts from (T5: pad, BART: eos)."""
    start = tok.ids.get(getattr(model, "decoder_start_token", "pad"), 0) if hasattr(model.backbone, "encoder") else None
    return tok.ids.get("eos"), start


def fill_sentinels(prompt: str, output: str) -> str:
    """T5: put each generated span where its sentinel stands in the prompt (``<extra_id_0> a <extra_id_1> b``)."""
    pieces = SENTINEL.split(output)
    spans = {int(pieces[i]): pieces[i + 1].strip() for i in range(1, len(pieces) - 1, 2)}
    return SENTINEL.sub(lambda m: spans.get(int(m.group(1)), m.group(0)), prompt)


def fill_middle(model: torch.nn.Module, tok: Any, prompt: str, config: GenerationConfig,
                generator: torch.Generator | None = None) -> dict[str, str]:
    """FIM (Bavarian et al. 2022): ``prefix<fim_middle>suffix`` as PSM, ``<PRE> prefix <SUF> suffix <MID>``, the
    middle generated until end-of-text."""
    prefix, suffix = prompt.split(FIM_HOLE, 1)
    encode = lambda text: tok.encode_batch([text])[0] if text else []  # noqa: E731
    ids = [tok.ids["fim_prefix"], *encode(prefix), tok.ids["fim_suffix"], *encode(suffix), tok.ids["fim_middle"]]
    eos = tok.ids.get("eos")
    out = generate(model, torch.tensor([ids]), None, config, eos, generator=generator)[0]
    middle = tok.decode([t for t in out if t != eos], skip_special_tokens=False)
    return {"prompt": prompt, "output": middle, "filled": prefix + middle + suffix}


def predict_file(checkpoint: str, prompts_file: str, config: GenerationConfig) -> list[dict[str, str]]:
    if prompts_file == "-":
        text = sys.stdin.read()
    elif not Path(prompts_file).exists():
        raise ConfigError(f"predict: no such prompts file '{prompts_file}' (one prompt per line)")
    else:
        text = read_user_text(prompts_file, "predict: the prompts file")
    prompts = [line.rstrip("\n") for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ConfigError(f"predict: '{prompts_file}' has no prompt (one prompt per line)")
    model, tok = load_generator(checkpoint)
    encoder_decoder = hasattr(model.backbone, "encoder")
    eos, start = decoding_ids(model, tok)
    framed = encoder_decoder and getattr(model, "decoder_start_token", "pad") == "eos" and "bos" in tok.ids  # BART
    # one stream of draws for the file: each prompt samples its own, and the file is reproducible from --seed
    generator = torch.Generator()  # its own seed when none is given: the global generator is left alone
    if config.seed is not None:
        generator.manual_seed(config.seed)
    else:
        generator.seed()
    results = []
    for prompt in prompts:
        if not encoder_decoder and FIM_HOLE in prompt and "fim_prefix" in tok.ids:
            results.append(fill_middle(model, tok, prompt, config, generator))
            continue
        ids = tok.encode_batch([prompt])[0]
        if encoder_decoder and eos is not None:
            ids = [*([tok.ids["bos"]] if framed else []), *ids, eos]
        if not ids:
            raise ConfigError(f"predict: the prompt {prompt!r} has no tokens")
        out = generate(model, torch.tensor([ids]), None, config, eos, start, generator)
        if framed and out[0][:1] == [tok.ids["bos"]]:
            out[0] = out[0][1:]
        text = tok.decode(out[0], skip_special_tokens=False)
        row = {"prompt": prompt, "output": text.replace(tok.special.get("eos", "\0"), "").strip()}
        if encoder_decoder and SENTINEL.search(prompt):
            row["filled"] = fill_sentinels(prompt, row["output"])
        results.append(row)
    return results
