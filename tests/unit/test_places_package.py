"""The places package's imports: no circle, no backend module, no backend test.

Places ask the backend contract (``backends/_base.py``) to split devices and bind
contexts; they never import a backend module other than ``backends`` itself and
``backends._base``, never ask ``cuda_contexts`` ("is this CUDA?") and never probe an
attribute by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stflow

ROOT = Path(stflow.__file__).parent
PACKAGE = ROOT / "_places"
ORDER = [
    "stream_partitions",
    "partition",
    "numbering",
    "locality",
    "green_view",
    "places",
    "green",
    "gridwork",
]
"""The modules, each importing only those before it (``_places/__init__.py``)."""


def _modules() -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text(), str(path))
        for path in sorted(PACKAGE.glob("*.py"))
        if path.stem != "__init__"
    }


def _imports(tree: ast.Module) -> set[str]:
    """Every module a ``_places`` module imports, lazily or not, as a dotted path
    under ``stflow`` (``_places.places``, ``backends._base``) or an absolute one."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
                continue
            parts = ["_places"] if node.level == 1 else []
            target = ".".join([*parts, *([node.module] if node.module else [])])
            if target:
                found.add(target)
            folder = ROOT.joinpath(*target.split(".")) if target else ROOT
            for alias in node.names:  # names that are modules themselves
                if (folder / f"{alias.name}.py").exists() or (
                    folder / alias.name / "__init__.py"
                ).exists():
                    found.add(f"{target}.{alias.name}".lstrip("."))
    return found


def test_the_package_holds_the_modules_it_lists():
    assert sorted(_modules()) == sorted(ORDER)


def test_no_module_imports_a_later_one():
    for name, tree in _modules().items():
        later = {f"_places.{other}" for other in ORDER[ORDER.index(name) :]}
        assert not _imports(tree) & later, (name, _imports(tree) & later)


def test_no_module_imports_a_backend_module():
    for name, tree in _modules().items():
        backend_modules = {
            module for module in _imports(tree) if module.startswith("backends.")
        } - {"backends._base"}
        assert not backend_modules, (name, backend_modules)
        assert not any(
            module.startswith("stflow.backends.") for module in _imports(tree)
        ), name


def test_no_module_asks_which_backend_it_has_or_probes():
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("cuda_contexts", "name"), (name, node.lineno)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "getattr", (name, node.lineno)


def test_the_import_checker_sees_lazy_and_backend_imports():
    tree = ast.parse(
        "from ..backends import _cuda_green\n"
        "def f():\n    from .green import x\n    from . import places\n"
    )
    assert {"backends._cuda_green", "_places.green", "_places.places"} <= _imports(tree)
