"""What type checkers and editors see of ``import stflow as stf`` (issue 14, item 2).

The package resolves its names lazily (``__getattr__``), which type checkers cannot
follow; ``__init__.py`` imports the same names under ``TYPE_CHECKING``. These tests
run mypy on a small user program (skipped without mypy) and check that the explicit
imports stay in step with the lazy table.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import stflow as stf

SOURCE = Path(stf.__file__).resolve().parent

USER_PROGRAM = textwrap.dedent("""\
    import numpy as np
    import stflow as stf

    ctx = stf.context()
    reveal_type(ctx)
    x = ctx.logical_data(np.zeros(4))
    reveal_type(x)
    t = ctx.task(x.rw())
    reveal_type(t)
    reveal_type(t.views())
    reveal_type(ctx.cuda_kernel(x.read()))
    reveal_type(ctx.wait(x))
    reveal_type(stf.stackable_context().task(x.read()))
    reveal_type(stf.exec_place.device(0))
    reveal_type(stf.errors.ShapeError)
    ctx.taks(x.rw())
    stf.contxt()
""")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory) -> str:
    """mypy's report on :data:`USER_PROGRAM` (one run for the module's tests)."""
    return _mypy(tmp_path_factory.mktemp("typing"), USER_PROGRAM)


def _mypy(tmp_path: Path, program: str) -> str:
    pytest.importorskip("mypy")
    path = tmp_path / "user_program.py"
    path.write_text(program)
    # MYPYPATH finds this checkout's sources whatever the install mode; cwd outside
    # the repository, so that its [tool.mypy] settings do not apply.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "MYPYPATH": str(SOURCE.parent)},
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def _revealed(output: str) -> dict[int, str]:
    return {
        int(line): kind
        for line, kind in re.findall(r":(\d+): note: Revealed type is \"(.*)\"", output)
    }


def test_mypy_sees_the_public_types(mypy_output):
    output = mypy_output
    revealed = _revealed(output)
    expected = {
        5: "stflow._handles.context.context",
        7: "stflow._handles.logical_data.logical_data",
        9: "stflow._handles.task.task",
        10: "tuple[Any, ...]",
        11: "stflow._handles.kernel.cuda_kernel",
        12: "numpy.ndarray",
        13: "stflow._graph.stackable_data.stackable_task",
        14: "stflow._places.places.exec_place",
        15: "stflow._core.errors.ShapeError",
    }
    assert set(revealed) == set(expected), output
    for line, kind in expected.items():
        assert revealed[line] != "Any", (line, output)
        assert kind in revealed[line], (line, revealed[line])


def test_a_misspelt_method_or_name_is_a_type_error(mypy_output):
    output = mypy_output
    assert re.search(r':16: error: "context" has no attribute "taks"', output), output
    assert re.search(r':17: error: Module has no attribute "contxt"', output), output


def _pyright() -> str | None:
    """basedpyright (the test extra installs it) or pyright, if installed."""
    for name in ("basedpyright", "pyright"):
        found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(
            name
        )
        if found:
            return found
    return None


def test_pyright_sees_the_public_types(tmp_path):
    checker = _pyright()
    if checker is None:
        pytest.skip("neither basedpyright nor pyright is installed")
    (tmp_path / "user_program.py").write_text(USER_PROGRAM)
    (tmp_path / "pyrightconfig.json").write_text(
        json.dumps({"extraPaths": [str(SOURCE.parent)], "typeCheckingMode": "standard"})
    )
    result = subprocess.run(
        [checker, "--outputjson", "--pythonpath", sys.executable, "user_program.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    report = json.loads(result.stdout)
    messages = {
        (d["range"]["start"]["line"] + 1, d["severity"]): d["message"]
        for d in report["generalDiagnostics"]
    }
    expected = {
        5: '"context"',
        7: '"logical_data"',
        9: '"task"',
        10: "tuple[",
        11: '"cuda_kernel"',
        12: '"ndarray[',
        13: '"stackable_task"',
        14: '"exec_place"',
        15: '"type[ShapeError]"',
    }
    for line, kind in expected.items():
        message = messages.get((line, "information"), "")
        assert kind in message, (line, message)
    assert '"taks"' in messages[(16, "error")]
    assert '"contxt"' in messages[(17, "error")]


def _type_checking_names() -> dict[str, str]:
    """``name -> module`` of the imports under ``if TYPE_CHECKING:`` in __init__."""
    tree = ast.parse((SOURCE / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    module = "." * statement.level + (statement.module or "")
                    for alias in statement.names:
                        assert alias.asname == alias.name, (
                            f"re-export {alias.name} as itself (PEP 484)"
                        )
                        names[alias.name] = module
    return names


def test_type_checking_imports_match_the_lazy_names():
    names = _type_checking_names()
    submodules = {name for name, module in names.items() if module == "."}
    assert submodules == set(stf._SUBMODULES)
    lazy = {name: module for name, module in names.items() if module != "."}
    assert lazy == stf._LOCATIONS
    assert set(stf.__all__) - {"__version__"} <= set(names)


def _public_callables():
    for name in stf.__all__:
        value = getattr(stf, name)
        yield name, value
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                if attribute == "__init__" or (
                    not attribute.startswith("_") and callable(member)
                ):
                    yield f"{name}.{attribute}", member


def test_public_signatures_have_no_private_parameters():
    offenders = []
    for name, value in _public_callables():
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError):
            continue
        private = [p for p in signature.parameters if p.startswith("_")]
        if private:
            offenders.append(f"{name}{signature}")
    assert offenders == []


def test_the_package_is_marked_typed():
    assert (SOURCE / "py.typed").is_file()


BUNDLE_PROGRAM = textwrap.dedent("""\
    from typing import Any, NamedTuple
    import numpy as np
    import stflow as stf

    class CSR(NamedTuple):
        vals: Any
        colind: Any

    ctx = stf.context()
    vals = ctx.logical_data(np.zeros(4))
    colind = ctx.logical_data(np.zeros(4, dtype=np.int64))
    A = ctx.bundle(CSR, vals=vals, colind=stf.constant(colind))
    reveal_type(A)
    reveal_type(A.view_type)
    reveal_type(A.read())
    reveal_type(ctx.bundle(vals=vals))
    with ctx.task(A.read()) as t:
        a: CSR = t.get(0)
        reveal_type(a.colind)
        a.values
""")


def test_mypy_sees_typed_bundle_views(tmp_path):
    """Issue 25: ``ctx.bundle(ViewType, ...)`` types the bundle by its named tuple,
    so editors know a slot's fields (``a.colind``) and flag misspelt ones."""
    output = _mypy(tmp_path, BUNDLE_PROGRAM)
    revealed = _revealed(output)
    assert (
        revealed[13].startswith("stflow._handles.bundles.bundle[")
        and "fallback=user_program.CSR" in revealed[13]
    ), output
    assert (
        revealed[14].startswith("type[") and "fallback=user_program.CSR" in revealed[14]
    ), output
    assert revealed[15] == "stflow._handles.bundles.bundle_dep", output
    assert revealed[16] == "stflow._handles.bundles.bundle[Any]", output
    assert revealed[19] == "Any", output
    assert re.search(r':20: error: "CSR" has no attribute "values"', output), output
