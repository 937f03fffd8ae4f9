"""stflow: a Sequential Task Flow runtime for Python on CUDA GPUs.

Each public name lives in one private module of a part (a folder: ``_handles``,
``_engine``, ``_graph``, ``_places``, ...; docs/architecture.md draws them) and is
re-exported here lazily, from the table ``_LOCATIONS`` below.

Public submodules under the reference's paths: ``paths``, ``fill_utils``, ``errors``,
``device_array``, ``task_graph`` and ``green_places`` (the last two are callable, so
``stf.task_graph(...)`` works whatever was imported first; see ``_submodules``),
``_stream_utils`` and ``_stf_bindings`` (aliases of the reference's private modules).
``paths``, ``errors``, ``fill_utils``, ``interop`` and ``partitions`` (stflow's named
partition mappers) are also attributes of the package without a separate import.

``import stflow`` loads NumPy only; no CUDA module is imported before a context (or a
place factory) needs a backend. Type checkers and editors cannot follow the lazy
``__getattr__``: they see the same names through the imports under ``TYPE_CHECKING``
(and not ``__getattr__`` itself, so a misspelt name is an error there). ``stflow.__compiled__`` tells whether the hot modules
run compiled (``setup.py``; ``STFLOW_PURE_PYTHON=1`` runs their Python sources).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _compile
from ._core import config as _config

if _config.pure_python_requested() or _compile.stale():
    _compile.use_sources()

# The reference's package names, the names it keeps in its bindings module,
# ``locality_domain_count`` (lazy but missing from the reference's ``__all__``), and the
# names stflow adds (docs/porting.md, "What stflow adds").
_REFERENCE_NAMES = [
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
]
_BINDING_NAMES = [
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
]
_STFLOW_NAMES = [
    "ProgressBar",
    "TileGrid",
    "block_cyclic",
    "bundle",
    "constant",
    "distributed_context",
    "reduce",
    "tiles",
]

__all__ = [*_REFERENCE_NAMES, *_BINDING_NAMES, "locality_domain_count", *_STFLOW_NAMES]

# Where each lazily resolved name is defined. ``IncludePaths`` resolves too (as in
# the reference's ``paths`` module) but is not part of ``__all__``.
_LOCATIONS = {
    "AccessMode": "._handles.logical_data",
    "ProgressBar": "._instruments.progress",
    "distributed_context": "._dist.context",
    "TileGrid": "._handles.tiles",
    "block_cyclic": "._handles.tiles",
    "bundle": "._handles.bundles",
    "constant": "._handles.bundles",
    "tiles": "._handles.tiles",
    "async_resources": "._engine.resources",
    "cond": "._graph.cond",
    "context": "._handles.context",
    "cuda_kernel": "._handles.kernel",
    "CudaStream": "._interchange.views",
    "data_place": "._places.places",
    "dep": "._handles.logical_data",
    "DeviceArray": "._interchange.device_array",
    "dlpack_export": "._interchange.dlpack",
    "exec_place": "._places.places",
    "exec_place_grid": "._places.places",
    "exec_place_resources": "._engine.resources",
    "get_include_paths": ".paths",
    "get_library_dir": ".paths",
    "get_library_path": ".paths",
    "get_stf_include_dir": ".paths",
    "green_context_helper": "._places.green",
    "green_ctx_view": "._places.green_view",
    "green_places": "._places.green",
    "IncludePaths": ".paths",
    "LaunchableGraph": "._graph.launchable",
    "locality_domain_count": "._places.locality",
    "logical_data": "._handles.logical_data",
    "machine_init": ".backends",
    "read": "._handles.logical_data",
    "reduce": "._handles.logical_data",
    "rw": "._handles.logical_data",
    "stackable_context": "._graph.stackable",
    "stackable_logical_data": "._graph.stackable_data",
    "stackable_task": "._graph.stackable_data",
    "stf_cai": "._interchange.views",
    "task": "._handles.task",
    "task_graph": "._graph.task_graph",
    "TaskGraph": "._graph.task_graph",
    "write": "._handles.logical_data",
}

# Submodules that are attributes of the package without a separate import (the
# reference imports ``paths`` eagerly; importing any of these loads no CUDA module).
_SUBMODULES = frozenset({"errors", "fill_utils", "interop", "partitions", "paths"})


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


if TYPE_CHECKING:
    # What type checkers and editors see: the same names as the lazy ``__getattr__``
    # below resolves at run time (tests/unit/test_typing.py checks both agree).
    from . import errors as errors
    from . import fill_utils as fill_utils
    from . import interop as interop
    from . import partitions as partitions
    from . import paths as paths
    from ._dist.context import distributed_context as distributed_context
    from ._engine.resources import async_resources as async_resources
    from ._engine.resources import exec_place_resources as exec_place_resources
    from ._graph.cond import cond as cond
    from ._graph.launchable import LaunchableGraph as LaunchableGraph
    from ._graph.stackable import stackable_context as stackable_context
    from ._graph.stackable_data import stackable_logical_data as stackable_logical_data
    from ._graph.stackable_data import stackable_task as stackable_task
    from ._graph.task_graph import TaskGraph as TaskGraph
    from ._graph.task_graph import task_graph as task_graph
    from ._handles.bundles import bundle as bundle
    from ._handles.bundles import constant as constant
    from ._handles.context import context as context
    from ._handles.kernel import cuda_kernel as cuda_kernel
    from ._handles.logical_data import AccessMode as AccessMode
    from ._handles.logical_data import dep as dep
    from ._handles.logical_data import logical_data as logical_data
    from ._handles.logical_data import read as read
    from ._handles.logical_data import reduce as reduce
    from ._handles.logical_data import rw as rw
    from ._handles.logical_data import write as write
    from ._handles.task import task as task
    from ._handles.tiles import TileGrid as TileGrid
    from ._handles.tiles import block_cyclic as block_cyclic
    from ._handles.tiles import tiles as tiles
    from ._instruments.progress import ProgressBar as ProgressBar
    from ._interchange.device_array import DeviceArray as DeviceArray
    from ._interchange.dlpack import dlpack_export as dlpack_export
    from ._interchange.views import CudaStream as CudaStream
    from ._interchange.views import stf_cai as stf_cai
    from ._places.green import green_context_helper as green_context_helper
    from ._places.green import green_places as green_places
    from ._places.green_view import green_ctx_view as green_ctx_view
    from ._places.locality import locality_domain_count as locality_domain_count
    from ._places.places import data_place as data_place
    from ._places.places import exec_place as exec_place
    from ._places.places import exec_place_grid as exec_place_grid
    from .backends import machine_init as machine_init
    from .paths import IncludePaths as IncludePaths
    from .paths import get_include_paths as get_include_paths
    from .paths import get_library_dir as get_library_dir
    from .paths import get_library_path as get_library_path
    from .paths import get_stf_include_dir as get_stf_include_dir

    __compiled__: bool


if not TYPE_CHECKING:
    # Hidden from type checkers, so that a misspelt ``stf.contxt`` is an error there.
    def __getattr__(name: str) -> Any:
        if name == "__compiled__":
            return _compile.compiled()
        if name in _SUBMODULES:
            value = importlib.import_module(f".{name}", __name__)
            globals()[name] = value
            return value
        module = _LOCATIONS.get(name)
        if module is None:
            raise AttributeError(f"module 'stflow' has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    # Everything that resolves: globals, __all__, the lazy submodules, IncludePaths.
    return sorted(set(globals()) | set(__all__) | _SUBMODULES | set(_LOCATIONS))
