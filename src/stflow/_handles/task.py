"""Tasks: acquire → body → release.

A :class:`task` collects dependencies and an execution place; ``start()`` asks the
runtime for the plan of its dependency pattern and acquires it
(:meth:`Runtime.acquire`), the body runs on the caller's thread with views of the
instances, and ``end()`` releases (:meth:`Runtime.release`). ``_handles.callbacks``
does the same for a Python callable run in stream order (``host_launch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import numpy as np

from .._compile import mypyc_attr
from .._core.access import READ
from .._core.coherence import DataState, Instance
from .._core.errors import (
    ContextFinalizedError,
    GridIndexError,
    NegativeIndexError,
    ScopeError,
    TokenArgumentError,
    work_ids,
)
from .._core.plan import Access, Plan
from .._engine.runtime import Runtime, RuntimeOwner
from .._interchange.views import CudaStream, ViewTuple
from .._places.gridwork import fork, join
from .._places.places import exec_place, exec_place_grid
from ..backends._base import Allocation, Event, Stream, callback_state
from .bodies import open_bodies, run_body
from .bundles import Slot, append_argument, bundle_dep, expand_arguments
from .logical_data import dep

__all__ = ["body_label", "new_task", "task"]

# A task's phase (Final: the compiled build inlines them).
_NEW: Final = 0
_STARTED: Final = 1
_ENDED: Final = 2


def _open_bodies() -> list[Any]:
    """The tasks whose bodies this thread has started and not ended, innermost last
    (kept on backends with host bodies, ``Runtime.host_bodies``: the emulated one,
    whose ``stflow.emulated.launch`` names them; a per-thread list costs every task)."""
    return open_bodies.tasks


def body_label(handle: int) -> str | None:
    """The label ("task 'axpy'", "cuda_kernel #7") of the innermost task body open
    on this thread whose stream has the raw ``handle`` (``t.stream_ptr()``), or
    ``None``: what work enqueued on an emulated task stream from its body
    (``stflow.emulated.launch``) names when it fails later."""
    bodies = _open_bodies()
    for position in range(len(bodies) - 1, -1, -1):
        opened: task = bodies[position]
        stream = opened._stream
        if (
            opened._phase == _STARTED
            and stream is not None
            and int(stream.handle) == handle
        ):
            return opened._label()
    return None


def new_task(runtime: Runtime, args: tuple, symbol: Any) -> task:
    """``ctx.task(*args, symbol=...)`` of a context whose runtime is ``runtime``:
    refused from a host callback and on a finalized or closing context."""
    if runtime.finalized or runtime.closing or callback_state.active:
        runtime.check_submit("task()")
    made = task.__new__(task)
    made._setup(runtime, args, symbol)
    return made


def _as_exec_place(value: Any) -> exec_place | None:
    if isinstance(value, exec_place):
        return value
    for name in ("_as_stf_exec_place", "_as_stflow_exec_place"):
        convert = getattr(value, name, None)
        if convert is not None:
            place = convert()
            if not isinstance(place, exec_place):
                raise TypeError(
                    f"{type(value).__name__}.{name}() returned "
                    f"{type(place).__name__}, not an exec_place"
                )
            return place
    return None


def check_dep(runtime: Runtime, d: Any, what: str) -> dep:
    """``d`` when it is a dependency on data of ``runtime``."""
    if not isinstance(d, dep):
        raise TypeError(
            f"{what}: expected a dependency such as ld.read(), ld.write() "
            f"or ld.rw(), got {type(d).__name__}"
        )
    if d.ld._runtime is not runtime:
        runtime.owns(d.ld, what)
    return d


def _allocation(access: Any) -> Allocation:
    """The allocation of an acquired, non-token access."""
    instance = access.instance
    assert instance is not None and instance.allocation is not None
    return instance.allocation


class _Reduced:
    """A reduction access as a task body sees it: its private instance."""

    __slots__ = ("access", "instance")

    def __init__(self, access: Access, instance: Instance) -> None:
        self.access = access
        self.instance = instance


@mypyc_attr(allow_interpreted_subclasses=True)
class task:
    """A unit of work with dependencies, built by ``ctx.task(*deps, symbol=...)``.

    ``with ctx.task(...) as t:`` starts it, runs the body and ends it, also when the
    body raises. Between ``start()`` and ``end()``, ``t.views()`` gives a tuple of views
    of the data (``t.args_cai()`` too, as the reference: the bare view for one
    dependency) and ``t.stream_ptr()`` the stream the body must enqueue its work on.

    Notes
    -----
    ``start()`` orders the task stream after every prerequisite (on the device, not
    the host; the emulated backend also blocks the host so that the body may touch
    the data directly). Work the body enqueues on the task stream is ordered after
    that; ``end()`` records completion so later tasks order after it.
    """

    __slots__ = (
        "_runtime",
        "_deps",
        "_place",
        "_symbol",
        "_phase",
        "_stream",
        "_plan",
        "_views",
        "_id",
        "_previous_device",
        "_private",
        "_members",
        "_read_guard",
        "_unsettled",
        "_layout",
    )
    _runtime: Runtime
    _deps: tuple[dep, ...]
    _place: exec_place | None
    _symbol: str | None
    _phase: int
    _stream: Stream | None
    _plan: Plan | None
    _views: dict[int, Any] | None
    _id: int
    _previous_device: int | None
    _private: list[Instance] | None
    _members: list[Stream] | None
    _read_guard: Any  # emulated: fingerprints of read() data
    _unsettled: Event | None  # emulated: prerequisites the host has not waited for
    _layout: list[Any] | None  # with bundles: per argument, a dep index or Slot

    # Arguments users pass are typed Any: they are checked here, with messages that
    # name the fix (a compiled build would otherwise refuse them with its own).
    def __init__(self, ctx: Any = None, *args: Any, symbol: Any = None) -> None:
        if ctx is None:
            raise TypeError(
                "task cannot be built without a context; use ctx.task(*deps, symbol=...)"
            )
        if not isinstance(ctx, RuntimeOwner):
            raise TypeError(f"task expects a context first, got {type(ctx).__name__}")
        self._setup(ctx._live(), args, symbol)

    @classmethod
    def _make(cls, runtime: Runtime, args: tuple, symbol: Any) -> task:
        made = cls.__new__(cls)
        made._setup(runtime, args, symbol)
        return made

    def _setup(self, runtime: Runtime, args: tuple, symbol: Any) -> None:
        self._runtime = runtime
        self._place = None
        self._phase = _NEW
        self._stream = None
        self._plan = None
        self._views = None
        self._id = next(work_ids)
        self._previous_device = None
        self._private = None
        self._members = None
        self._read_guard = None
        self._unsettled = None
        self._layout = None
        self._symbol = None
        if symbol is not None:
            self.set_symbol(symbol)
        for arg in args:
            if type(arg) is not dep or arg.ld._runtime is not runtime:
                self._deps = self._sort_arguments(args)
                return
        self._deps = args

    def _sort_arguments(self, args: tuple) -> tuple[dep, ...]:
        """The dependencies among ``args``; the execution place is kept aside."""
        for arg in args:
            if isinstance(arg, bundle_dep):
                return self._expand_bundles(args)
        deps = []
        for arg in args:
            if isinstance(arg, dep):
                deps.append(check_dep(self._runtime, arg, self._label()))
                continue
            place = _as_exec_place(arg)
            if place is None:
                raise TypeError(
                    f"{self._label()}: positional arguments must be "
                    "dependencies (ld.read(), ...) or one exec_place, got "
                    f"{type(arg).__name__}"
                )
            if self._place is not None:
                raise ValueError(
                    f"{self._label()}: two execution places given; pass one exec_place"
                )
            self._place = place
        return tuple(deps)

    def _expand_bundles(self, args: tuple) -> tuple[dep, ...]:
        """The dependencies of ``args`` with each bundle expanded into its fields'
        (``bundles.expand_arguments``); the layout maps the arguments back."""
        deps, layout, others = expand_arguments(
            args, self._runtime, check_dep, self._label()
        )
        if others:
            self._sort_arguments(tuple(others))  # the execution place
        self._layout = layout
        return tuple(deps)

    def _label(self) -> str:
        return f"task {self._symbol!r}" if self._symbol else f"task #{self._id}"

    # -- what eviction leaves alone while the task is started (_eviction.HeldWork) --
    def held_plan(self) -> Plan | None:
        return self._plan

    def held_states(self) -> tuple[DataState, ...]:
        return ()

    def held_private(self) -> list[Instance]:
        private = self._private
        return [] if private is None else private

    def __str__(self) -> str:  # messages format the task itself: labels built on demand
        return self._label()

    def _finalized(self, what: str) -> ContextFinalizedError:
        return ContextFinalizedError(
            f"{self._label()}.{what}: the task's context is "
            "finalized; create tasks in a live context"
        )

    def _holds(self, state: Any) -> bool:
        """True when this started task accesses ``state`` (conflict messages)."""
        plan = self._plan
        return plan is not None and any(a.state is state for a in plan.accesses)

    # -- building ----------------------------------------------------------------
    def add_dep(self, d: Any) -> None:
        """Add a dependency (before ``start()``)."""
        if self._runtime.finalized:
            raise self._finalized("add_dep()")
        if self._phase != _NEW:
            raise ScopeError(
                f"{self._label()}: add_dep() after start(); add "
                "dependencies before starting the task"
            )
        if isinstance(d, bundle_dep) or self._layout is not None:
            self._add_argument(d)
            return
        self._deps = (
            *self._deps,
            check_dep(self._runtime, d, f"{self._label()}.add_dep()"),
        )

    def _add_argument(self, d: Any) -> None:
        """``add_dep`` of a task with bundles (or of a bundle): the layout grows."""
        layout: list[Any] = (
            list(range(len(self._deps))) if self._layout is None else self._layout
        )
        deps: list[Any] = list(self._deps)
        append_argument(
            deps, layout, d, self._runtime, check_dep, f"{self._label()}.add_dep()"
        )
        self._layout = layout
        self._deps = tuple(deps)

    def set_symbol(self, name: Any) -> None:
        """Name the task in messages, DOT output and traces."""
        if not isinstance(name, str):
            raise TypeError(f"symbol must be a str, got {type(name).__name__}")
        if self._runtime.finalized:
            raise self._finalized("set_symbol()")
        self._symbol = name

    def set_exec_place(self, exec_p: Any) -> None:
        """Set the execution place (before ``start()``)."""
        if self._runtime.finalized:
            raise self._finalized("set_exec_place()")
        if self._phase != _NEW:
            raise ScopeError(f"{self._label()}: set_exec_place() after start()")
        converted = _as_exec_place(exec_p)
        if converted is None:
            raise TypeError(
                f"set_exec_place expects an exec_place, got {type(exec_p).__name__}"
            )
        self._place = converted

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Acquire the dependencies; afterwards the body may run."""
        self.__enter__()

    def __enter__(self) -> task:
        if self._phase != _NEW:
            raise ScopeError(f"{self._label()}: start() called twice")
        runtime = self._runtime
        backend = runtime.backend
        ready = None
        deferred = False
        lock = runtime.lock
        lock.acquire()
        try:
            if runtime.closing or runtime.finalized or callback_state.active:
                runtime.check_submit(f"{self}.start()")
            if runtime.data.retired:
                runtime.drain_retired()
            plan = runtime.acquire(self._deps, self._place, self, self, self._id)
            stream = plan.stream
            self._plan = plan
            self._stream = stream
            if plan.reductions:
                self._private = plan.private
            place = self._place
            if place is not None and isinstance(place, exec_place_grid):
                # Graph mode captures the body from one stream: the members share it.
                self._members = (
                    [stream] * place.size
                    if runtime.mode.graph
                    else fork(backend, runtime.current_pools(), place, stream)
                )
            mode = runtime.mode
            if mode.graph:
                try:
                    mode.body_started(stream)  # capture the body
                except BaseException:
                    self._phase = _ENDED
                    runtime.release(plan, stream, self, self._id, self._private)
                    raise
            self._phase = _STARTED
            if runtime.host_bodies:  # what stflow.emulated.launch names (body_label)
                bodies = _open_bodies()
                if bodies and bodies[-1]._phase != _STARTED:
                    bodies[:] = [t for t in bodies if t._phase == _STARTED]
                bodies.append(self)
            device = plan.device
            if self._place is not None and device >= 0 and runtime.device_count > 1:
                # The body's libraries (CuPy, PyTorch) launch on the current device.
                previous = backend.current_device()
                if previous != device:
                    backend.set_current_device(device)
                    self._previous_device = previous
            if runtime.host_bodies:  # emulated: bodies may touch data from the host
                if backend.guards_reads:  # stream mode: read() data unchanged?
                    # Armed when the body reaches the data (_settle, stream_ptr, run).
                    self._read_guard = backend.guard_reads(plan)
                if backend.bodies_wait_on_host and not _settled(plan, backend.query):
                    # Behind work still queued on the task stream (an earlier body),
                    # the host waits only when this body touches the data from the
                    # host (_settle): a body enqueued in stream order (t.run, launched
                    # work) does not wait. Behind markers alone, waiting now costs
                    # less.
                    deferred = backend.pending_calls(stream)
                    ready = backend.record(stream)
        finally:
            lock.release()
        if deferred:
            self._unsettled = ready
        elif ready is not None:
            backend.synchronize(ready)
        return self

    def _settle(self) -> None:
        """Wait for the prerequisites before the host touches the task's data (the
        backends where bodies wait on the host: the emulated one)."""
        ready = self._unsettled
        if ready is not None:
            self._unsettled = None
            self._runtime.backend.synchronize(ready)
        guard = self._read_guard
        if guard is not None:
            guard.arm()  # fingerprints of the read() data, before the host touches it

    def end(self) -> None:
        """Release the dependencies; later tasks order after this one."""
        self.__exit__(None, None, None)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if self._phase != _STARTED:
            if self._runtime.finalized:
                raise self._finalized("end()")
            if self._phase == _ENDED:
                raise ScopeError(
                    f"{self._label()}: end() called twice; a task in a "
                    "'with' block is ended by the block, do not call end() "
                    "in it"
                )
            raise ScopeError(f"{self._label()}: end() without a matching start()")
        runtime = self._runtime
        if runtime.host_bodies:
            bodies = _open_bodies()
            for position in range(len(bodies) - 1, -1, -1):
                if bodies[position] is self:
                    del bodies[position]
                    break
        if self._previous_device is not None:
            runtime.backend.set_current_device(self._previous_device)
            self._previous_device = None
        plan = self._plan
        stream = self._stream
        assert plan is not None and stream is not None  # started
        guard = self._read_guard
        violation = None if guard is None else guard.check(stream, self)
        self._read_guard = None
        self._unsettled = None
        lock = runtime.lock
        lock.acquire()
        try:
            self._phase = _ENDED
            if self._members is not None:
                join(runtime.backend, self._members)
                self._members = None
            runtime.release(plan, stream, self, self._id, self._private)
        finally:
            lock.release()
        views = self._views
        if views:
            for view in views.values():  # Backend.task_view: ViewLifetime
                view._invalidate(
                    f"a view of {self._label()} was used after the task "
                    "ended; use views only between start() and end()"
                )
            views.clear()
        if violation is not None:
            raise violation  # the task is ended: the context stays usable

    # -- inside the body ---------------------------------------------------------
    def _check_window(self, what: str) -> None:
        if self._phase != _STARTED:
            if self._runtime.finalized:
                raise self._finalized(what)
            raise ScopeError(
                f"{self._label()}.{what} is only valid between start() and end()"
            )

    def _native_stream(self) -> Stream:
        if self._stream is None:
            raise ScopeError(f"{self._label()} has no stream before start()")
        return self._stream

    def stream_ptr(self) -> CudaStream:
        """The stream the body must enqueue its work on."""
        stream = self._stream
        if stream is None or self._runtime.finalized:
            if self._runtime.finalized:
                raise self._finalized("stream_ptr()")
            raise ScopeError(f"{self._label()}.stream_ptr() before start()")
        guard = self._read_guard
        if guard is not None:
            guard.arm(stream)  # before the work the body enqueues, in stream order
        return stream.handle

    def get_grid_dims(self) -> tuple[int, ...] | None:
        """The C-order dims of the task's grid; ``None`` on a single place."""
        self._check_window("get_grid_dims()")
        place = self._place
        if place is not None and isinstance(place, exec_place_grid):
            return place.dims
        return None

    def get_stream_at_index(self, place_index: Any) -> int:
        """The stream (raw handle) on which the body enqueues the work of grid
        member ``place_index`` (C-order linear index)."""
        self._check_window("get_stream_at_index()")
        members = self._members
        if members is None:
            raise ScopeError(
                f"{self._label()} does not run on a grid of places; use stream_ptr()"
            )
        if isinstance(place_index, bool) or not isinstance(place_index, int):
            raise TypeError(
                f"get_stream_at_index expects an int, got {type(place_index).__name__}"
            )
        if not 0 <= place_index < len(members):
            error = NegativeIndexError if place_index < 0 else GridIndexError
            raise error(
                f"get_stream_at_index({place_index}): place_index out of range "
                f"(negative or not below the grid's {len(members)} places)"
            )
        self._settle()  # the read guard, before the members' work
        return int(members[place_index].handle.ptr)

    def get_stream_ptrs(self) -> list[int]:
        """One stream per grid member (raw handles); ``[stream_ptr()]`` on a single
        place."""
        members = self._members
        if members is not None:
            self._check_window("get_stream_ptrs()")
            self._settle()  # the read guard, before the members' work
            return [int(stream.handle.ptr) for stream in members]
        return [self.stream_ptr()]

    def _access_at(self, index: Any, what: str) -> Any:
        self._check_window(what)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{what}: index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self._deps):
            raise IndexError(
                f"{what}: dependency index {index} out of range "
                f"(the task has {len(self._deps)} dependencies)"
            )
        plan = self._plan
        assert plan is not None
        access = plan.per_dependency[index]
        if access.instance is None:
            if self._private is not None:
                for reduction, instance in zip(plan.reductions, self._private):
                    if reduction is access:
                        return _Reduced(access, instance)
            raise TokenArgumentError(
                f"{what}: cannot materialize a token argument: "
                f"dependency {index} is a token, which has no "
                "memory"
            )
        return access

    def get_arg(self, index: Any) -> Any:
        """The address of dependency ``index``'s instance (for a bundle argument,
        a named tuple of its fields' addresses, ``None`` where a field has none)."""
        if self._layout is not None:
            return self._slot(index, "get_arg()", self._dep_arg)
        return self._dep_arg(index)

    def _dep_arg(self, index: Any) -> int:
        access = self._access_at(index, "get_arg()")
        self._settle()  # the host may touch the memory at the address
        return _allocation(access).ptr

    def _body_instances(
        self, indices: tuple[int, ...]
    ) -> tuple[Stream, list[tuple[Any, Any, Any, bool]]]:
        """The task stream, and ``(allocation, shape, dtype, read only)`` of the
        dependencies ``indices`` (default: every non-token one) of a task without
        bundles: what a ``run`` body gets an array of, without making a view of each
        (nor waiting on the host: the body is enqueued in stream order)."""
        stream = self._stream
        if stream is None or self._phase != _STARTED or self._runtime.finalized:
            self.stream_ptr()  # raises what is wrong
            self._check_window("run()")
        assert stream is not None
        deps = self._deps
        plan = self._plan
        assert plan is not None
        # Chosen indices are checked; a reduction's argument is its private instance.
        checked = bool(indices) or self._private is not None
        chosen = indices or [i for i in range(len(deps)) if not deps[i].ld._is_token]
        out = []
        for index in chosen:
            if checked:
                access = self._access_at(index, "run()")
            else:
                access = plan.per_dependency[index]
            d = deps[index]
            out.append((_allocation(access), d.ld._shape, d.ld._dtype, d.mode == READ))
        return stream, out

    def get_arg_cai(self, index: Any) -> Any:
        """A view of argument ``index`` (CUDA Array Interface on CUDA); for a bundle,
        the named tuple of its fields' views (``None`` for fields left out and
        tokens)."""
        if self._layout is not None:
            return self._slot(index, "get_arg_cai()", self._dep_view)
        return self._dep_view(index)

    def get(self, index: Any) -> Any:
        """Argument ``index``: a dependency's view, or a bundle's named tuple of
        views (``get_arg_cai``, as CUDASTF's bundles spell it)."""
        return self.get_arg_cai(index)

    def _slot(self, index: Any, what: str, one: Callable[[int], Any]) -> Any:
        """``one(dep index)`` of argument ``index``; the bundle's named tuple of them
        for a bundle (``None`` for its fields left out and its tokens)."""
        layout = self._layout
        assert layout is not None
        self._check_window(what)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{what}: index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(layout):
            raise IndexError(
                f"{what}: argument index {index} out of range (the task "
                f"has {len(layout)} arguments; a bundle is one)"
            )
        entry = layout[index]
        if not isinstance(entry, Slot):
            return one(entry)
        values = []
        for k in range(len(entry.dep.deps)):
            position = entry.start + k
            values.append(None if self._deps[position].ld._is_token else one(position))
        return entry.dep.regroup(values)

    def _dep_view(self, index: Any) -> Any:
        views = self._views
        view = None if views is None else views.get(index)
        if view is None:
            view = self._view(self._access_at(index, "get_arg_cai()"), index)
            if views is None:
                views = self._views = {}
            views[index] = view
        elif self._phase != _STARTED:
            self._check_window("get_arg_cai()")
        return view

    def get_member_arg_cai(self, index: Any, place_index: Any) -> Any:
        """A view of dependency ``index`` as grid member ``place_index`` should use
        it: its own copy for data at a replicated place, else the view of
        :meth:`get_arg_cai` (stflow only).

        Raises
        ------
        IndexError
            ``place_index`` is not a member of the task's grid (a task on a single
            place has only member 0).
        """
        if self._layout is not None:
            return self._slot(
                index, "get_member_arg_cai()", lambda i: self._member_view(i, place_index)
            )
        return self._member_view(index, place_index)

    def _member_view(self, index: Any, place_index: Any) -> Any:
        access = self._access_at(index, "get_member_arg_cai()")
        place = self._place
        members = place._members() if place is not None else ()
        if isinstance(place_index, bool) or not isinstance(place_index, int):
            raise TypeError(
                f"get_member_arg_cai: place_index must be an int, got "
                f"{type(place_index).__name__}"
            )
        if not 0 <= place_index < max(len(members), 1):
            raise IndexError(
                f"get_member_arg_cai: place index {place_index} out of "
                f"range for {max(len(members), 1)} place(s)"
            )
        if place_index == 0 or not isinstance(access, Access):
            return self._dep_view(index)
        member = members[place_index]
        device = member._device if member._affine is None else member._affine._device
        plan = self._plan
        assert plan is not None
        for other in plan.accesses:
            if other.state is access.state and other.device == device:
                access = other
                break
        if access is plan.per_dependency[index]:
            return self._dep_view(index)
        return self._view(access, index)

    def _view(self, access: Any, index: int) -> Any:
        """A backend view of ``access``'s instance as dependency ``index``."""
        self._settle()  # the host may touch the data through the view
        ld = self._deps[index].ld
        return self._runtime.backend.task_view(
            _allocation(access),
            0,
            cast(tuple, ld._shape),
            cast(np.dtype, ld._dtype),
            self._deps[index].mode == READ,
        )

    def args_cai(self) -> Any:
        """Views of the non-token dependencies: ``None``, one view, or a tuple.

        The result's shape depends on the number of dependencies (as in the
        reference): for a task with one dependency it is the bare view, so
        ``x, = t.args_cai()`` or ``f(*t.args_cai())`` fail there. Prefer
        :meth:`views`, which always returns a tuple.
        """
        views = self._dependency_views("args_cai()")
        if not views:
            return None
        return views[0] if len(views) == 1 else views

    def run(self, fn: Callable[..., Any], *indices: int) -> None:
        """Run ``fn(xp, *arrays)`` in the task's stream order: ``xp`` is NumPy on the
        emulated backend and CuPy on CUDA, ``arrays`` the views of the dependencies
        ``indices`` (default: every non-token dependency) as arrays of ``xp``
        (stflow-only; see ``stflow._handles.bodies``).

        Notes
        -----
        On CUDA ``fn`` runs at once with the task stream as CuPy's current stream; on
        the emulated backend it is enqueued on the task stream. Either way it must
        only enqueue work on its arrays, not read results back to the host.
        """
        run_body(self, fn, indices)

    def views(self) -> tuple[Any, ...]:
        """Views of the non-token dependencies, always a tuple in dependency order.

        ``(x,) = t.views()`` for one dependency, ``x, y = t.views()`` for two,
        ``()`` for a task of tokens only; a bundle argument is one entry, the named
        tuple of its fields' views (``None`` for fields left out and tokens), so the
        entries line up with the arguments passed (stflow-only; ``args_cai()`` returns the
        bare view for one dependency and ``None`` for none, as in the reference).

        Returns
        -------
        tuple
            One view per non-token dependency: ``stf_cai`` (CUDA Array Interface)
            on CUDA, NumPy-convertible host views on the emulated backend. The
            tuple (a :class:`~stflow._interchange.views.ViewTuple`) refuses to be converted to
            an array as a whole (``numpy.asarray(t.views())`` raises ``TypeError``:
            it would be a stacked copy whose writes are lost); index it.

        Raises
        ------
        ScopeError
            Outside ``start()`` ... ``end()``.

        Notes
        -----
        The views are valid until ``end()``; their work is ordered on the task
        stream, so they advertise no stream of their own.
        """
        return self._dependency_views("views()")

    def _dependency_views(self, what: str) -> tuple[Any, ...]:
        self._check_window(what)
        layout = self._layout
        if layout is not None:  # one entry per argument; a bundle is one
            return ViewTuple(
                [
                    self._slot(i, what, self._dep_view)
                    for i in range(len(layout))
                    if isinstance(layout[i], Slot)
                    or not self._deps[layout[i]].ld._is_token
                ]
            )
        return ViewTuple(
            [self._dep_view(i) for i, d in enumerate(self._deps) if not d.ld._is_token]
        )

    def __repr__(self) -> str:
        phase = ("new", "started", "ended")[self._phase]
        return f"<stflow.task {self._symbol!r} {phase}, {len(self._deps)} deps>"

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a task cannot be pickled: it belongs to one context of one "
            f"process ({self._label()})"
        )


def _settled(plan: Plan, completed: Callable[[Any], bool]) -> bool:
    """True when nothing was enqueued for ``plan``'s acquisition and every
    prerequisite has completed (a body may then touch the data at once)."""
    if plan.waits or plan.moves is not None or plan.reductions:
        return False
    if plan.first is not None and not completed(plan.first):
        return False
    return not plan.others or all(map(completed, plan.others))
