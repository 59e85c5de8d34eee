"""Lazy package exports (PEP 562) with no list to keep: a package's names are what its modules define, read from
their source on first use, and each name is imported on first use, so importing the package (or one light module
inside it) does not import every heavy module beside it.

A module exports its ``__all__`` where it has one, else every public top-level class, function and UPPER_CASE
constant it defines (not the names it imports). So a new objective or data module in ``plm_lightning/objectives/``
or ``plm_lightning/data/`` is ``plm_lightning.objectives.<Name>`` / ``plm_lightning.data.<Name>`` (a YAML's short
``class_path``) with no edit to any ``__init__``. A name two modules define is refused, naming both, rather than
resolved by file order.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PackageNames:
    """What a package's modules define: ``module_of`` (name -> module), the ``classes`` among them, and the
    ``ambiguous`` names (name -> the modules that each define it)."""

    module_of: dict[str, str] = field(default_factory=dict)
    classes: frozenset[str] = frozenset()
    ambiguous: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _literal_names(node: ast.AST) -> list[str] | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else None


def defined_names(source: str) -> tuple[list[str], set[str]]:
    """(the names a module's source exports, the classes among them): its ``__all__`` where it assigns one a
    literal, else its public top-level classes, functions and UPPER_CASE constants."""
    tree = ast.parse(source)
    names: list[str] = []
    classes: set[str] = set()
    explicit: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
            classes.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
                    explicit = _literal_names(node.value)
                elif isinstance(target, ast.Name) and target.id.isupper():
                    names.append(target.id)
    chosen = explicit if explicit is not None else [n for n in names if not n.startswith("_")]
    return chosen, classes & set(chosen)


@functools.cache
def package_names(package: str) -> PackageNames:
    """The names of ``package``'s top-level modules (subpackages keep theirs: ``plm_lightning.data.corruption.X``),
    read from the source files without importing them."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} is not a package")
    owners: dict[str, list[str]] = {}
    classes: set[str] = set()
    for info in pkgutil.iter_modules(spec.submodule_search_locations):
        if info.ispkg:
            continue
        path = Path(info.module_finder.path) / f"{info.name}.py"  # type: ignore[union-attr]
        if not path.is_file():
            continue
        names, found_classes = defined_names(path.read_text(encoding="utf-8"))
        for name in names:
            owners.setdefault(name, []).append(f"{package}.{info.name}")
        classes |= found_classes
    module_of = {n: ms[0] for n, ms in owners.items() if len(ms) == 1}
    ambiguous = {n: tuple(sorted(ms)) for n, ms in owners.items() if len(ms) > 1}
    return PackageNames(module_of, frozenset(classes & set(module_of)), ambiguous)


def _hooks(package: str, resolve: Callable[[str], str | None], listed: Callable[[], Iterable[str]]
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module-level hook's name
        if name == "__all__":
            return sorted(listed(), key=str.lower)
        if name.startswith("_"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = resolve(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*namespace, *listed()})

    return __getattr__, __dir__


def package_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``package`` exporting what its modules define (``__all__`` is answered
    by ``__getattr__``, so nothing is read until a name is asked for)."""

    def resolve(name: str) -> str | None:
        names = package_names(package)
        if name in names.ambiguous:
            raise AttributeError(f"{package}.{name} is defined by {' and '.join(names.ambiguous[name])}: "
                                 f"import it from one of them")
        return names.module_of.get(name)

    return _hooks(package, resolve, lambda: package_names(package).module_of)


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]], classes_of: tuple[str, ...] = ()
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``package`` exporting the chosen ``exports`` (module -> names) and, after
    them, every class the packages ``classes_of`` define (the top level's objectives, data modules, task heads)."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def found() -> dict[str, str]:
        out: dict[str, str] = {}
        for sub in classes_of:
            names = package_names(sub)
            out.update({n: names.module_of[n] for n in names.classes if n not in out})
        return out

    def resolve(name: str) -> str | None:
        return module_of.get(name) or (found().get(name) if classes_of else None)

    return _hooks(package, resolve, lambda: {*module_of, *found()})
