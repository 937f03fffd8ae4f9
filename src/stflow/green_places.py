"""``stflow.green_places``: the reference's module path of :func:`green_places`.

``from stflow.green_places import green_places`` works as with
``cuda.stf._experimental.green_places``. The implementation lives in
``stflow._places.green``, imported on first use (this module imports nothing heavy).

This module is callable (``stflow._submodules``): importing it rebinds the package
attribute ``stflow.green_places`` to this module, and calling the module calls
:func:`green_places`, so ``stf.green_places(...)`` keeps working whatever the import
order (the reference's module of the same name shadows its function once imported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._submodules import make_callable

__all__ = ["green_places"]


def _function() -> Callable[..., Any]:
    from ._places.green import green_places

    return green_places


def __getattr__(name: str) -> Any:
    # ``green_places`` resolves to the implementation itself (the same object as
    # ``stflow._places.green.green_places``); ``exec_place`` as the reference's module has it.
    if name == "green_places":
        value = _function()
    elif name == "exec_place":
        from ._places.places import exec_place

        value = exec_place
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


make_callable(__name__, _function)
