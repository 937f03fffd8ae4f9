"""Every function of ``src/stflow`` is at most 80 lines, its docstring included
(issue 28): a longer one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 80
SOURCES = Path(__file__).resolve().parents[2] / "src" / "stflow"

PENDING_MERGE: set[str] = set()
"""Functions split on another branch; the lead empties this set after merging."""


def _long_functions(root: Path = SOURCES) -> dict[str, int]:
    """``module.function`` (dotted path under ``stflow``, methods as
    ``module.Class.method``) -> its length in lines, for every function over the
    limit."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, module)]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    name = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        first = min(
                            [child.lineno] + [d.lineno for d in child.decorator_list]
                        )
                        length = (child.end_lineno or child.lineno) - first + 1
                        if length > LIMIT:
                            found[name] = length
                    stack.append((child, name))
                else:
                    stack.append((child, prefix))
    return found


def test_no_function_is_longer_than_the_limit():
    over = {
        name: length
        for name, length in _long_functions().items()
        if name not in PENDING_MERGE
    }
    assert not over, (
        f"functions over {LIMIT} lines (docstring included): {over}; "
        "split each into named steps"
    )


def test_the_pending_list_names_only_long_functions():
    """An entry whose function was split (or renamed) must leave the list."""
    stale = PENDING_MERGE - set(_long_functions())
    assert not stale, f"remove {sorted(stale)} from PENDING_MERGE: now within {LIMIT}"


def test_the_measure_counts_decorators_docstring_and_methods(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "class C:\n    @staticmethod\n    def long():\n        '''doc'''\n"
        + "        x = 1\n" * 78  # 81 lines with the decorator
        + "\n\ndef fits():\n"
        + "    y = 2\n" * 79
    )  # 80 lines
    assert _long_functions(tmp_path) == {"pkg.mod.C.long": 81}
