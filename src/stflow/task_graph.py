"""``stflow.task_graph``: the reference's module path of :func:`task_graph`.

Code written for ``cuda.stf._experimental.task_graph`` imports from here unchanged
(``from stflow.task_graph import TaskGraph, task_graph``). The implementation lives in
``stflow._graph.task_graph``.

This module is callable (``stflow._submodules``): importing it rebinds the package
attribute ``stflow.task_graph`` to this module, and calling the module calls
:func:`task_graph`, so ``stf.task_graph()`` keeps working whatever the import order
(the reference's module of the same name shadows its function once imported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._graph.task_graph import TaskGraph, task_graph
from ._submodules import make_callable

__all__ = ["TaskGraph", "task_graph"]


def _function() -> Callable[..., Any]:
    return task_graph


make_callable(__name__, _function)
