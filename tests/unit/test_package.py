"""The package surface: lazy names, no CUDA at import, exported names."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import stflow


def test_import_loads_no_cuda_module():
    code = (
        "import sys, stflow, stflow.errors, stflow.testing, stflow.paths; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('cuda', 'cupy', 'numba', 'torch', 'warp')]; "
        "print(bad); assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_public_name_resolves_once():
    assert len(__all__ := stflow.__all__) == len(set(__all__))
    for name in __all__:
        assert getattr(stflow, name) is getattr(stflow, name)
    assert sorted(dir(stflow)) == dir(stflow)
    assert set(__all__) <= set(dir(stflow))


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        stflow.nonexistent  # noqa: B018


def test_version_is_a_string():
    assert isinstance(stflow.__version__, str) and stflow.__version__


def test_private_bindings_alias_reexports_the_same_objects():
    from stflow import _stf_bindings

    for name in _stf_bindings.__all__:
        assert getattr(_stf_bindings, name) is getattr(stflow, name)


def test_error_classes_derive_from_the_matching_builtin():
    from stflow import errors

    assert issubclass(errors.AccessModeError, ValueError)
    assert issubclass(errors.PlaceError, ValueError)
    assert issubclass(errors.ShapeError, ValueError)
    assert issubclass(errors.ContextMismatchError, ValueError)
    assert issubclass(errors.ContextFinalizedError, RuntimeError)
    assert issubclass(errors.ScopeError, RuntimeError)
    assert issubclass(errors.CudaError, RuntimeError)
    assert issubclass(errors.BackendUnavailableError, ImportError)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.STFError) or name in (
            "BackendNotice",
            "UnfinalizedContextWarning",
        )
    assert issubclass(errors.UnfinalizedContextWarning, UserWarning)  # shown by default


def test_cuda_stream_and_stf_cai():
    stream = stflow.CudaStream(0x1234)
    assert stream == 0x1234 and stream.ptr == 0x1234
    assert stream.__cuda_stream__() == (0, 0x1234)
    assert repr(stream) == "CudaStream(0x1234)"
    view = stflow.stf_cai(0x1000, (2, 3), "float32", stream=7, readonly=True)
    assert view["data"] == (0x1000, True)
    assert view.get("stream") == 7 and view["strides"] is None
    assert view.__cuda_array_interface__["typestr"] == "<f4"
    record = stflow.stf_cai(0x10, (1,), [("a", "<i4"), ("b", "<f8")])
    assert "descr" in record.__cuda_array_interface__


def test_paths_helpers():
    paths = stflow.get_include_paths()
    assert paths.stf is None and len(paths.as_tuple()) == 5
    for helper in (
        stflow.get_stf_include_dir,
        stflow.get_library_dir,
        stflow.get_library_path,
    ):
        with pytest.raises(RuntimeError, match="no native"):
            helper()


def test_auto_backend_falls_back_with_one_notice(monkeypatch):
    code = (
        "import warnings, stflow as stf\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        with stf.context() as ctx: pass\n"
        "print(ctx.backend, sum('emulated CPU backend' in str(w.message) "
        "for w in seen))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "STFLOW_BACKEND"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    backend, notices = result.stdout.split()
    if backend == "emulated":
        assert notices == "1"


def test_bad_backend_names():
    with pytest.raises(ValueError, match="not one of"):
        stflow.context(backend="tpu")
    with pytest.raises(TypeError):
        stflow.context(backend=3)


def _probe(env_extra: dict) -> str:
    import os

    code = (
        "import stflow, stflow._engine.runtime, stflow._core.plan; "
        "print(stflow.__compiled__, stflow._engine.runtime.__file__.endswith('.py'), "
        "stflow._core.plan.__file__.endswith('.py'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env_extra},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_pure_python_switch_runs_the_sources_of_every_compiled_module():
    assert _probe({"STFLOW_PURE_PYTHON": "1"}) == "False True True"


def test_compiled_flag_tells_what_runs():
    from stflow import _compile
    from stflow._engine import runtime as _runtime

    assert stflow.__compiled__ is _compile.compiled()
    assert stflow.__compiled__ is (not _runtime.__file__.endswith(".py"))
    compiled = _probe({"STFLOW_PURE_PYTHON": "0"})
    assert compiled in ("True False False", "False True True")  # all or nothing


def test_the_compiled_modules_list_names_real_modules():
    from pathlib import Path

    from stflow._compile import COMPILED_MODULES, source

    package = Path(stflow.__file__).parent
    assert all(source(package, name).exists() for name in COMPILED_MODULES)


@pytest.mark.skipif(
    __import__("os").environ.get("STFLOW_EXPECT_COMPILED") != "1",
    reason="set STFLOW_EXPECT_COMPILED=1 where the compiled build must run",
)
def test_the_compiled_build_runs_where_expected():
    assert stflow.__compiled__, (
        "the hot modules run as Python: the compiled build "
        "did not install (see pip install -v .)"
    )


def test_cuda_task_views_expire_with_their_task():
    import copy
    import pickle

    from stflow._interchange.views import TaskView, stf_cai
    from stflow.errors import ScopeError

    view = TaskView(0x1000, (4,), np.float64)
    assert isinstance(view, stf_cai)
    assert view.__cuda_array_interface__["data"] == (0x1000, False)
    assert view["shape"] == (4,) and copy.copy(view) is view
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(view)
    view._invalidate("the task ended")
    with pytest.raises(ScopeError, match="the task ended"):
        view.__cuda_array_interface__  # noqa: B018
    with pytest.raises(ScopeError, match="the task ended"):
        view["data"]
