"""Adapters between stflow tasks and array frameworks.

Each submodule turns a task's views into the framework's arrays and makes the task
stream the framework's current stream:

- :mod:`stflow.interop.numba`    Numba CUDA device arrays and ``@jit`` kernels
- :mod:`stflow.interop.pytorch`  PyTorch tensors
- :mod:`stflow.interop.cupy`     CuPy arrays (CUDA backend only)
- :mod:`stflow.interop.warp`     NVIDIA Warp arrays

Importing this package, or any of its submodules, imports no framework: each adapter
imports its framework on first use and raises
:class:`~stflow.errors.BackendUnavailableError` naming the pip extra when it is
missing. Stream and ownership semantics of every protocol: ``docs/interop.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["cupy", "numba", "pytorch", "warp"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
