"""The package's layout is its architecture: parts stacked in one order, imports going
down it, each part's ``__init__`` naming its modules (docs/architecture.md draws it).

Every import between modules of ``stflow`` counts: at module level, under
``TYPE_CHECKING`` and inside functions (a lazy import is still a dependency). An import
goes down when the importer's part stands above the imported one in :data:`PARTS`, or
when it imports the foundation (:data:`FOUNDATION`), which every part may use. The few
that go up are listed in :data:`UPWARD` with the reason; a new one fails the test, as
does an entry that no longer matches an import.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import stflow

SOURCE = Path(stflow.__file__).parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

PARTS = (
    "testing",
    "_demos",
    "stflow",
    "interop",
    "_graph",
    "_dist",
    "_handles",
    "_engine",
    "_instruments",
    "_interchange",
    "backends",
    "_core",
    "_places",
)
"""From the top down. ``stflow`` is the package's own modules: ``__init__`` and the
public modules (``stflow.linalg``, the reference's paths such as ``stflow.task_graph``);
``testing`` and the demo use the package as programs do."""

FOUNDATION = frozenset(
    {
        "stflow._core.errors",
        "stflow._core.config",
        "stflow._compile",
        "stflow.backends._base",
        "stflow._interchange.views",
    }
)
"""Modules every part may import: exceptions, settings, the compiled build's marker, the
backend contract and the stream and view types it names."""

UPWARD: dict[tuple[str, str], str] = {
    (
        "stflow._places.gridwork",
        "stflow._core.streams",
    ): "for types only: a grid's streams are taken from the runtime's pools",
    (
        "stflow._places.places",
        "stflow.backends",
    ): "lazy: a place is checked against the default backend (device count)",
    (
        "stflow._places.locality",
        "stflow.backends",
    ): "lazy: the default backend's devices and locality domains",
    (
        "stflow._handles.context",
        "stflow.fill_utils",
    ): "lazy: ctx.init_logical_data is the public fill_utils function",
    (
        "stflow.interop._numba_simulator",
        "stflow.emulated",
    ): "lazy: the Numba simulator's kernels run as emulated device work",
    (
        "stflow.interop._torch_capture",
        "stflow.emulated",
    ): "lazy: PyTorch bodies on the emulated backend run as emulated device work",
    (
        "stflow._handles.bodies",
        "stflow.interop.cupy",
    ): "lazy: a task body on CUDA gets CuPy arrays and a CuPy stream",
    (
        "stflow._handles.tiles",
        "stflow._dist.context",
    ): "lazy: tiles of a distributed context are owned by ranks",
    (
        "stflow._handles.context",
        "stflow._graph.mode",
    ): "lazy: the one place the mode is chosen (a graph-mode context's GraphMode)",
    (
        "stflow._handles.context",
        "stflow._graph.recording",
    ): "lazy: ... and the recording backend a graph-mode runtime records through",
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def part_of(module: str) -> str:
    """The part a module belongs to: its folder under ``stflow`` (``stflow`` for the
    package's own modules, but the demo's entry point ``python -m stflow.demo`` is the
    demo's)."""
    if module == "stflow.demo":
        return "_demos"
    pieces = module.split(".")
    if len(pieces) > 2 or (len(pieces) == 2 and (SOURCE / pieces[1]).is_dir()):
        return pieces[1]
    return "stflow"


@functools.lru_cache(maxsize=1)
def imports() -> list[tuple[str, str, int]]:
    """``(importer, imported, line)`` for every import of one stflow module by another."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[
                        : len(package.split(".")) - node.level + 1
                    ]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("stflow") and target != name:
                    found.append((name, target, node.lineno))
    return sorted(set(found))


def _upward() -> list[tuple[str, str, int]]:
    rank = {part: k for k, part in enumerate(PARTS)}
    return [
        (a, b, line)
        for a, b, line in imports()
        if b not in FOUNDATION and rank[part_of(a)] > rank[part_of(b)]
    ]


def test_every_module_belongs_to_a_part():
    assert {part_of(name) for name in _modules()} <= set(PARTS)


def test_imports_go_down_the_parts():
    unexplained = [(a, b, line) for a, b, line in _upward() if (a, b) not in UPWARD]
    assert not unexplained, (
        "imports going up the parts ("
        + " > ".join(PARTS)
        + "): "
        + "; ".join(f"{a}:{line} imports {b}" for a, b, line in unexplained)
        + ". Move what the lower module needs down, or declare it on a protocol there"
    )


def test_the_upward_list_holds_no_stale_entry():
    stale = set(UPWARD) - {(a, b) for a, b, _ in _upward()}
    assert not stale, f"no longer imported upwards, remove from UPWARD: {sorted(stale)}"


def test_each_part_names_its_modules():
    for part in PARTS:
        if part == "stflow":
            continue
        folder = SOURCE / part
        docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert docstring, f"stflow/{part}/__init__.py says what the part owns"
        if part in ("testing", "backends", "interop"):
            continue  # their modules are private details of the part
        missing = [
            path.stem
            for path in folder.glob("*.py")
            if path.stem != "__init__" and f"``{path.stem}``" not in docstring
        ]
        assert not missing, f"stflow/{part}/__init__.py does not name {missing}"


def test_the_architecture_page_draws_every_part():
    page = DOCS.read_text()
    missing = [part for part in PARTS if part != "stflow" and f"{part}/" not in page]
    assert not missing, f"docs/architecture.md does not show the parts {missing}"
