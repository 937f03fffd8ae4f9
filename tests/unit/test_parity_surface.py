"""The package surface of the reference (``cuda.stf._experimental``), name by name.

Covers PARITY.md section 3, tables 1 (package names and module functions) and 5
(pure-Python layers and submodules): every reference name resolves under stflow's
paths, ``__all__`` is what API.md 1.2 says, keyword names match where the reference's
callers use them, and ``stf.task_graph`` / ``stf.green_places`` stay callable whatever
the import order (API.md I-16).

Names of Tier 3 (``exec_place_grid``, ``async_resources``, ``exec_place_resources``,
``green_context_helper``, ``green_ctx_view``, ``green_places``,
``locality_domain_count``) live in modules written separately (``_places``,
``_resources``, ``_green``); their resolution tests skip, saying so, while the module
or the name is not there yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import stflow as stf

# API.md 1.2, in three parts.
REFERENCE_PACKAGE_NAMES = {
    "AccessMode",
    "CudaStream",
    "DeviceArray",
    "TaskGraph",
    "__version__",
    "async_resources",
    "cond",
    "context",
    "data_place",
    "dep",
    "exec_place",
    "exec_place_grid",
    "exec_place_resources",
    "get_include_paths",
    "get_library_dir",
    "get_library_path",
    "get_stf_include_dir",
    "green_context_helper",
    "green_ctx_view",
    "green_places",
    "machine_init",
    "paths",
    "stackable_context",
    "task_graph",
}
REFERENCE_BINDING_NAMES = {
    "LaunchableGraph",
    "cuda_kernel",
    "dlpack_export",
    "logical_data",
    "read",
    "rw",
    "stackable_logical_data",
    "stackable_task",
    "stf_cai",
    "task",
    "write",
}
STFLOW_ONLY_NAMES = {
    "reduce",
    "ProgressBar",
    "TileGrid",
    "tiles",  # issue 14
    "distributed_context",
    "block_cyclic",  # issue 12
    "bundle",
    "constant",
}  # issue 25

# The reference's ``_stf_bindings.__all__``.
REFERENCE_BINDINGS_ALL = {
    "AccessMode",
    "CudaStream",
    "LaunchableGraph",
    "async_resources",
    "cond",
    "context",
    "cuda_kernel",
    "data_place",
    "dep",
    "dlpack_export",
    "exec_place",
    "exec_place_grid",
    "exec_place_resources",
    "green_context_helper",
    "green_ctx_view",
    "locality_domain_count",
    "logical_data",
    "machine_init",
    "read",
    "rw",
    "stackable_context",
    "stackable_logical_data",
    "stackable_task",
    "stf_cai",
    "task",
    "write",
}

# Tier-3 names and the private module that defines each.
TIER3 = {
    "exec_place_grid": "stflow._places.places",
    "async_resources": "stflow._engine.resources",
    "exec_place_resources": "stflow._engine.resources",
    "green_context_helper": "stflow._places.green",
    "green_ctx_view": "stflow._places.green_view",
    "green_places": "stflow._places.green",
    "locality_domain_count": "stflow._places.locality",
}


def _tier3_missing(name: str) -> str | None:
    """Why a Tier-3 name cannot resolve yet, or ``None`` when it can."""
    module = TIER3.get(name)
    if module is None:
        return None
    if importlib.util.find_spec(module) is None:
        return f"{module} is not written yet"
    if not hasattr(importlib.import_module(module), name):
        return f"{module} does not define {name} yet"
    return None


def _skip_if_pending(name: str) -> None:
    reason = _tier3_missing(name)
    if reason is not None:
        pytest.skip(f"Tier 3 pending: {reason}")


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# -- __all__ and dir() --------------------------------------------------------------


def test_all_is_what_the_spec_lists_and_each_name_once():
    expected = (
        REFERENCE_PACKAGE_NAMES
        | REFERENCE_BINDING_NAMES
        | {"locality_domain_count"}
        | STFLOW_ONLY_NAMES
    )
    assert len(stf.__all__) == len(set(stf.__all__)) == 44
    assert set(stf.__all__) == expected


@pytest.mark.parametrize("name", sorted(set(stf.__all__) - set(TIER3)))
def test_every_exported_name_resolves_and_is_cached(name):
    value = getattr(stf, name)
    assert getattr(stf, name) is value
    assert name in vars(stf)


@pytest.mark.parametrize("name", sorted(TIER3))
def test_tier3_names_resolve_from_their_modules(name):
    _skip_if_pending(name)
    value = getattr(stf, name)
    assert value is getattr(importlib.import_module(TIER3[name]), name)


def test_dir_is_sorted_and_complete():
    listing = dir(stf)
    assert listing == sorted(listing)
    assert set(stf.__all__) <= set(listing)
    assert set(vars(stf)) <= set(listing)
    assert {"errors", "fill_utils", "interop", "partitions", "IncludePaths"} <= set(
        listing
    )
    for name in set(listing) - set(TIER3):
        assert hasattr(stf, name), name


def test_star_import_binds_every_exported_name():
    out = _run(
        "from stflow import *\n"
        "import stflow\n"
        "missing = [n for n in stflow.__all__ if n not in globals()]\n"
        "print(missing, task_graph is stflow.task_graph)"
    )
    assert out == "[] True"


def test_include_paths_resolves_but_is_not_exported():
    assert stf.IncludePaths is stf.paths.IncludePaths
    assert "IncludePaths" not in stf.__all__


def test_version_comes_from_the_distribution():
    from importlib.metadata import PackageNotFoundError, version

    try:
        expected = version("stflow")
    except PackageNotFoundError:
        expected = "0.0.0"
    assert stf.__version__ == expected


# -- submodules -----------------------------------------------------------------------


def test_paths_is_an_attribute_right_after_import_stflow():
    out = _run(
        "import sys, stflow as stf\n"
        "assert stf.paths is sys.modules['stflow.paths']\n"
        "assert 'paths' in dir(stf)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('cuda', 'cupy', 'numba', 'torch', 'warp')]\n"
        "print(bad, sorted(m for m in sys.modules if m.startswith('stflow.')))"
    )
    assert out.startswith("[]"), out


@pytest.mark.parametrize(
    "module, names",
    [
        (
            "stflow.paths",
            [
                "IncludePaths",
                "get_include_paths",
                "get_library_dir",
                "get_library_path",
                "get_stf_include_dir",
                "iter_site_roots",
            ],
        ),
        ("stflow.fill_utils", ["init_logical_data"]),
        ("stflow.device_array", ["DeviceArray"]),
        ("stflow.task_graph", ["TaskGraph", "task_graph"]),
        ("stflow._stream_utils", ["get_stream_pointer"]),
        (
            "stflow.interop.numba",
            [
                "get_arg_numba",
                "jit",
                "numba_arguments",
                "numba_task",
                "stf_kernel_decorator",
            ],
        ),
        ("stflow.interop.pytorch", ["pytorch_task", "tensor_arg", "tensor_arguments"]),
    ],
)
def test_reference_submodules_import_with_their_names(module, names):
    loaded = importlib.import_module(module)
    assert set(names) <= set(loaded.__all__)
    for name in names:
        assert getattr(loaded, name) is not None


def test_submodule_classes_are_the_package_objects():
    from stflow.device_array import DeviceArray
    from stflow.task_graph import TaskGraph, task_graph

    assert DeviceArray is stf.DeviceArray
    assert TaskGraph is stf.TaskGraph
    assert task_graph is importlib.import_module("stflow._graph.task_graph").task_graph


def test_green_places_module_imports_without_its_implementation():
    module = importlib.import_module("stflow.green_places")
    assert module.__all__ == ["green_places"]
    assert callable(module)
    assert module.exec_place is stf.exec_place
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        module.nonexistent  # noqa: B018


def test_green_places_module_reexports_the_implementation():
    _skip_if_pending("green_places")
    from stflow.green_places import green_places

    assert green_places is importlib.import_module("stflow._places.green").green_places
    assert list(inspect.signature(green_places).parameters) == [
        "sms_per_place",
        "n_places",
        "device_id",
        "coscheduled_sm_count",
    ]


def test_interop_imports_neither_numba_nor_torch():
    out = _run(
        "import sys, stflow.interop, stflow.interop.numba, stflow.interop.pytorch\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('numba', 'torch')])"
    )
    assert out == "[]"


# -- I-16: task_graph and green_places stay callable ----------------------------------

_FAKE_GREEN = (
    "import sys, types\n"
    "fake = types.ModuleType('stflow._places.green')\n"
    "def green_places(sms_per_place, n_places=None, device_id=0,\n"
    "                 coscheduled_sm_count=0):\n"
    "    return ('called', sms_per_place, n_places, device_id,\n"
    "            coscheduled_sm_count)\n"
    "fake.green_places = green_places\n"
    "sys.modules['stflow._places.green'] = fake\n"
)


@pytest.mark.parametrize("order", ["function-first", "submodule-first", "from-import"])
def test_task_graph_is_callable_in_every_import_order(order):
    steps = {
        "function-first": "f = stf.task_graph\nimport stflow.task_graph as m\n",
        "submodule-first": "import stflow.task_graph as m\nf = stf.task_graph\n",
        "from-import": "from stflow import task_graph as f\n"
        "from stflow.task_graph import TaskGraph\n"
        "import stflow.task_graph as m\n",
    }[order]
    out = _run(
        "import inspect, stflow as stf\n"
        + steps
        + "assert callable(f) and callable(stf.task_graph) and callable(m)\n"
        "g = stf.task_graph(backend='emulated')\n"
        "assert isinstance(g, stf.TaskGraph)\n"
        "g.finalize()\n"
        "h = m(backend='emulated'); h.finalize()\n"
        "assert m.TaskGraph is stf.TaskGraph\n"
        "print(inspect.signature(stf.task_graph))"
    )
    assert out == "(*, backend: 'str | None' = None) -> 'TaskGraph'"


@pytest.mark.parametrize("order", ["function-first", "submodule-first"])
def test_green_places_is_callable_in_every_import_order(order):
    steps = {
        "function-first": "f = stf.green_places\nimport stflow.green_places as m\n",
        "submodule-first": "import stflow.green_places as m\nf = stf.green_places\n",
    }[order]
    out = _run(
        _FAKE_GREEN
        + "import inspect, stflow as stf\n"
        + steps
        + "assert f(4) == ('called', 4, None, 0, 0)\n"
        "assert stf.green_places(8, n_places=2) == ('called', 8, 2, 0, 0)\n"
        "assert m(2, 1, 0, coscheduled_sm_count=3) == ('called', 2, 1, 0, 3)\n"
        "from stflow.green_places import green_places\n"
        "assert green_places is fake.green_places\n"
        "print(list(inspect.signature(stf.green_places).parameters))"
    )
    assert out == "['sms_per_place', 'n_places', 'device_id', 'coscheduled_sm_count']"


def test_callable_submodules_are_modules():
    module = importlib.import_module("stflow.task_graph")
    assert isinstance(module, types.ModuleType)
    assert module.__name__ == "stflow.task_graph"


# -- _stf_bindings ----------------------------------------------------------------------


def test_bindings_alias_lists_the_reference_names():
    from stflow import _stf_bindings

    assert len(_stf_bindings.__all__) == 26
    assert set(_stf_bindings.__all__) == REFERENCE_BINDINGS_ALL
    assert dir(_stf_bindings) == sorted(dir(_stf_bindings))
    assert set(_stf_bindings.__all__) <= set(dir(_stf_bindings))


@pytest.mark.parametrize("name", sorted(REFERENCE_BINDINGS_ALL))
def test_bindings_alias_names_are_the_package_objects(name):
    _skip_if_pending(name)
    from stflow import _stf_bindings

    assert getattr(_stf_bindings, name) is getattr(stf, name)


def test_bindings_alias_refuses_other_names():
    from stflow import _stf_bindings

    with pytest.raises(AttributeError, match="no attribute 'reduce'"):
        _stf_bindings.reduce  # noqa: B018


def test_bindings_alias_imports_lazily():
    out = _run(
        "import sys, stflow._stf_bindings as b\n"
        "before = 'stflow._handles.context' in sys.modules\n"
        "from stflow._stf_bindings import context, stackable_task\n"
        "print(before, 'stflow._handles.context' in sys.modules)"
    )
    assert out == "False True"


# -- _stream_utils.get_stream_pointer (the reference's test_stream_utils contract) ------


class _Stream:
    def __init__(self, handle, version=0):
        self._handle, self._version = handle, version

    def __cuda_stream__(self):
        return (self._version, self._handle)


def test_get_stream_pointer_accepts_none_ints_and_the_protocol():
    from stflow._stream_utils import get_stream_pointer

    assert get_stream_pointer(None) == 0
    assert get_stream_pointer(0) == 0
    assert get_stream_pointer(0xDEADBEEF) == 0xDEADBEEF
    assert get_stream_pointer(_Stream(0x1234)) == 0x1234
    assert get_stream_pointer(stf.CudaStream(0x77)) == 0x77


def test_get_stream_pointer_prefers_the_protocol_over_int():
    from stflow._stream_utils import get_stream_pointer

    class IntStream(int):
        def __cuda_stream__(self):
            return (0, 0x4242)

    assert get_stream_pointer(IntStream(999)) == 0x4242


@pytest.mark.parametrize(
    "stream",
    [object(), "0x10", 1.5, True, _Stream(0x1234, 1), _Stream("not-an-int")],
    ids=["object", "str", "float", "bool", "version-1", "non-int-handle"],
)
def test_get_stream_pointer_rejects(stream):
    from stflow._stream_utils import get_stream_pointer

    with pytest.raises(TypeError):
        get_stream_pointer(stream)


def test_get_stream_pointer_rejects_a_malformed_protocol_result():
    from stflow._stream_utils import get_stream_pointer

    class Bad:
        def __cuda_stream__(self):
            return None

    with pytest.raises(TypeError, match="__cuda_stream__"):
        get_stream_pointer(Bad())


# -- keyword compatibility ----------------------------------------------------------------


def _parameters(function):
    return list(inspect.signature(function).parameters)


def test_device_array_takes_the_reference_keywords():
    assert _parameters(stf.DeviceArray) == ["size", "dtype", "dplace", "stream"]
    assert _parameters(stf.DeviceArray.from_host) == ["host_array", "dplace", "stream"]
    array = stf.DeviceArray(
        size=8, dtype=np.float32, dplace=stf.data_place.host(), stream=None
    )
    assert array.shape == (8,) and array.size == 8 and array.nbytes == 32
    assert repr(array).startswith("DeviceArray(size=8, dtype=float32")


def test_device_array_negative_size_says_non_negative():
    with pytest.raises(ValueError, match="non-negative"):
        stf.DeviceArray(-1, np.float32, stf.data_place.host())
    with pytest.raises(ValueError, match="non-negative"):
        stf.DeviceArray(size=(2, -3), dtype=np.float32, dplace=stf.data_place.host())


def test_device_array_shapes_are_a_documented_superset():
    array = stf.DeviceArray(size=(2, 3), dtype=np.int32, dplace=stf.data_place.host())
    assert array.shape == (2, 3) and array.size == 6
    values = np.arange(6, dtype=np.int64).reshape(2, 3)
    copy = stf.DeviceArray.from_host(values, stf.data_place.host())
    assert copy.shape == (2, 3)
    np.testing.assert_array_equal(copy.copy_to_host(), values)


@pytest.mark.parametrize(
    "function, parameters",
    [
        ("task_graph", []),
        ("get_include_paths", []),
        ("get_stf_include_dir", []),
        ("get_library_dir", []),
        ("get_library_path", []),
        ("machine_init", []),
    ],
)
def test_module_functions_take_the_reference_parameters(function, parameters):
    params = inspect.signature(getattr(stf, function)).parameters
    required = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    assert required == parameters


@pytest.mark.parametrize(
    "name, parameters",
    [
        ("locality_domain_count", ["dev_id"]),
        (
            "green_places",
            ["sms_per_place", "n_places", "device_id", "coscheduled_sm_count"],
        ),
    ],
)
def test_tier3_functions_take_the_reference_keywords(name, parameters):
    _skip_if_pending(name)
    assert _parameters(getattr(stf, name)) == parameters


# -- paths ------------------------------------------------------------------------------


def test_include_paths_are_pathlib_paths():
    paths = stf.get_include_paths()
    assert paths.stf is None
    for field in paths.as_tuple():
        assert field is None or isinstance(field, Path)
    assert paths.as_tuple() == (
        paths.stf,
        paths.thrust,
        paths.cub,
        paths.libcudacxx,
        paths.cuda,
    )


@pytest.mark.parametrize(
    "helper", ["get_stf_include_dir", "get_library_dir", "get_library_path"]
)
def test_native_helpers_raise_and_name_the_distribution(helper):
    with pytest.raises(RuntimeError, match="Unable to locate the CUDASTF") as info:
        getattr(stf.paths, helper)()
    assert "cuda-stf" in str(info.value) and "no native" in str(info.value)


def test_iter_site_roots_yields_unique_resolved_paths():
    roots = list(stf.paths.iter_site_roots())
    assert roots and all(isinstance(root, Path) and root.is_absolute() for root in roots)
    assert len(roots) == len(set(roots))
    for entry in sys.path:
        assert Path(entry).resolve() in roots


# -- install extras ------------------------------------------------------------------------


def _extras():
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no pyproject.toml next to the tests")
    with pyproject.open("rb") as handle:
        return tomllib.load(handle)["project"]["optional-dependencies"]


def test_the_reference_extras_exist_with_their_meaning():
    extras = _extras()
    for cuda in ("12", "13"):
        assert any(r.startswith("cuda-bindings") for r in extras[f"minimal-cu{cuda}"])
        assert extras[f"minimal-sysctk{cuda}"] == [f"stflow[minimal-cu{cuda}]"]
        for name in (f"cu{cuda}", f"sysctk{cuda}"):
            names = [r.split("[")[0].split(">")[0] for r in extras[name]]
            assert "numba" in names and "numba-cuda" in names
        assert extras[f"test-cu{cuda}"][0] == f"stflow[cu{cuda},test]"
        assert extras[f"test-sysctk{cuda}"][0] == f"stflow[sysctk{cuda},test]"
    assert extras["test"] == ["pytest>=7.4", "pytest-timeout>=2.1", "basedpyright>=1.20"]
