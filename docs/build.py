"""Refresh everything the docs derive from the recipes (``configs/*.yaml``), in one command:

- the generated parts of each objective page (``docs/objectives/<recipe>.md``): the recipe YAML as shipped, the
  ``inspect`` text view of its first training row and its ``inspect --json`` statistics (the hand-written parts,
  paper, equations, transformers counterpart, are left alone);
- the recipe table of the README and the list of objective pages of ``docs/README.md``, from each page's header
  table (its title, ``paper``, ``model``, ``family``, ``attention``, ``loss on``, ``data`` rows);
- ``docs/objectives.png``, every recipe's attention mask (``inspect --all-recipes``), which records the digests of
  the recipes it was drawn from.

    python docs/build.py              # everything
    python docs/build.py bert t5      # some pages (and the tables; the picture only with every recipe)
    python docs/build.py --tables     # the README and index tables only (seconds)

A generated part is marked ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``; ``tests/test_docs.py``
fails when any of them, or the picture, is stale.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "objectives"
CONFIGS = ROOT / "configs"
STAT_BATCHES = 4
"""Batches ``inspect --json`` measures for the pages (``--batches 4``)."""
NEEDS_MORE = {"distilbert": "the recipe needs a teacher checkpoint (--model.teacher); its data is bert's MLM rows"}
"""Recipes whose DataModule cannot be built from the YAML alone: their pages carry the recipe only."""


def block(name: str, body: str, fence: str = "") -> str:
    inner = f"```{fence}\n{body.rstrip()}\n```" if fence is not None else body.rstrip()
    return f"<!-- generated:{name} -->\n{inner}\n<!-- /generated:{name} -->"


def fill(page: str, name: str, content: str) -> str:
    """``page`` with its ``name`` block replaced by ``content`` (a full ``block``)."""
    pattern = re.compile(rf"<!-- generated:{name} -->.*?<!-- /generated:{name} -->", re.S)
    if not pattern.search(page):
        raise ValueError(f"the page has no <!-- generated:{name} --> block")
    return pattern.sub(lambda _: content, page)


def measure(recipe: str) -> tuple[str, dict]:
    """(the ``inspect`` text view, the ``inspect --json --batches 4`` statistics) of a recipe."""
    from plm_lightning.inspection import build_datamodule, recipe_views

    datamodule, model = build_datamodule([str(CONFIGS / f"{recipe}.yaml")], [])
    statistics, view = recipe_views(datamodule)
    out = io.StringIO()
    view(datamodule, model, out)
    return out.getvalue(), statistics(datamodule, model, STAT_BATCHES)


def rounded(stats: dict) -> dict:
    """Statistics as the pages show them: floats to 4 decimals (the comparison the test makes)."""
    def r(v):  # noqa: ANN001, ANN202
        if isinstance(v, float):
            return round(v, 4)
        if isinstance(v, dict):
            return {k: r(x) for k, x in v.items()}
        if isinstance(v, list):
            return [r(x) for x in v]
        return v
    return r(stats)


def build(recipe: str) -> None:
    path = PAGES / f"{recipe}.md"
    page = path.read_text(encoding="utf-8")
    page = fill(page, "recipe", block("recipe", (CONFIGS / f"{recipe}.yaml").read_text(encoding="utf-8"), "yaml"))
    if recipe in NEEDS_MORE:
        note = f"({NEEDS_MORE[recipe]})"
        page = fill(page, "inspect", block("inspect", note, None))
        page = fill(page, "stats", block("stats", note, None))
    else:
        view, stats = measure(recipe)
        lines = [line if len(line) <= 160 else line[:157] + "..." for line in view.splitlines()]
        page = fill(page, "inspect", block("inspect", "\n".join(lines), "text"))
        page = fill(page, "stats", block("stats", json.dumps(rounded(stats), indent=2), "json"))
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    print(f"built {path.relative_to(ROOT)}")


FAMILIES = ("Masked language models (encoders)", "Replaced token detection",
            "Causal and permutation language models", "Encoder-decoder and prefix-LM denoising",
            "Before Transformers: LSTMs and static embeddings")
"""The sections of the index, in order; a page's ``family`` row names one."""
HEADER_ROWS = ("paper", "model", "family", "attention", "loss on", "data")
"""The rows of a page's header table that the tables are built from."""
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "README.md"
PICTURE = ROOT / "docs" / "objectives.png"


def recipes() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


def header(recipe: str) -> dict[str, str]:
    """A page's title and header-table rows; a missing row or an unknown family is a one-line error."""
    path = PAGES / f"{recipe}.md"
    if not path.is_file():
        raise SystemExit(f"docs/build.py: no page docs/objectives/{recipe}.md for configs/{recipe}.yaml")
    text = path.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| ([a-z ]+) \| (.*) \|$", text.split("\n## ")[0], re.M))
    rows["title"] = text.splitlines()[0].removeprefix("# ").strip()
    missing = [r for r in HEADER_ROWS if r not in rows]
    if missing:
        raise SystemExit(f"docs/build.py: docs/objectives/{path.name} has no header row(s) {', '.join(missing)}")
    if rows["family"] not in FAMILIES:
        raise SystemExit(f"docs/build.py: docs/objectives/{path.name}: family {rows['family']!r} is none of "
                         f"{', '.join(FAMILIES)}")
    year = re.search(r"(19|20)\d\d", rows["paper"])
    rows["year"] = year.group(0) if year else "9999"
    return rows


def _catalogue() -> list[tuple[str, dict[str, str]]]:
    """Every recipe with its header, by family, then by the year of its paper, then by name."""
    headers = {r: header(r) for r in recipes()}
    return sorted(headers.items(), key=lambda kv: (FAMILIES.index(kv[1]["family"]), kv[1]["year"], kv[0]))


def recipe_table() -> str:
    """The README's recipe table (one row per recipe, linked to its page)."""
    lines = ["| recipe | objective | mask | loss on | data |", "|---|---|---|---|---|"]
    lines += [f"| [`{r}`](docs/objectives/{r}.md) | {h['model']} | {h['attention']} | {h['loss on']} | {h['data']} |"
              for r, h in _catalogue()]
    return "\n".join(lines)


def index_list() -> str:
    """The index's list of objective pages, one section per family."""
    out: list[str] = []
    catalogue = _catalogue()
    for family in FAMILIES:
        entries = [f"- [`{r}`](objectives/{r}.md): {h['title']}" for r, h in catalogue if h["family"] == family]
        if entries:
            out += [f"## {family}", "", *entries, ""]
    return "\n".join(out)


def expected_tables() -> dict[Path, str]:
    """``{file: its text with the generated tables as the recipes give them}``."""
    readme = fill(README.read_text(encoding="utf-8"), "recipes", block("recipes", recipe_table(), None))
    index = fill(INDEX.read_text(encoding="utf-8"), "objectives", block("objectives", index_list(), None))
    return {README: readme, INDEX: index}


def stale_picture() -> str | None:
    """Why ``docs/objectives.png`` is stale (a recipe added, removed or edited since it was drawn), else None."""
    from plm_lightning.inspection.picture import drawn_recipes, recipe_configs, recipe_digests

    drawn = drawn_recipes(PICTURE) if PICTURE.is_file() else {}
    now = recipe_digests(recipe_configs(CONFIGS))
    changed = sorted(set(drawn) ^ set(now) | {r for r in set(drawn) & set(now) if drawn[r] != now[r]})
    return f"drawn before these recipes changed: {', '.join(changed)}" if changed else None


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"built {path.relative_to(ROOT)}")


def draw_picture() -> None:
    from plm_lightning.inspection.picture import draw_all_recipes, recipe_configs

    draw_all_recipes(recipe_configs(CONFIGS), PICTURE, [], log=lambda m: print(m, file=sys.stderr))
    print(f"built {PICTURE.relative_to(ROOT)}")


def main(argv: list[str]) -> None:
    tables_only = "--tables" in argv
    chosen = [a for a in argv if a != "--tables"]
    known = recipes()
    unknown = [r for r in chosen if r not in known]
    if unknown:
        sys.exit(f"docs/build.py: unknown recipe(s) {', '.join(unknown)}; valid: {', '.join(known)}")
    for path, text in expected_tables().items():
        write(path, text)
    if tables_only:
        return
    for recipe in chosen or known:
        build(recipe)
    if not chosen:
        draw_picture()


if __name__ == "__main__":
    main(sys.argv[1:])
