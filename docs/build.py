"""Refresh the generated parts of the objective pages (``docs/objectives/<recipe>.md``) from the code: the recipe
YAML as shipped, the ``inspect`` text view of its first training row and its ``inspect --json`` statistics. The
hand-written parts (paper, equations, transformers counterpart) are left alone.

    python docs/build.py              # every page
    python docs/build.py bert t5      # some pages

A page marks each generated part with ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->`` (NAME: recipe,
inspect, stats); ``tests/test_docs.py`` checks every recipe has a page and that a page's statistics are still what
the code measures.
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


def main(argv: list[str]) -> None:
    recipes = argv or sorted(p.stem for p in CONFIGS.glob("*.yaml"))
    missing = [r for r in recipes if not (PAGES / f"{r}.md").is_file()]
    if missing:
        sys.exit(f"docs/build.py: no page docs/objectives/<recipe>.md for {', '.join(missing)}")
    for recipe in recipes:
        build(recipe)


if __name__ == "__main__":
    main(sys.argv[1:])
