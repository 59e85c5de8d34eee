"""Packed rows never leak between documents where a recipe says they do not (``data.document_mask: true``): change
one document of a packed row and every other document's hidden states (every layer), logits and per-token losses
stay bitwise the same, for each recipe's packing mode and mask shape (bidirectional, causal, banded local, prefix-LM,
fill-in-the-middle, UniLM's mixture, unpadded ModernBERT windows, DeBERTa's relative attention), with its real
collator on blocks streamed from shards on disk, under the eager and SDPA backends and the xformers path
(block-diagonal masks; on CPU through an SDPA stand-in for its kernel). Contiguous GPT-2 rows without document masks
(as the papers trained) let later documents see earlier ones: the test checks that they do. Recipes whose rows
cannot keep documents apart refuse the option with one line."""

import json

import pytest
import torch
import yaml

from tests.conftest import ROOT, cli_error

SEPARATING = ["roberta", "modernbert", "deberta", "electra", "xlm", "gpt2", "gpt3", "continuum", "gpt2-fim"]
"""Recipes whose rows keep documents apart with ``data.document_mask: true`` (one per mask shape and packing)."""

ONE_DOCUMENT_ROWS = ["unilm"]
"""Recipes whose rows never hold two documents (``continuation_pairs``: A and B of one document)."""

REFUSING = ["t5", "t5-v1_1", "mt5", "ul2", "ul2-decoder", "bart", "mass", "glm", "xlnet", "realm", "transformer-xl"]

SAME_AS = {"bert": "roberta", "bert-wwm": "roberta", "spanbert": "roberta", "albert": "roberta", "ernie": "roberta",
           "ernie2": "roberta", "ernie-thu": "roberta", "mbert": "xlm", "deberta-v3": "electra",
           "distilbert": "roberta"}
"""Recipes with the data module and attention of a listed one (their masking and packing differ, not the mask)."""


@pytest.fixture(scope="module")
def short_documents(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The synthetic world's documents (about 20 tokens each, so a 64-token row packs several), as a JSON-lines
    file that the recipes stream into shards."""
    from plm_lightning.corpus.world import world_from_spec

    return world_from_spec("world").save(tmp_path_factory.mktemp("world"))["corpus.jsonl"]


def _build(recipe: str, source: str, backend: str, document_mask: bool = True):
    from types import SimpleNamespace

    from plm_lightning.recipe_cli import build_recipe

    config = ROOT / "configs" / f"{recipe}.yaml"
    model_args = yaml.safe_load(config.read_text())["model"].get("init_args", {})
    overrides = {**(model_args.get("backbone_overrides") or {}), "attention_backend": backend, "dropout": 0.0,
                 "attention_dropout": 0.0}
    args = ["--data.source", source, "--data.document_mask", str(document_mask).lower(), "--data.seq_len", "64",
            "--data.batch_size", "8", "--model.backbone_overrides", json.dumps(overrides),
            "--model.sparse_final_layer", "false"]
    datamodule, model = build_recipe([str(config)], args)
    model._trainer = SimpleNamespace(datamodule=datamodule, world_size=1, global_rank=0, strategy=None)
    model.setup("fit")
    model.eval()
    return datamodule, model


def _packed_batch(datamodule) -> tuple[dict, int]:
    """A training batch and a row of it that holds at least two documents."""
    for batch in datamodule.train_dataloader():
        rows = torch.nonzero(batch["document_ids"].max(1).values >= 1).flatten()
        if len(rows):
            return batch, int(rows[0])
    raise AssertionError("no row packs two documents")


def _run(model, batch: dict) -> dict[str, list[torch.Tensor]]:
    """Every transformer block's output, and for each LM head call its logits at every position (the head on its
    input) and the per-token losses it returned, placed at their positions (0 elsewhere)."""
    from plm_lightning.nn.block import TransformerBlock
    from plm_lightning.nn.heads import LMHead

    seen: dict[str, list[torch.Tensor]] = {"hidden": [], "logits": [], "losses": []}
    inside = []

    def on_head(head, args, kwargs, out):  # noqa: ANN001, ANN202
        hidden = args[0] if args else kwargs["hidden"]
        positions = args[1] if len(args) > 1 else kwargs.get("positions")
        if hidden.dim() != 3 or inside:
            return
        inside.append(True)
        with torch.no_grad():
            seen["logits"].append(head(hidden).detach().clone())
        inside.pop()
        if hasattr(out, "token_losses") and positions is not None and positions.dtype == torch.bool:
            placed = torch.zeros(positions.shape)
            placed[positions] = out.token_losses.detach().float()
            seen["losses"].append(placed)

    hooks = [m.register_forward_hook(lambda _m, _i, out: seen["hidden"].append(
        (out[0] if isinstance(out, tuple) else out).detach().clone()))
        for m in model.modules() if isinstance(m, TransformerBlock)]
    hooks += [m.register_forward_hook(on_head, with_kwargs=True) for m in model.modules() if isinstance(m, LMHead)]
    torch.manual_seed(0)  # ELECTRA samples its replacements: the same draws in both runs
    try:
        with torch.no_grad():
            model.compute_loss({k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()})
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _change_document(batch: dict, row: int, document: int, vocab_size: int, special: set[int]) -> dict:
    """The batch with the ordinary tokens of one document of ``row`` replaced by other ordinary tokens."""
    changed = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
    ids = changed["input_ids"][row]
    where = (batch["document_ids"][row] == document) & ~torch.isin(ids, torch.tensor(sorted(special)))
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special])
    replaced = ordinary[(torch.searchsorted(ordinary, ids[where]) + 7) % len(ordinary)]
    assert where.any() and bool((replaced != ids[where]).all())
    ids[where] = replaced
    return changed


def _rows(t: torch.Tensor, real: torch.Tensor) -> torch.Tensor | None:
    """``t`` as ``[B, L, ...]``: as it is, or from the unpadded ``[real tokens, ...]`` that ModernBERT and the
    xformers path compute on (zeros at the padding); ``real`` is the batch's ``[B, L]`` non-padding."""
    if t.dim() >= 2 and t.shape[:2] == real.shape:
        return t
    if t.dim() >= 3 and t.shape[0] == 1:  # one flat stream [1, tokens, H]
        t = t[0]
    if t.shape[0] == int(real.sum()):
        full = t.new_zeros(*real.shape, *t.shape[1:])
        full[real] = t
        return full
    return None


def _compare(before: dict, after: dict, row: int, others: torch.Tensor, real: torch.Tensor) -> dict[str, bool]:
    """Whether each kind of output is bitwise the same at the positions ``others`` of ``row``."""
    same = {}
    for kind in ("hidden", "logits", "losses"):
        pairs = [(_rows(a, real), _rows(b, real)) for a, b in zip(before[kind], after[kind])]
        pairs = [(a, b) for a, b in pairs if a is not None]
        if kind == "losses" and not pairs:
            continue  # a head that takes index positions (ELECTRA's generator): its logits are compared
        assert pairs, f"no {kind} of the row's length were captured"
        same[kind] = all(torch.equal(a[row][others], b[row][others]) for a, b in pairs)
    return same


def _xformers_stand_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tests.test_varlen import sdpa_standing_in_for_xformers, xformers_ops

    calls: list[str] = []
    monkeypatch.setattr(xformers_ops, "memory_efficient_attention", sdpa_standing_in_for_xformers(calls))
    monkeypatch.setattr("plm_lightning.nn.attention.resolve_backend", lambda backend, device: backend)
    monkeypatch.setattr("plm_lightning.nn.attention_plan.resolve_backend", lambda backend, device: backend)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "sdpa", "xformers"])
@pytest.mark.parametrize("recipe", SEPARATING)
def test_changing_one_document_leaves_the_others_of_its_row_bitwise_unchanged(recipe, backend, short_documents,
                                                                               monkeypatch):
    calls = _xformers_stand_in(monkeypatch) if backend == "xformers" else []
    datamodule, model = _build(recipe, short_documents, backend)
    assert datamodule.streams_from_disk()
    batch, row = _packed_batch(datamodule)
    documents = batch["document_ids"]
    real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(documents, dtype=bool)
    special = set(datamodule.tokenizer.ids.values())
    before = _run(model, batch)
    for changed_document in (0, int(documents[row].max())):
        after = _run(model, _change_document(batch, row, changed_document, model.config.vocab_size, special))
        others = (documents[row] != changed_document) & (documents[row] >= 0)
        assert others.any()
        same = _compare(before, after, row, others, real)
        assert all(same.values()), (recipe, backend, changed_document, same)
        mine = documents[row] == changed_document
        assert not _compare(before, after, row, mine, real)["hidden"]  # the changed document did change
    if backend == "xformers" and recipe in ("gpt2", "gpt3", "gpt2-fim"):  # rows without padding: varlen kernels
        assert any(c.startswith("BlockDiagonal") for c in calls), calls


@pytest.mark.slow
def test_contiguous_rows_without_document_masks_let_later_documents_see_earlier_ones(short_documents):
    """GPT-2 as trained (documents joined by the end-of-text token, no mask between them): changing the first
    document of a row changes what the later ones compute, while the first stays blind to the later ones (causal)."""
    datamodule, model = _build("gpt2", short_documents, "sdpa")
    batch, row = _packed_batch(datamodule)
    documents = batch.pop("document_ids")
    special = set(datamodule.tokenizer.ids.values())
    plain = {**batch}
    before = _run(model, plain)
    changed = _change_document({**batch, "document_ids": documents}, row, 0, model.config.vocab_size, special)
    changed.pop("document_ids")
    after = _run(model, changed)
    real = torch.ones_like(documents, dtype=bool)
    later = documents[row] >= 1
    same = _compare(before, after, row, later, real)
    assert same == {"hidden": False, "logits": False, "losses": False}
    last = documents[row] == documents[row].max()
    changed_last = _change_document({**batch, "document_ids": documents}, row, int(documents[row].max()),
                                    model.config.vocab_size, special)
    changed_last.pop("document_ids")
    assert _compare(before, _run(model, changed_last), row, ~last, real)["hidden"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ONE_DOCUMENT_ROWS)
def test_rows_of_one_document_never_hold_two(recipe, short_documents):
    datamodule, _ = _build(recipe, short_documents, "sdpa")
    for i, batch in zip(range(20), datamodule.train_dataloader()):
        assert int(batch["document_ids"].max()) == 0, i


@pytest.mark.parametrize("recipe", REFUSING)
def test_recipes_whose_rows_cannot_keep_documents_apart_refuse_the_document_mask(recipe, capsys):
    line = cli_error(["fit", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), "--data.document_mask", "true"],
                     capsys)
    assert "data.document_mask" in line and "data.document_mask=false" in line


def test_the_lists_cover_every_recipe_that_reads_text():
    """Every text recipe is checked here, or shares its data module and mask shape with one that is."""
    recipes = {p.stem for p in (ROOT / "configs").glob("*.yaml")}
    word_level = {"word2vec", "glove", "fasttext", "elmo", "cove"}
    assert recipes - word_level == set(SEPARATING) | set(REFUSING) | set(ONE_DOCUMENT_ROWS) | set(SAME_AS)
    assert set(SAME_AS.values()) <= set(SEPARATING) | set(REFUSING)
