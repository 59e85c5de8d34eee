"""docs/: every recipe has an objective page with its paper, equations and generated parts filled; a page's
statistics are still what ``inspect --json`` measures; the index links every page; the getting-started code runs."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
RECIPES = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


def _build_module():
    spec = importlib.util.spec_from_file_location("docs_build", DOCS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generated(page: str, name: str) -> str:
    """The body of a generated block, without its code fence."""
    found = re.search(rf"<!-- generated:{name} -->\n(?:```\w*\n)?(.*?)(?:```\n)?<!-- /generated:{name} -->", page, re.S)
    assert found, f"no {name} block"
    return found.group(1).strip()


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_has_a_filled_page(recipe: str) -> None:
    page = (DOCS / "objectives" / f"{recipe}.md").read_text(encoding="utf-8")
    assert re.search(r"\| paper \| .+ (19|20)\d\d", page)  # authors and year
    assert "$" in page.split("## The objective")[1].split("##")[0]  # an equation
    assert _generated(page, "recipe") == (ROOT / "configs" / f"{recipe}.yaml").read_text().strip()
    assert _generated(page, "inspect") and _generated(page, "stats")
    assert f"(objectives/{recipe}.md)" in (DOCS / "README.md").read_text()


@pytest.mark.parametrize("recipe", ["gpt2"])
def test_a_page_still_states_what_inspect_measures(recipe: str) -> None:
    build = _build_module()
    page = (DOCS / "objectives" / f"{recipe}.md").read_text(encoding="utf-8")
    stated = json.loads(_generated(page, "stats"))
    assert stated == build.rounded(json.loads(json.dumps(build.measure(recipe)[1])))


def test_getting_started_code_runs() -> None:
    text = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    for i, code in enumerate(blocks):
        exec(compile(code, f"getting-started block {i + 1}", "exec"), {})  # noqa: S102 - our own documentation


def test_every_relative_link_of_the_readme_and_the_docs_resolves() -> None:
    """The README points into docs/ for everything past the Quickstart: no page or anchor file it names is missing,
    and every docs page is reachable from the README or the docs index."""
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), *(DOCS / "objectives").glob("*.md")]
    broken = [(page.name, target) for page in pages
              for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
              if not target.startswith(("http", "mailto:")) and not (page.parent / target).exists()]
    assert not broken
    linked = re.findall(r"\]\(docs/([^)#\s]+)", (ROOT / "README.md").read_text())
    linked += re.findall(r"\]\(([^)#\s]+)", (DOCS / "README.md").read_text())
    assert {p.name for p in DOCS.glob("*.md")} - {"README.md"} <= {Path(t).name for t in linked}
