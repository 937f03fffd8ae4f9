"""The settings table of ``_config``: the docs show it, and it is the only reader.

``_config.SETTINGS`` declares every environment variable stflow reads; the other
modules call its accessors. These tests keep that true: the page
``docs/configuration.md`` holds exactly what :func:`_config.render_table` renders, no
other module reads an stflow variable from ``os.environ``, and every ``STFLOW_*`` name
the sources mention is declared.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from stflow._core import config as _config

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "stflow"
PAGE = ROOT / "docs" / "configuration.md"

READERS = {"_core/config.py", "_compile.py"}
"""May read stflow variables: ``_compile`` runs first at import (it does not, today:
``__init__`` asks ``_config.pure_python_requested()``)."""

OTHER_READERS = {"paths.py": "CUDA_HOME", "demo.py": "OMP_NUM_THREADS"}
"""Modules that read variables of other programs (``_config.OTHER_VARIABLES``)."""

OURS = re.compile(r"\b(?:STFLOW|CUDASTF)_[A-Z0-9_]*[A-Z0-9]")


def test_the_docs_page_shows_the_table_as_rendered():
    page = PAGE.read_text(encoding="utf-8")
    shown = _config.rendered_section(page)
    assert shown is not None, f"{PAGE} lost its {_config.BEGIN_MARK!r} marks"
    assert shown == _config.render_table(), (
        "docs/configuration.md is stale: run python -c 'import stflow._core.config as c; "
        'c.write_docs("docs/configuration.md")\''
    )
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert re.search(r"^configuration$", index, re.M), "docs/index.md: not in a toctree"


def test_write_docs_replaces_only_the_generated_part(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"# Title\n\n{_config.BEGIN_MARK}\nold | table\n{_config.END_MARK}\nafter\n",
        encoding="utf-8",
    )
    _config.write_docs(str(page))
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\n") and text.endswith(
        f"{_config.END_MARK}\nafter\n"
    )
    assert _config.rendered_section(text) == _config.render_table()
    assert "old | table" not in text
    page.write_text("no marks\n", encoding="utf-8")
    with pytest.raises(ValueError, match="marks"):
        _config.write_docs(str(page))


def _environment_readers(package: Path) -> dict[str, list[str]]:
    """For each module: the stflow names that code touching ``os.environ`` or
    ``os.getenv`` mentions (the strings of the enclosing function, docstrings aside);
    a module touching them without naming ours maps to an empty list."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes: list[ast.AST] = [
            tree,
            *(
                node
                for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            ),
        ]
        for scope in scopes:
            own = _own_nodes(scope)
            if not any(_is_environment(node) for node in own):
                continue
            docstrings = {
                id(body[0].value)
                for body in _bodies(scope)
                if body and isinstance(body[0], ast.Expr)
            }
            names = [
                match
                for node in own
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                for match in OURS.findall(node.value)
            ]
            found.setdefault(str(path.relative_to(package)), []).extend(names)
    return found


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions nested in it."""
    nodes: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _bodies(scope: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists whose first string is a docstring (the scope's, a class's)."""
    bodies = [scope.body] if isinstance(scope.body, list) else []  # type: ignore[attr-defined]
    return bodies + [
        node.body for node in _own_nodes(scope) if isinstance(node, ast.ClassDef)
    ]


def _is_environment(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
        return True
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        return any(alias.name in ("environ", "getenv") for alias in node.names)
    return False


def test_only_config_reads_stflow_settings_from_the_environment():
    readers = _environment_readers(PACKAGE)
    ours = {
        module: names
        for module, names in readers.items()
        if names and module not in READERS
    }
    assert not ours, (
        f"these modules read stflow settings from os.environ: {ours}; "
        "declare the setting in _config.SETTINGS and call its accessor"
    )
    others = {module for module in readers if module not in READERS}
    assert others == set(OTHER_READERS), (
        f"modules reading variables of other programs: {sorted(others)}; list what "
        "they read in _config.OTHER_VARIABLES and in OTHER_READERS here"
    )
    notes = " ".join(names for names, _ in _config.OTHER_VARIABLES)
    assert all(variable in notes for variable in OTHER_READERS.values())


def test_the_scan_finds_a_module_reading_a_setting(tmp_path):
    (tmp_path / "direct.py").write_text(
        'import os\ndef f():\n    """STFLOW_DOC is a docstring."""\n'
        '    return os.environ.get("STFLOW_MPI_PIECE", "")\n',
        encoding="utf-8",
    )
    (tmp_path / "indirect.py").write_text(
        'from os import environ\nNAMES = ("CUDASTF_DOT_FILE",)\n'
        "def g():\n    return [environ.get(n) for n in NAMES]\n",
        encoding="utf-8",
    )
    (tmp_path / "other.py").write_text(
        'import os\ndef h():\n    """Reads CUDA_HOME, unlike STFLOW_BACKEND."""\n'
        '    return os.getenv("CUDA_HOME")\n',
        encoding="utf-8",
    )
    assert _environment_readers(tmp_path) == {
        "direct.py": ["STFLOW_MPI_PIECE"],
        "indirect.py": ["CUDASTF_DOT_FILE"],
        "other.py": [],
    }


def test_every_setting_the_sources_name_is_declared():
    declared = {setting.name for setting in _config.SETTINGS}
    ignored = set(_config._IGNORED_REFERENCE_VARIABLES)
    assert not declared & ignored
    named = {
        name: path.relative_to(PACKAGE)
        for path in PACKAGE.rglob("*.py")
        for name in OURS.findall(path.read_text(encoding="utf-8"))
    }
    unknown = {
        name: str(path) for name, path in named.items() if name not in declared | ignored
    }
    assert not unknown, f"undeclared settings (add them to _config.SETTINGS): {unknown}"


def test_every_setting_has_a_default_and_one_line_of_meaning(monkeypatch):
    for setting in _config.SETTINGS:
        monkeypatch.delenv(setting.name, raising=False)
        setting.value()  # unset: the default, no error
        assert setting.read in ("at import", "first use", "each use"), setting.name
        assert setting.meaning.endswith(".") and "|" not in setting.meaning + setting.type
    assert _config.mpi_piece() == 4 << 20 and _config.mpi_send_limit() == 512 << 20
    assert _config.mpi_send_buffers() == 1 and _config.device_memory_budget() is None
    assert _config.mpi_cuda_aware() is None
    assert not _config.mpi_send_ahead() and not _config.distributed_check()


def test_each_use_settings_follow_the_environment_without_reload(monkeypatch):
    monkeypatch.setenv("STFLOW_MPI_PIECE", "4096")
    monkeypatch.setenv("STFLOW_DEVICE_MEMORY_BUDGET", " 2KiB ")
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")
    assert _config.mpi_piece() == 4096 and _config.device_memory_budget() == 2048
    assert _config.mpi_cuda_aware() is False
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "")  # empty: unset
    assert _config.mpi_cuda_aware() is None
    monkeypatch.setenv("STFLOW_MPI_SEND_AHEAD", "")  # empty: not a choice
    with pytest.raises(
        ValueError,
        match=r"STFLOW_MPI_SEND_AHEAD must be 1 \(post "
        r"sends once their copies completed\) or 0 \(wait for them "
        r"where they are sent\), got ''",
    ):
        _config.mpi_send_ahead()
    monkeypatch.setenv("STFLOW_DISTRIBUTED_CHECK", "yes")
    with pytest.raises(
        ValueError,
        match=r"STFLOW_DISTRIBUTED_CHECK must be 1 \(compare "
        r"every collective call across the ranks\) or 0, got 'yes'",
    ):
        _config.distributed_check()
    monkeypatch.setenv("STFLOW_MPI_SEND_BUFFERS", "-1")
    with pytest.raises(
        ValueError,
        match="STFLOW_MPI_SEND_BUFFERS must be a positive "
        "number of buffers per message size, got '-1'",
    ):
        _config.mpi_send_buffers()


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match="'STFLOW_NOPE' is not a setting of stflow"):
        _config.setting_text("STFLOW_NOPE")
    with pytest.raises(KeyError, match="add it to _config.SETTINGS"):
        _config.set_environment({"STFLOW_NOPE": "1"})
