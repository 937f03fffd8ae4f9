"""stflow: a Sequential Task Flow runtime for Python on CUDA GPUs.

Layout (each name lives in one private module and is re-exported here lazily):

- ``_context``       context: data creation, tasks, fence/wait/finalize
- ``_task``          task and host_launch: acquire -> body -> release
- ``_runtime``       the machinery behind a context (streams, prologue/epilogue)
- ``_logical_data``  logical_data, dep, read/write/rw, AccessMode
- ``_coherence``     instances per place and their states (pure)
- ``_deps``          ordering rules: RAW/WAR/WAW from access modes (pure)
- ``_places``        data_place, exec_place
- ``_views``         CudaStream, stf_cai
- ``_device_array``  DeviceArray (CAI / array interface and DLPack exports)
- ``_dlpack``        DLPack capsules: dlpack_export, reading producers' capsules
- ``_kernel``        cuda_kernel: tasks whose body describes kernel launches
- ``interop/``       adapters for Numba, PyTorch, CuPy and Warp (lazy imports)
- ``backends/``      the backend contract, the emulated and CUDA backends
- ``testing``        random task programs and their sequential NumPy oracle

``import stflow`` loads NumPy only; no CUDA module is imported before a context (or a
place factory) needs a backend. ``stflow.__compiled__`` tells whether the hot modules
run compiled (``setup.py``; ``STFLOW_PURE_PYTHON=1`` runs their Python sources).
"""

from __future__ import annotations

import importlib
from typing import Any

from . import _compile, _config

if _config.pure_python_requested() or _compile.stale():
    _compile.use_sources()

__all__ = [
    "AccessMode",
    "cond",
    "context",
    "cuda_kernel",
    "CudaStream",
    "data_place",
    "dep",
    "DeviceArray",
    "dlpack_export",
    "exec_place",
    "get_include_paths",
    "get_library_dir",
    "get_library_path",
    "get_stf_include_dir",
    "IncludePaths",
    "LaunchableGraph",
    "logical_data",
    "machine_init",
    "read",
    "reduce",
    "rw",
    "stackable_context",
    "stackable_logical_data",
    "stackable_task",
    "stf_cai",
    "task",
    "task_graph",
    "TaskGraph",
    "write",
]

_LOCATIONS = {
    "AccessMode": "._logical_data",
    "cond": "._cond",
    "context": "._context",
    "cuda_kernel": "._kernel",
    "CudaStream": "._views",
    "data_place": "._places",
    "dep": "._logical_data",
    "DeviceArray": "._device_array",
    "dlpack_export": "._dlpack",
    "exec_place": "._places",
    "get_include_paths": ".paths",
    "get_library_dir": ".paths",
    "get_library_path": ".paths",
    "get_stf_include_dir": ".paths",
    "IncludePaths": ".paths",
    "LaunchableGraph": "._stackable",
    "logical_data": "._logical_data",
    "machine_init": ".backends",
    "read": "._logical_data",
    "reduce": "._logical_data",
    "rw": "._logical_data",
    "stackable_context": "._stackable",
    "stackable_logical_data": "._stackable",
    "stackable_task": "._stackable",
    "stf_cai": "._views",
    "task": "._task",
    "task_graph": "._task_graph",
    "TaskGraph": "._task_graph",
    "write": "._logical_data",
}


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return "0.0.0"
    try:
        return version("stflow")
    except PackageNotFoundError:
        return "0.0.0"


__version__ = _version()


def __getattr__(name: str) -> Any:
    if name == "__compiled__":
        return _compile.compiled()
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'stflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
