"""Graph mode behind one seam, read from the sources.

Stream-mode modules (everything under ``stflow/`` outside ``_graph/``) reach graph
mode only through the runtime's mode object (``stflow._engine.mode.Mode``): they name no
graph-mode state, and they do not import ``stflow._graph`` except where the context
chooses the mode (a lazy import) and where the public names are re-exported.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import stflow

SOURCE = Path(stflow.__file__).parent

GRAPH_STATE_CLASSES = frozenset(
    {
        "ScopeTracker",
        "Scope",
        "ScopeKind",
        "GraphRecorder",
        "RecordingStream",
        "GraphEvent",
        "GraphMode",
    }
)
"""The classes of graph-mode state (as names, attributes or imported names)."""

GRAPH_STATE_ATTRIBUTES = frozenset(
    {
        "scopes",
        "open_tops",
        "per_thread",
        "epochs",
        "epoch_begin",
        "epoch_boundary",
        "begin_body",
        "end_body",
        "split_bodies",
        "recorder",
    }
)
"""Attributes of graph-mode state: the scope tracker and what it holds, the recorder
(as attributes: a local variable of the same name is something else)."""

MAX_STATE_LINES = 5
"""Lines outside ``_graph/`` that may name graph-mode state (the choice of the mode)."""

RE_EXPORTS = frozenset({"__init__.py", "task_graph.py"})
"""Modules that re-export public names defined in ``_graph/``."""

MODE_CHOOSER = "_handles/context.py"
"""The module where the context chooses the mode (imports ``_graph`` lazily)."""


@functools.lru_cache(maxsize=1)
def _stream_mode_modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(SOURCE).as_posix(): ast.parse(path.read_text())
        for path in sorted(SOURCE.rglob("*.py"))
        if path.relative_to(SOURCE).parts[0] != "_graph"
    }


def _state_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in GRAPH_STATE_CLASSES:
            lines.add(node.lineno)
        elif isinstance(node, ast.Attribute) and (
            node.attr in GRAPH_STATE_ATTRIBUTES or node.attr in GRAPH_STATE_CLASSES
        ):
            lines.add(node.lineno)
        elif (
            isinstance(node, ast.alias)
            and node.name.rsplit(".", 1)[-1] in GRAPH_STATE_CLASSES
        ):
            lines.add(node.lineno)
    return lines


def _graph_imports(tree: ast.Module) -> list[tuple[int, bool]]:
    """``(line, inside a function)`` of every import of ``stflow._graph``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef)
            )
            if isinstance(child, ast.ImportFrom):
                module = child.module or ""
                relative = child.level > 0 and (
                    module == "_graph"
                    or module.startswith("_graph.")
                    or (not module and any(a.name == "_graph" for a in child.names))
                )
                if (
                    relative
                    or module == "stflow._graph"
                    or module.startswith("stflow._graph.")
                ):
                    found.append((child.lineno, nested))
            elif isinstance(child, ast.Import):
                if any(a.name.startswith("stflow._graph") for a in child.names):
                    found.append((child.lineno, nested))
            visit(child, nested)

    visit(tree, False)
    return found


def test_graph_mode_state_stays_in_the_graph_package():
    named = {
        module: sorted(_state_lines(tree))
        for module, tree in _stream_mode_modules().items()
    }
    named = {module: lines for module, lines in named.items() if lines}
    count = sum(len(lines) for lines in named.values())
    assert count <= MAX_STATE_LINES, (
        f"{count} lines outside stflow/_graph/ name graph-mode state (at most "
        f"{MAX_STATE_LINES}): "
        + "; ".join(f"stflow/{m}:{lines}" for m, lines in sorted(named.items()))
        + ". Call the runtime's mode (stflow/_engine/mode.py) and implement the graph-mode "
        "side in stflow/_graph/mode.py"
    )


def test_stream_mode_modules_do_not_import_the_graph_package():
    crossing = []
    for module, tree in _stream_mode_modules().items():
        if module in RE_EXPORTS:
            continue
        for line, in_function in _graph_imports(tree):
            if module == MODE_CHOOSER and in_function:
                continue  # the context choosing graph mode, lazily
            crossing.append(f"stflow/{module}:{line}")
    assert not crossing, (
        "stream-mode modules import stflow._graph: "
        + "; ".join(crossing)
        + ". Reach graph mode through the runtime's mode object"
    )


def test_the_checks_see_what_they_look_for():
    """The scans find what they are meant to find (they are not vacuous)."""
    tree = ast.parse(
        "from ._graph.scopes import ScopeTracker\n"
        "def f(rt):\n"
        "    from ._graph import mode\n"
        "    return rt.scopes.open_tops\n"
    )
    assert _state_lines(tree) == {1, 4}
    assert _graph_imports(tree) == [(1, False), (3, True)]
    chooser = _graph_imports(_stream_mode_modules()[MODE_CHOOSER])
    assert chooser and all(in_function for _, in_function in chooser)


def test_the_graph_package_says_what_it_owns():
    import stflow._graph as graph

    doc = graph.__doc__ or ""
    assert "owns" in doc and "may import" in doc
