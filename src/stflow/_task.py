"""Tasks and host callbacks: acquire → body → release.

A :class:`task` collects dependencies and an execution place; ``start()`` acquires
(through :meth:`Runtime.prologue`), the body runs on the caller's thread with views
of the instances, and ``end()`` releases (:meth:`Runtime.epilogue`).
:func:`host_launch` does the same with a Python callable run in stream order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from ._errors import AccessModeError, ContextFinalizedError, PlaceError, ScopeError
from ._logical_data import dep
from ._places import AFFINE, exec_place
from ._runtime import Access, Runtime, work_ids
from ._views import CudaStream
from .backends._base import HOST, MANAGED, Allocation, Stream, callback_state

if TYPE_CHECKING:
    from ._context import context

__all__ = ["host_launch", "task"]

_NEW, _STARTED, _ENDED = 0, 1, 2


def _as_exec_place(value: Any) -> exec_place | None:
    if isinstance(value, exec_place):
        return value
    for name in ("_as_stf_exec_place", "_as_stflow_exec_place"):
        convert = getattr(value, name, None)
        if convert is not None:
            place = convert()
            if not isinstance(place, exec_place):
                raise TypeError(f"{type(value).__name__}.{name}() returned "
                                f"{type(place).__name__}, not an exec_place")
            return place
    return None


def _check_dep(runtime: Runtime, d: Any, what: str) -> dep:
    if not isinstance(d, dep):
        raise TypeError(f"{what}: expected a dependency such as ld.read(), ld.write() "
                        f"or ld.rw(), got {type(d).__name__}")
    if d.ld._runtime is not runtime:
        runtime.owns(d.ld, what)
    return d


def resolve_accesses(runtime: Runtime, deps: list[dep], exec_device: int,
                     affine_device: int, what: Any,
                     host_only: bool = False) -> tuple[list[Access], list[Access]]:
    """Group dependencies into accesses (one per data and place).

    Returns
    -------
    (accesses, per_dependency)
        The distinct accesses, and the access of each dependency in order (the same
        list when no data appears twice).
    """
    accesses: list[Access] = []
    for d in deps:
        ld = d.ld
        if ld._is_token:
            device = HOST
        elif host_only:
            device = _host_device(d, what)
        elif d.dplace is None:
            device = affine_device
        else:
            device = runtime.resolve_device(d.dplace, exec_device, affine_device, what)
        accesses.append(Access(ld, d.mode, device))
    if len(accesses) == 1 or len({a.ld._key for a in accesses}) == len(accesses):
        return accesses, accesses
    return _merge_repeated(accesses, what)


def _merge_repeated(accesses: list[Access], what: Any
                    ) -> tuple[list[Access], list[Access]]:
    """Merge accesses to the same data at the same place (modes combine); refuse a
    written data accessed at two places."""
    merged: list[Access] = []
    per_dependency: list[Access] = []
    by_key: dict[tuple[int, int], Access] = {}
    places: dict[int, Access] = {}
    for access in accesses:
        key = (access.ld._key, access.device)
        kept = by_key.get(key)
        if kept is None:
            kept = by_key[key] = access
            merged.append(access)
        else:
            kept.mode |= access.mode
        per_dependency.append(kept)
    for access in merged:
        other = places.setdefault(access.ld._key, access)
        if other is not access and (other.mode | access.mode) & 2:
            raise AccessModeError(
                f"{what} accesses logical data {access.ld._label()} at two places "
                "and writes it; use one place for data a task writes"
            )
    return merged, per_dependency


def _allocation(access: Access) -> Allocation:
    """The allocation of an acquired, non-token access."""
    return cast(Allocation, cast(Any, access.instance).allocation)


def _host_device(d: dep, what: Any) -> int:
    dplace = d.dplace
    if dplace is None or dplace._device in (AFFINE, HOST):
        return HOST
    if dplace._device == MANAGED:
        return MANAGED
    raise PlaceError(f"{what}: {dplace!r} is not host-accessible; a host callback sees "
                     "data in data_place.host(), .managed() or .affine()")


class task:
    """A unit of work with dependencies, built by ``ctx.task(*deps, symbol=...)``.

    ``with ctx.task(...) as t:`` starts it, runs the body and ends it, also when the
    body raises. Between ``start()`` and ``end()``, ``t.args_cai()`` gives views of the
    data and ``t.stream_ptr()`` the stream the body must enqueue its work on.

    Notes
    -----
    ``start()`` orders the task stream after every prerequisite (on the device, not
    the host; the emulated backend also blocks the host so that the body may touch
    the data directly). Work the body enqueues on the task stream is ordered after
    that; ``end()`` records completion so later tasks order after it.
    """

    __slots__ = ("_runtime", "_deps", "_place", "_symbol", "_phase", "_stream",
                 "_accesses", "_per_dependency", "_views", "_id", "_previous_device",
                 "__weakref__")
    _runtime: Runtime
    _deps: list[dep]
    _place: exec_place | None
    _symbol: str | None
    _phase: int
    _stream: Stream | None
    _accesses: list[Access]
    _per_dependency: list[Access]
    _views: dict[int, Any]
    _id: int
    _previous_device: int | None

    def __init__(self, ctx: context | None = None, *args: Any,
                 symbol: str | None = None) -> None:
        if ctx is None:
            raise TypeError("task cannot be built without a context; use "
                            "ctx.task(*deps, symbol=...)")
        from ._context import context as context_type
        if not isinstance(ctx, context_type):
            raise TypeError(f"task expects a context first, got {type(ctx).__name__}")
        self._setup(ctx._live(), args, symbol)

    def _setup(self, runtime: Runtime, args: tuple, symbol: str | None) -> None:
        self._runtime = runtime
        self._deps = []
        self._place = None
        self._phase = _NEW
        self._stream = None
        self._accesses = []
        self._per_dependency = []
        self._views = {}
        self._id = next(work_ids)
        self._previous_device = None
        self._symbol = None
        if symbol is not None:
            self.set_symbol(symbol)
        deps = self._deps
        for arg in args:
            if type(arg) is dep and arg.ld._runtime is runtime:
                deps.append(arg)
                continue
            if isinstance(arg, dep):
                deps.append(_check_dep(runtime, arg, self._what()))
                continue
            place = _as_exec_place(arg)
            if place is None:
                raise TypeError(f"{self._what()}: positional arguments must be "
                                "dependencies (ld.read(), ...) or one exec_place, got "
                                f"{type(arg).__name__}")
            if self._place is not None:
                raise ValueError(f"{self._what()}: two execution places given; pass "
                                 "one exec_place")
            self._place = place

    @classmethod
    def _make(cls, runtime: Runtime, args: tuple, symbol: str | None) -> task:
        self = object.__new__(cls)
        self._setup(runtime, args, symbol)
        return self

    def _label(self) -> str:
        return f"task {self._symbol!r}" if self._symbol else f"task #{self._id}"

    _what = _label

    def __str__(self) -> str:  # messages format the task itself: labels built on demand
        return self._label()

    def _finalized(self, what: str) -> ContextFinalizedError:
        return ContextFinalizedError(f"{self._label()}.{what}: the task's context is "
                                     "finalized; create tasks in a live context")

    # -- building ----------------------------------------------------------------
    def add_dep(self, d: dep) -> None:
        """Add a dependency (before ``start()``)."""
        if self._runtime.finalized:
            raise self._finalized("add_dep()")
        if self._phase != _NEW:
            raise ScopeError(f"{self._label()}: add_dep() after start(); add "
                             "dependencies before starting the task")
        self._deps.append(_check_dep(self._runtime, d, f"{self._label()}.add_dep()"))

    def set_symbol(self, name: str) -> None:
        """Name the task in messages, DOT output and traces."""
        if not isinstance(name, str):
            raise TypeError(f"symbol must be a str, got {type(name).__name__}")
        if self._runtime.finalized:
            raise self._finalized("set_symbol()")
        self._symbol = name

    def set_exec_place(self, place: exec_place) -> None:
        """Set the execution place (before ``start()``)."""
        if self._runtime.finalized:
            raise self._finalized("set_exec_place()")
        if self._phase != _NEW:
            raise ScopeError(f"{self._label()}: set_exec_place() after start()")
        converted = _as_exec_place(place)
        if converted is None:
            raise TypeError(f"set_exec_place expects an exec_place, got "
                            f"{type(place).__name__}")
        self._place = converted

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Acquire the dependencies; afterwards the body may run."""
        if self._phase != _NEW:
            raise ScopeError(f"{self._label()}: start() called twice")
        runtime = self._runtime
        backend = runtime.backend
        label = self                  # formatted (str(self)) only when a message needs it
        with runtime.lock:
            if runtime.finalized or runtime.closing or callback_state.active:
                runtime.check_submit(f"{label}.start()")
            if runtime.retired:
                runtime.drain_retired()
            place = self._place
            current = None
            if place is None:
                exec_device = affine_device = current = backend.current_device()
            else:
                exec_device = place._device
                if exec_device >= 0 and exec_device >= backend.device_count:
                    runtime.check_device(exec_device, label)
                affine = place._affine
                affine_device = exec_device if affine is None else affine._device
            self._accesses, self._per_dependency = resolve_accesses(
                runtime, self._deps, exec_device, affine_device, label)
            stream, prerequisites, enqueued = runtime.prologue(
                self._accesses, exec_device, self, label, self._id)
            runtime.counters.tasks += 1
            self._stream = stream
            if backend.records:           # graph mode: the body is captured
                try:
                    backend.begin_body(stream)
                except BaseException:
                    self._phase = _ENDED
                    runtime.epilogue(self._accesses, stream, self, self._id)
                    raise
            self._phase = _STARTED
            if current is None and exec_device >= 0 and backend.device_count > 1:
                # The body's libraries (CuPy, PyTorch) launch on the current device.
                previous = backend.current_device()
                if previous != exec_device:
                    backend.set_current_device(exec_device)
                    self._previous_device = previous
            ready = None
            if backend.bodies_wait_on_host and (
                    enqueued or not all(backend.query(e) for e in prerequisites)):
                ready = backend.record(stream)
        if ready is not None:
            backend.synchronize(ready)

    def end(self) -> None:
        """Release the dependencies; later tasks order after this one."""
        if self._phase != _STARTED:
            if self._runtime.finalized:
                raise self._finalized("end()")
            if self._phase == _ENDED:
                raise ScopeError(f"{self._label()}: end() called twice; a task in a "
                                 "'with' block is ended by the block, do not call end() "
                                 "in it")
            raise ScopeError(f"{self._label()}: end() without a matching start()")
        runtime = self._runtime
        if self._previous_device is not None:
            runtime.backend.set_current_device(self._previous_device)
            self._previous_device = None
        with runtime.lock:
            self._phase = _ENDED
            runtime.epilogue(self._accesses, self._stream, self,  # type: ignore[arg-type]
                             self._id)
        if self._views:
            for view in self._views.values():
                invalidate = getattr(view, "_invalidate", None)
                if invalidate is not None:
                    invalidate(f"a view of {self._label()} was used after the task "
                               "ended; use views only between start() and end()")
            self._views.clear()

    def __enter__(self) -> task:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()

    # -- inside the body ---------------------------------------------------------
    def _check_window(self, what: str) -> None:
        if self._phase != _STARTED:
            if self._runtime.finalized:
                raise self._finalized(what)
            raise ScopeError(f"{self._label()}.{what} is only valid between start() "
                             "and end()")

    def _native_stream(self) -> Stream:
        if self._stream is None:
            raise ScopeError(f"{self._label()} has no stream before start()")
        return self._stream

    def stream_ptr(self) -> CudaStream:
        """The stream the body must enqueue its work on."""
        if self._runtime.finalized:
            raise self._finalized("stream_ptr()")
        if self._stream is None:
            raise ScopeError(f"{self._label()}.stream_ptr() before start()")
        return CudaStream(self._stream.handle)

    def get_grid_dims(self) -> tuple[int, ...] | None:
        """``None``: a scalar execution place has no grid."""
        self._check_window("get_grid_dims()")
        return None

    def get_stream_at_index(self, i: int) -> int:
        raise ScopeError(f"{self._label()} does not run on a grid of places; use "
                         "stream_ptr()")

    def get_stream_ptrs(self) -> list[int]:
        """``[stream_ptr()]`` for a scalar execution place."""
        return [self.stream_ptr()]

    def _access_at(self, index: int, what: str) -> Access:
        self._check_window(what)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{what}: index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self._deps):
            raise IndexError(f"{what}: dependency index {index} out of range "
                             f"(the task has {len(self._deps)} dependencies)")
        access = self._per_dependency[index]
        if access.ld._is_token:
            raise TypeError(f"{what}: dependency {index} is a token, which has no "
                            "memory")
        return access

    def get_arg(self, index: int) -> int:
        """The address of dependency ``index``'s instance."""
        return _allocation(self._access_at(index, "get_arg()")).ptr

    def get_arg_cai(self, index: int) -> Any:
        """A view of dependency ``index`` (CUDA Array Interface on CUDA)."""
        view = self._views.get(index)
        if view is None:
            access = self._access_at(index, "get_arg_cai()")
            ld = access.ld
            view = self._views[index] = self._runtime.backend.task_view(
                _allocation(access), 0, cast(tuple, ld._shape), cast(np.dtype, ld._dtype),
                self._deps[index].mode == 1)
        elif self._phase != _STARTED:
            self._check_window("get_arg_cai()")
        return view

    def args_cai(self) -> Any:
        """Views of the non-token dependencies: ``None``, one view, or a tuple."""
        self._check_window("args_cai()")
        views = tuple(self.get_arg_cai(i) for i, d in enumerate(self._deps)
                      if not d.ld._is_token)
        if not views:
            return None
        return views[0] if len(views) == 1 else views

    def __repr__(self) -> str:
        phase = ("new", "started", "ended")[self._phase]
        return f"<stflow.task {self._symbol!r} {phase}, {len(self._deps)} deps>"


def host_launch(runtime: Runtime, deps: tuple, fn: Callable[..., Any] | None,
                args: Any, symbol: str | None) -> None:
    """Run ``fn(*arrays, *args)`` on a host thread once ``deps`` are satisfied."""
    label = f"host_launch {symbol!r}" if symbol else "host_launch"
    if fn is None:
        raise TypeError(f"{label}: fn is required (host_launch(*deps, fn=callable))")
    if not callable(fn):
        raise TypeError(f"{label}: fn must be callable, got {type(fn).__name__}")
    if symbol is not None and not isinstance(symbol, str):
        raise TypeError(f"symbol must be a str, got {type(symbol).__name__}")
    checked = [_check_dep(runtime, d, label) for d in deps]
    if args is not None and not hasattr(args, "__iter__"):
        raise TypeError(f"{label}: args must be an iterable of extra arguments (a "
                        f"tuple such as (value,)), got {type(args).__name__}")
    extra = () if args is None else tuple(args)
    backend = runtime.backend
    with runtime.lock:
        runtime.check_submit(label)
        if runtime.retired:
            runtime.drain_retired()
        accesses, per_dependency = resolve_accesses(runtime, checked, HOST, HOST, label,
                                                    host_only=True)
        ident = next(work_ids)
        stream, _, _ = runtime.prologue(accesses, HOST, None, label, ident, "host_launch")
        runtime.counters.host_callbacks += 1
        arguments = [(_allocation(access), cast(tuple, access.ld._shape),
                      cast(np.dtype, access.ld._dtype), d.mode == 1)
                     for d, access in zip(checked, per_dependency)
                     if not access.ld._is_token]

        def callback() -> None:
            try:
                arrays = [backend.host_array(allocation, shape, dtype, readonly)
                          for allocation, shape, dtype, readonly in arguments]
                fn(*arrays, *extra)
            except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
                if hasattr(exc, "add_note"):
                    exc.add_note(f"raised by {label}")
                runtime.capture(exc, ident)

        backend.launch_host_func(stream, callback)
        runtime.epilogue(accesses, stream, None, ident)
