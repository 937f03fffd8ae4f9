"""Submodules that are also callable, for the two names the reference uses twice.

In the reference, ``task_graph`` and ``green_places`` are both functions of the package
and names of submodules. Python's import system sets the package attribute to the
submodule whenever the submodule is imported (``import stflow.task_graph``), so after
that import ``stf.task_graph`` would be a module and ``stf.task_graph()`` would raise
``TypeError`` (a trap the reference falls into itself).

stflow keeps the submodules, because porting users import them
(``from cuda.stf._experimental.task_graph import TaskGraph``), and makes each of them
*callable*: :func:`make_callable` changes the module's class to
:class:`CallableModule`, whose ``__call__`` forwards to the function of the same name.
Whatever the import order, ``stf.task_graph(...)`` and ``stf.green_places(...)`` call
the function; ``inspect.signature`` reports the function's signature.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["CallableModule", "make_callable"]


class CallableModule(types.ModuleType):
    """A module that calls its function when called.

    The module's global ``_resolve_function`` (set by :func:`make_callable`) returns
    the function; it is looked up at each call so that the function's own module can
    be imported lazily.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve_function()(*args, **kwargs)

    @property
    def __signature__(self) -> Any:
        import inspect

        return inspect.signature(self._resolve_function())


def make_callable(
    module_name: str, resolve_function: Callable[[], Callable[..., Any]]
) -> None:
    """Make the already imported module ``module_name`` callable.

    Parameters
    ----------
    module_name : str
        The module's ``__name__`` (``sys.modules`` holds it while it runs).
    resolve_function : callable
        Returns the function that calling the module calls.
    """
    module = sys.modules[module_name]
    module.__dict__["_resolve_function"] = resolve_function
    module.__class__ = CallableModule
