"""The checks of issue 28, items 3 and 4, read from the sources.

- No probing: a capability the runtime uses is declared on the backend contract
  (``backends/_base.py``) or on the owner's or view's protocol, never asked for by
  name. A ``getattr`` with a default, or a ``hasattr``, of a name that is not a
  Python protocol (``__dunder__``) is a probe unless :data:`ALLOWED_PROBES` says why it
  is not one: an attribute of a third-party module or object (versions of cuda.bindings,
  cupy, numba, MPI), or a protocol of user objects.
- Nothing outside ``backends/`` imports a backend module other than ``backends`` and
  ``backends._base``.
- No import circle (imports under ``TYPE_CHECKING`` included: arrows only go down).
- Only ``_core/config.py`` reads the environment; the variables of other programs that
  stflow reads are listed in ``_config.OTHER_VARIABLES``.

Each allow-list has a section "owned by other branches, pending merge": what other
branches of issue 28 remove. The lead empties those sections after merging them; an
entry that no longer matches anything fails :func:`test_the_allow_lists_hold_no_stale_entries`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import stflow
import stflow._core.config as config

SOURCE = Path(stflow.__file__).parent

# -- probes: (module path under stflow/, attribute name) -> why it is not one ------------
_THIRD_PARTY = "an attribute of a third-party module or object, absent in some versions"
_USER = "a protocol of objects the user passes in"
ALLOWED_PROBES: dict[tuple[str, str], str] = {
    # third-party modules and objects
    ("_dist/staging.py", "Query_cuda_support"): f"{_THIRD_PARTY} (mpi4py)",
    ("backends/_cuda_driver.py", "name"): f"{_THIRD_PARTY} (a cuda.bindings CUresult)",
    ("backends/_cuda_graphs.py", "name"): f"{_THIRD_PARTY} (a cuda.bindings CUresult)",
    ("backends/_cuda_graphs.py", "cuGraphAddNode_v2"): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_graphs.py",
        "cuGraphAddDependencies_v2",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    ("backends/_cuda_graphs.py", "cuGraphGetEdges_v2"): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_graphs.py",
        "cuStreamGetCaptureInfo_v3",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_graphs.py",
        "cuStreamUpdateCaptureDependencies_v2",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_graphs.py",
        "cuGraphNodeGetContainingGraph",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_graphs.py",
        "cuGraphNodeGetDependencies_v2",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    (
        "backends/_cuda_green.py",
        "CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT",
    ): f"{_THIRD_PARTY} (cuda.bindings)",
    ("backends/_cuda_green.py", "min_partition_size"): f"{_THIRD_PARTY} (driver structs)",
    (
        "backends/_cuda_green.py",
        "coscheduled_alignment",
    ): f"{_THIRD_PARTY} (driver structs)",
    ("backends/_cuda_green.py", "sm_count"): f"{_THIRD_PARTY} (driver structs)",
    ("backends/_cuda_streams.py", "cuStreamGetDevice"): f"{_THIRD_PARTY} (CUDA 12.8+)",
    ("backends/cuda.py", "cuCtxGetId"): f"{_THIRD_PARTY} (CUDA 12.0+)",
    ("backends/cuda.py", "handle"): f"{_THIRD_PARTY} (a cuda.core or CuPy kernel)",
    ("backends/cuda.py", "kernel"): f"{_THIRD_PARTY} (a Numba CUDA dispatcher)",
    ("interop/cupy.py", "from_external"): f"{_THIRD_PARTY} (CuPy)",
    ("interop/numba.py", "ENABLE_CUDASIM"): f"{_THIRD_PARTY} (numba.core.config)",
    ("interop/_numba_simulator.py", "external_stream"): f"{_THIRD_PARTY} (numba.cuda)",
    (
        "interop/_numba_simulator.py",
        "_stflow",
    ): "the mark stflow leaves on the Numba simulator functions it wrapped",
    ("paths.py", "libcudacxx"): f"{_THIRD_PARTY} (cuda.cccl)",
    (
        "_interchange/sources.py",
        "from_dlpack",
    ): f"{_THIRD_PARTY} (cuda.core's StridedMemoryView, from 0.5)",
    # protocols of user objects
    ("_core/errors.py", "add_note"): f"{_USER} (exceptions: Python 3.11+)",
    ("interop/_common.py", "add_note"): f"{_USER} (exceptions: Python 3.11+)",
    (
        "_handles/bundles.py",
        "_fields",
    ): f"{_USER} (named tuples: the view type of a bundle)",
    (
        "_handles/task.py",
        "name",
    ): f"{_USER} (_as_stf_exec_place: the reference's conversion to exec_place)",
    ("_dist/context.py", "name"): f"{_USER} (an mpi4py-like communicator's methods)",
    ("_instruments/progress.py", "write"): f"{_USER} (a file)",
    ("_linalg_operands.py", "shape"): f"{_USER} (arrays)",
    ("_linalg_operands.py", "ptr"): f"{_USER} (CuPy streams)",
    ("_linalg_operands.py", "ndarray"): f"{_THIRD_PARTY} (the cupy module, when "
    f"imported, names its array type)",
    # -- owned by other branches, pending merge (the lead empties this section) -------
}

# -- imports of backend modules from outside backends/: (importer, imported) -----------
ALLOWED_BACKEND_IMPORTS: dict[tuple[str, str], str] = {
    # -- owned by other branches, pending merge (the lead empties this section) -------
}

# -- import circles (module sets, names under stflow) ------------------------------------
ALLOWED_CIRCLES: dict[frozenset[str], str] = {
    # -- owned by other branches, pending merge (the lead empties this section) -------
}

# -- readers of the environment besides _core/config.py: module -> the variables it reads ----
ALLOWED_ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "paths.py": ("CUDA_HOME", "CUDA_PATH"),  # where the CUDA toolkit is
    "demo.py": ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"),
}
"""Variables of other programs (the toolkit's, the BLAS libraries'): not settings of
stflow, so not in ``_config.SETTINGS``; ``_config.OTHER_VARIABLES`` names them."""


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(SOURCE).as_posix(): ast.parse(path.read_text())
        for path in sorted(SOURCE.rglob("*.py"))
    }


@functools.lru_cache(maxsize=1)
def _probes() -> list[tuple[str, str, int]]:
    """``(module, attribute, line)`` of every getattr with a default and every
    hasattr of a name that is not a ``__dunder__``."""
    found = []
    for module, tree in _modules().items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if not (
                (node.func.id == "getattr" and len(node.args) == 3)
                or (node.func.id == "hasattr" and len(node.args) == 2)
            ):
                continue
            name = node.args[1]
            text = name.value if isinstance(name, ast.Constant) else ast.unparse(name)
            if isinstance(text, str) and text.startswith("__") and text.endswith("__"):
                continue  # a Python protocol
            found.append((module, str(text), node.lineno))
    return found


def _dotted(module: str) -> str:
    """``"backends/emulated.py"`` -> ``"backends.emulated"`` (a package: its name;
    ``""`` for ``stflow`` itself)."""
    parts = module[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=1)
def _imports() -> list[tuple[str, str, int]]:
    """``(importer, imported, line)``: every import of a stflow module by a stflow
    module (at the top, in functions, under ``TYPE_CHECKING``), names dotted under
    ``stflow`` (``"backends._base"``; ``""`` is the package itself)."""
    modules = _modules()
    names = {_dotted(module) for module in modules}
    found = []
    for module, tree in modules.items():
        name = _dotted(module)
        package = (
            name.split(".") if module.endswith("__init__.py") else name.split(".")[:-1]
        )
        package = [part for part in package if part]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{target}.{alias.name}".lstrip(".")
                    targets.append(sub if sub in names else target)
            elif (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] == "stflow"
            ):
                targets.append((node.module or "").removeprefix("stflow").lstrip("."))
            elif isinstance(node, ast.Import):
                targets += [
                    alias.name.removeprefix("stflow").lstrip(".")
                    for alias in node.names
                    if alias.name.split(".")[0] == "stflow"
                ]
            found += [(module, target, node.lineno) for target in targets]
    return found


def test_no_capability_is_probed_by_name():
    probes = [(m, a, line) for m, a, line in _probes() if (m, a) not in ALLOWED_PROBES]
    assert not probes, (
        "probes of the contract (getattr with a default, hasattr): "
        + "; ".join(f"stflow/{m}:{line} {a!r}" for m, a, line in probes)
        + ". Declare the capability on backends/_base.py (or the owner's or view's "
        "protocol) and call it; test user input with isinstance against stflow's own "
        "classes; for a third-party module or a user protocol add it to ALLOWED_PROBES "
        "with the reason"
    )


def test_only_backends_import_backend_modules():
    crossing = [
        (m, t, line)
        for m, t, line in _imports()
        if t.startswith("backends.")
        and t != "backends._base"
        and not m.startswith("backends/")
        and (m, t) not in ALLOWED_BACKEND_IMPORTS
    ]
    assert not crossing, (
        "backend internals imported from outside backends/: "
        + "; ".join(f"stflow/{m}:{line} imports {t}" for m, t, line in crossing)
        + ". Declare what is needed on the contract (backends/_base.py) or export it "
        "from backends/__init__.py"
    )


def _circles() -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    edges: dict[str, set[str]] = {}
    for module, target, _ in _imports():
        name = _dotted(module)
        if target and target != name:
            edges.setdefault(name, set()).add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle():
    circles = [c for c in _circles() if c not in ALLOWED_CIRCLES]
    assert not circles, (
        "import circles: "
        + "; ".join(" <-> ".join(sorted(c)) for c in circles)
        + ". Move what both need into the lower module (or a protocol of it), so that "
        "imports only go down"
    )


def _environment_readers() -> dict[str, list[int]]:
    """Module -> lines where it touches ``os.environ`` / ``os.getenv``."""
    readers: dict[str, list[int]] = {}
    for module, tree in _modules().items():
        for node in ast.walk(tree):
            touches = (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv", "environb")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ) or (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(a.name in ("environ", "getenv") for a in node.names)
            )
            if touches:
                readers.setdefault(module, []).append(node.lineno)
    return readers


def test_settings_are_read_in_config_only():
    readers = {
        m: lines
        for m, lines in _environment_readers().items()
        if m != "_core/config.py" and m not in ALLOWED_ENVIRONMENT
    }
    assert not readers, (
        "the environment is read outside _core/config.py: "
        + "; ".join(f"stflow/{m}:{lines}" for m, lines in readers.items())
        + ". Add the variable to _config.SETTINGS and call its accessor"
    )


def test_variables_of_other_programs_are_listed_in_config():
    listed = " ".join(names for names, _ in config.OTHER_VARIABLES)
    for module, variables in ALLOWED_ENVIRONMENT.items():
        text = (SOURCE / module).read_text()
        for variable in variables:
            assert variable in text, f"stflow/{module} no longer reads {variable}"
            assert variable in listed, (
                f"stflow/{module} reads {variable}: name it in _config.OTHER_VARIABLES"
            )
            assert variable not in {s.name for s in config.SETTINGS}


def test_the_allow_lists_hold_no_stale_entries():
    probes = {(m, a) for m, a, _ in _probes()}
    imports = {(m, t) for m, t, _ in _imports()}
    circles = set(_circles())
    readers = _environment_readers()
    stale = (
        [f"probe {key}" for key in ALLOWED_PROBES if key not in probes]
        + [f"import {key}" for key in ALLOWED_BACKEND_IMPORTS if key not in imports]
        + [f"circle {sorted(c)}" for c in ALLOWED_CIRCLES if c not in circles]
        + [f"environment {m}" for m in ALLOWED_ENVIRONMENT if m not in readers]
    )
    assert not stale, (
        "allow-list entries that match nothing any more (remove them): "
        + "; ".join(stale)
    )


def test_the_checks_see_what_they_look_for():
    """The scanners find a probe, a backend import and a circle where there is one
    (a check that finds nothing proves nothing)."""
    assert ("_dist/staging.py", "Query_cuda_support") in {(m, a) for m, a, _ in _probes()}
    assert ("backends/emulated.py", "backends._host_memory") in {
        (m, t) for m, t, _ in _imports()
    }
    assert ("_handles/context.py", "backends") in {(m, t) for m, t, _ in _imports()}
    assert "paths.py" in _environment_readers()
