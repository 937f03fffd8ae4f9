"""Compatibility alias of the reference's private bindings module.

Code written for the reference sometimes imports from
``cuda.stf._experimental._stf_bindings`` directly (``from ..._stf_bindings import
context, logical_data``). This module offers the same 26 names (the reference's
``_stf_bindings.__all__``, ``locality_domain_count`` included); each is the same
object as the package attribute ``stflow.<name>``, resolved lazily on first access
(importing this module imports nothing else).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
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
]

_NAMES = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("stflow"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
