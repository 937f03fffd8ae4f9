"""What the adapters share: lazy framework imports and the task scope they open."""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from .._core.errors import BackendUnavailableError, RemoteTaskError
from .._dist.handles import dist_task
from .._interchange.views import ViewLifetime

__all__ = [
    "Elsewhere",
    "TaskScope",
    "add_note",
    "backend_of",
    "gpu_memory",
    "import_framework",
    "local_task",
    "recorded_into_a_graph",
    "task_label",
    "views_of",
]


def import_framework(module: str, extra: str, package: str) -> ModuleType:
    """Import ``module`` or raise ``BackendUnavailableError`` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"this stflow adapter needs {package}, which cannot be imported ({exc}); "
            f"install it with: pip install 'stflow[{extra}]'"
        ) from exc


def local_task(task: Any, what: str) -> Any:
    """The task whose views an adapter uses: ``task`` itself, or a distributed
    task's local task on its executing rank (``RemoteTaskError`` naming ``what``
    elsewhere)."""
    return task.local_task(what) if isinstance(task, dist_task) else task


def task_label(task: Any) -> str:
    """The label of ``task`` for messages ("task 'axpy'"; a distributed task's is its
    local task's)."""
    return str(local_task(task, "the task's label")._label())


def backend_of(task: Any) -> Any:
    """The backend of the task's context (of its local task, for a distributed
    task)."""
    return local_task(task, "the task's backend")._runtime.backend


def gpu_memory(task: Any) -> bool:
    """True when the task's views are CUDA memory (the backend's ``gpu_memory``)."""
    return bool(backend_of(task).gpu_memory)


def task_device(task: Any) -> int:
    """The device whose context the task stream belongs to."""
    return int(local_task(task, "the task's device")._native_stream().ordinal)


def views_of(task: Any) -> tuple[Any, ...]:
    """The views of the task's non-token dependencies, always as a tuple."""
    views = task.args_cai()
    if views is None:
        return ()
    return views if isinstance(views, tuple) else (views,)


def recorded_into_a_graph(view: Any) -> bool:
    """True for an emulated view of a task recorded into a graph (a graph scope, a
    loop, graph mode): its host access is refused, its memory is used when the graph
    runs."""
    return isinstance(view, ViewLifetime) and view._host_access_refused()


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` where Python has it (3.11+)."""
    add = getattr(error, "add_note", None)
    if add is not None:
        add(note)


class Elsewhere:
    """What a framework task scope yields on a rank where its distributed task does
    not execute: false, so ``if arrays:`` guards the body, and unpacking or using it
    raises :class:`~stflow.errors.RemoteTaskError`."""

    __slots__ = ("_scope", "_rank")

    def __init__(self, scope: str, rank: int) -> None:
        self._scope = scope
        self._rank = rank

    def _refuse(self) -> RemoteTaskError:
        return RemoteTaskError(
            f"{self._scope}: this task executes on rank {self._rank}, so on this rank "
            f"it yields no arrays; guard the body: 'with {self._scope}(ctx, ...) as "
            f"arrays:' then 'if arrays:' (false where the task does not execute)"
        )

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        raise self._refuse()

    def __len__(self) -> int:
        raise self._refuse()

    def __getitem__(self, index: Any) -> Any:
        raise self._refuse()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._refuse()

    def __repr__(self) -> str:
        return f"<{self._scope} of a task executing on rank {self._rank}: nothing here>"


class TaskScope:
    """A task started on entry and ended on exit, with a framework scope inside.

    Subclasses say what the framework scope is (:meth:`open_scope`, entering context
    managers into an ``ExitStack``) and what entering yields (:meth:`result`).

    Notes
    -----
    The task is created when the object is built and started on entry. If entering
    fails after the start, the framework scope is left, the task is ended and the
    original error raised. Exit leaves the framework scope, then ends the task; the
    body's exception wins over an error leaving the scope, which wins over an error
    of ``end()`` (the losers are attached as notes).
    """

    def __init__(self, ctx: Any, args: tuple, symbol: str | None) -> None:
        self.task = ctx.task(*args, symbol=symbol)
        self._scope: contextlib.ExitStack | None = None

    def open_scope(self, scope: contextlib.ExitStack) -> None:
        """Enter the framework's stream (and device) scope into ``scope``."""

    def result(self) -> Any:
        """What ``with`` yields."""
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.task.start()
        task = self.task
        if isinstance(task, dist_task) and not task.runs_here:
            return Elsewhere(type(self).__name__, task.rank)
        try:
            self._scope = contextlib.ExitStack()
            self.open_scope(self._scope)
            return self.result()
        except BaseException as exc:
            self._close(exc)
            raise

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._close(exc)

    def _close(self, error: BaseException | None) -> None:
        failures: list[tuple[str, BaseException]] = []
        scope, self._scope = self._scope, None
        if scope is not None:
            try:
                scope.close()
            except BaseException as exc:  # noqa: BLE001 - ranked below
                failures.append(("leaving the stream scope", exc))
        try:
            self.task.end()
        except BaseException as exc:  # noqa: BLE001 - ranked below
            failures.append(("ending the task", exc))
        if not failures:
            return
        if error is None:
            error = failures.pop(0)[1]
            for what, failure in failures:
                add_note(error, f"{what} also failed: {failure!r}")
            raise error
        for what, failure in failures:
            add_note(error, f"{what} also failed: {failure!r}")
