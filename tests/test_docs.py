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


def test_the_readme_recipe_table_and_the_docs_index_are_generated_from_the_pages() -> None:
    """``python docs/build.py --tables`` has been run since the last change to a page header or a recipe."""
    build = _build_module()
    for path, expected in build.expected_tables().items():
        assert path.read_text(encoding="utf-8") == expected, (
            f"{path.relative_to(ROOT)} is stale: run python docs/build.py --tables")
    for recipe in RECIPES:
        assert f"[`{recipe}`](docs/objectives/{recipe}.md)" in (ROOT / "README.md").read_text()


def test_the_objectives_picture_was_drawn_from_the_current_recipes() -> None:
    reason = _build_module().stale_picture()
    assert reason is None, f"docs/objectives.png is stale ({reason}): run python docs/build.py"


def test_the_staleness_checks_see_a_new_recipe_and_an_edited_one(tmp_path, monkeypatch) -> None:
    """The two checks above can fail: a recipe added without a page is refused by name, a table misses the new
    page's row until rebuilt, and a picture drawn before an edit says which recipe changed."""
    from plm_lightning.inspection.picture import draw_grid, recipe_configs, recipe_digests

    build = _build_module()
    configs, pages = tmp_path / "configs", tmp_path / "objectives"
    configs.mkdir()
    pages.mkdir()
    for recipe in ("bert", "gpt2"):
        (configs / f"{recipe}.yaml").write_bytes((ROOT / "configs" / f"{recipe}.yaml").read_bytes())
        (pages / f"{recipe}.md").write_bytes((DOCS / "objectives" / f"{recipe}.md").read_bytes())
    monkeypatch.setattr(build, "CONFIGS", configs)
    monkeypatch.setattr(build, "PAGES", pages)
    monkeypatch.setattr(build, "PICTURE", tmp_path / "objectives.png")
    assert [line.split("`")[1] for line in build.recipe_table().splitlines()[2:]] == ["bert", "gpt2"]
    draw_grid([], build.PICTURE, {}, drawn_from=recipe_digests(recipe_configs(configs)))
    assert build.stale_picture() is None

    (configs / "reverse.yaml").write_text("# a new recipe\n")
    with pytest.raises(SystemExit, match=r"no page docs/objectives/reverse.md for configs/reverse.yaml"):
        build.recipe_table()
    page = (pages / "gpt2.md").read_text().replace("# GPT-2", "# Reverse LM", 1)
    (pages / "reverse.md").write_text(page)
    assert "[`reverse`](docs/objectives/reverse.md)" in build.recipe_table()
    assert "[`reverse`](objectives/reverse.md): Reverse LM" in build.index_list()
    assert build.stale_picture() == "drawn before these recipes changed: reverse"
    (configs / "bert.yaml").write_text((configs / "bert.yaml").read_text() + "# edited\n")
    assert build.stale_picture() == "drawn before these recipes changed: bert, reverse"

    (pages / "reverse.md").write_text(page.replace("| family | ", "| family | Diffusion LMs x", 1))
    with pytest.raises(SystemExit, match=r"reverse.md: family 'Diffusion LMs x.*' is none of"):
        build.recipe_table()
