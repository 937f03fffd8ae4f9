"""The public ``context``: creates data, submits tasks, synchronises, finalizes.

A context is a thin handle on a :class:`~stflow._engine.runtime.Runtime`. Logical data and
tasks refer to the runtime, not to the context object, so the context object's
collection is what ends an unfinalized context, even while its data objects are still
referenced somewhere.

Ending without ``finalize()``
    A context collected, or still alive at interpreter exit, without ``finalize()`` is
    *abandoned*, never finalized: results are not written into the user's arrays at
    that unpredictable moment (as in the reference). :func:`abandon` waits for the
    work already submitted, then frees every allocation, stream and event, and
    discards what was recorded but not launched. It warns with a ``ResourceWarning``
    and, when user buffers lose results that a ``finalize()`` would have written, an
    :class:`~stflow.errors.UnfinalizedContextWarning` (a ``UserWarning``, shown by
    default). Errors nobody can raise any more become ``RuntimeWarning``s.

Deferred errors
    ``wait()``, ``finalize()`` and ``check_errors()`` raise the oldest captured
    asynchronous error, one per call; ``fence()`` never raises them;
    ``pending_errors()`` lists them without clearing (``_errors.ErrorLog``).
"""

from __future__ import annotations

import atexit
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .._core.config import warn_ignored_reference_variables
from .._core.deps import merge_events
from .._core.errors import BackendUnavailableError, UnfinalizedContextWarning, warn_user
from .._engine.mode import Mode
from .._engine.registry import check_empty_args, check_name
from .._engine.runtime import Runtime, RuntimeOwner
from .._instruments.seam import Instrument, Statistics
from .._interchange.sources import check_dtype
from .._interchange.views import stream_handle
from .._places.places import exec_place
from ..backends import get_backend
from ..backends._base import Backend, Stream, callback_state
from .bundles import View as _View
from .bundles import bundle as _Bundle
from .bundles import live_check, local_field_check, make_bundle, state_key
from .callbacks import host_launch
from .logical_data import dep, logical_data
from .task import new_task, task

if TYPE_CHECKING:
    from .kernel import cuda_kernel as _CudaKernel

__all__ = ["context"]

_LogicalData = logical_data
_Task = task
_live_contexts: weakref.WeakSet[context] = weakref.WeakSet()
_live_lock = threading.Lock()


class context(RuntimeOwner):
    """A Sequential Task Flow context.

    Parameters
    ----------
    use_graph : bool
        ``False``: stream mode, each task is enqueued on a stream when it starts.
        ``True``: graph mode, the work between two synchronisation points
        (``fence``, ``wait``, ``finalize``) is recorded into a graph, which is then
        launched (see ``docs/graph-mode.md``).
    borrowed : bool
        Internal: use ``logical_data.borrow_ctx_handle()`` for a borrowed context.
    stream : stream-like, optional
        A caller-owned stream: all work is ordered after what was enqueued on it so
        far, and ``finalize()`` enqueues the completion and write-backs on it without
        blocking the host. With ``use_graph=True`` the graphs are launched on it too.
    handle : async_resources, optional
        Resources shared with other contexts: in stream mode the context borrows its
        streams from them (and gives them back at ``finalize()``), in graph mode it
        shares their cache of executable graphs, so a later context of the same
        topology updates a cached executable instead of instantiating one. The
        context keeps ``handle`` alive.
    backend : {"auto", "cuda", "emulated"}
        Which backend runs the work (default: ``STFLOW_BACKEND``, else ``"auto"``).
    memory_budget : int, str or dict, optional
        The device memory the context's data may use per device, in bytes (``"8GiB"``
        works too; a dict sets it per device). Beyond it, the least recently used
        data is evicted (written back if it holds the only valid copy). Default:
        ``STFLOW_DEVICE_MEMORY_BUDGET``, else what each device has (stflow-only).

    Notes
    -----
    Use it as a context manager: leaving the ``with`` block finalizes, which waits for
    all work, writes every modified logical data back into its user buffer and frees
    device memory. A context collected (or alive at interpreter exit) without
    ``finalize()`` warns (``ResourceWarning``, plus an ``UnfinalizedContextWarning``
    when user buffers lose results), waits for its work and frees everything, but
    never writes into the user's buffers.
    """

    _data_class: type[logical_data] = logical_data
    """The class of the logical data this context creates."""
    _borrowed: bool
    _place_resources: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> context:
        # Every context has these from its creation, also one whose __init__ failed
        # or never ran (``_recording``, ``_borrow``), which ``__del__`` then skips.
        ctx = super().__new__(cls)
        ctx._runtime = None
        ctx._borrowed = False
        ctx._place_resources = None  # lent by the place_resources property
        return ctx

    def __init__(
        self,
        use_graph: bool = False,
        borrowed: bool = False,
        stream: Any = None,
        handle: Any = None,
        *,
        backend: str | None = None,
        memory_budget: Any = None,
    ) -> None:
        if borrowed:
            raise TypeError("borrowed contexts come from ld.borrow_ctx_handle()")
        caller_handle = None if stream is None else stream_handle(stream)
        if handle is not None:
            from .._engine.resources import async_resources

            if not isinstance(handle, async_resources):
                raise TypeError(
                    f"handle must be an async_resources or None, got "
                    f"{type(handle).__name__}"
                )
        native = _backend(backend)
        if handle is not None:
            handle._bind(native)  # one backend per async_resources
        caller = (
            None if caller_handle is None else native.stream_from_handle(caller_handle)
        )
        mode = _graph_mode(native, caller, epochs=True) if use_graph else Mode()
        self._start(native, caller, mode, memory_budget)
        self._stream_owner = stream
        self._async_resources = handle  # kept alive by the context
        if handle is not None:
            assert self._runtime is not None
            handle._attach(self._runtime)

    def _start(
        self,
        native: Backend,
        caller: Stream | None,
        mode: Mode,
        memory_budget: Any = None,
    ) -> None:
        runtime = self._runtime = Runtime(
            mode.backend(native), caller, mode, memory_budget
        )
        runtime.context_type = type(self)
        with _live_lock:
            _live_contexts.add(self)

    @classmethod
    def _recording(
        cls,
        backend: str | None,
        data_class: type[logical_data],
        memory_budget: Any = None,
    ) -> context:
        """The context behind a ``stackable_context``: its scopes are recorded."""
        ctx = cls.__new__(cls)
        ctx._stream_owner = None
        ctx._data_class = data_class
        native = _backend(backend)
        ctx._start(native, None, _graph_mode(native, None, epochs=False), memory_budget)
        return ctx

    @classmethod
    def _borrow(cls, runtime: Runtime) -> context:
        ctx = cls.__new__(cls)
        ctx._runtime = runtime
        ctx._borrowed = True
        ctx._stream_owner = None
        return ctx

    # -- properties --------------------------------------------------------------
    @property
    def backend(self) -> str:
        """The name of the backend running this context (stflow-only)."""
        runtime = self._runtime
        assert runtime is not None
        return runtime.backend.name

    @property
    def place_resources(self) -> Any:
        """The context's own ``exec_place_resources``, lent for
        ``place.pick_stream(ctx.place_resources)`` (the same object each time).

        Notes
        -----
        In stream mode its computation streams are the context's task streams; its
        streams are valid until the context is finalized, after which the property
        (and ``pick_stream`` with it) raises ``ContextFinalizedError``.
        """
        runtime = self._live()
        lent = self._place_resources
        if lent is None:
            from .._engine.resources import exec_place_resources

            lent = self._place_resources = exec_place_resources._lent(runtime)
        return lent

    # -- data --------------------------------------------------------------------
    def logical_data(
        self, buf: Any, dplace: Any = None, name: str | None = None
    ) -> _LogicalData:
        """Register ``buf`` (NumPy array, buffer, CAI or DLPack object) as logical data.

        Its bytes are the initial value; the latest value is written back into it at
        ``finalize()``. A read-only buffer makes read-only data.
        """
        runtime = self._live()
        check_name(name)
        state, source = runtime.register(buf, dplace, None, None)
        return self._data_class._new(
            runtime,
            state,
            source.shape,
            source.dtype,
            source.readonly,
            name,
            source.keepalive,
        )

    def logical_data_empty(
        self, shape: Any, dtype: Any = None, name: str | None = None
    ) -> _LogicalData:
        """Logical data without an initial value (``float64`` by default)."""
        return self._empty(shape, dtype, name, "logical_data_empty")

    def _empty(self, shape: Any, dtype: Any, name: str | None, what: str) -> _LogicalData:
        runtime = self._live()
        runtime.check_submit(f"{what}()")
        check_name(name)
        checked_shape, checked_dtype = check_empty_args(shape, dtype, what)
        state = runtime.empty(checked_shape, checked_dtype, what)
        return self._data_class._new(
            runtime, state, checked_shape, checked_dtype, False, name
        )

    def logical_data_full(
        self,
        shape: Any,
        fill_value: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: exec_place | None = None,
        name: str | None = None,
    ) -> _LogicalData:
        """Logical data whose every element is ``fill_value``.

        The fill is a task with a ``write()`` dependency at ``where`` (default: the
        memory of ``exec_place``, itself the current device by default).
        """
        return self._full(
            shape, fill_value, dtype, where, exec_place, name, "logical_data_full"
        )

    def _full(
        self,
        shape: Any,
        fill_value: Any,
        dtype: Any,
        where: Any,
        exec_place: Any,
        name: str | None,
        what: str,
    ) -> _LogicalData:
        from ..fill_utils import check_fill_places, fill_pattern, init_logical_data

        self._live()
        check_fill_places(where, exec_place, what, "where")
        if dtype is None:
            dtype = np.array(fill_value).dtype
        checked = check_dtype(dtype, what)
        fill_pattern(fill_value, checked, what)
        ld = self._empty(shape, checked, name, what)
        init_logical_data(self, ld, fill_value, where, exec_place)
        return ld

    def logical_data_zeros(
        self,
        shape: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: exec_place | None = None,
        name: str | None = None,
    ) -> _LogicalData:
        """Logical data filled with zeros (``float64`` by default)."""
        return self._full(
            shape,
            0.0,
            np.float64 if dtype is None else dtype,
            where,
            exec_place,
            name,
            "logical_data_zeros",
        )

    def logical_data_ones(
        self,
        shape: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: exec_place | None = None,
        name: str | None = None,
    ) -> _LogicalData:
        """Logical data filled with ones (``float64`` by default)."""
        return self._full(
            shape,
            1.0,
            np.float64 if dtype is None else dtype,
            where,
            exec_place,
            name,
            "logical_data_ones",
        )

    def token(self) -> _LogicalData:
        """A logical data without bytes, used only for ordering."""
        runtime = self._live()
        return self._data_class._new(runtime, runtime.token(), None, None, False, None)

    @overload
    def bundle(self, view: type[_View], /, **fields: Any) -> _Bundle[_View]: ...

    @overload
    def bundle(self, view: None = None, /, **fields: Any) -> _Bundle[Any]: ...

    def bundle(self, view: Any = None, /, **fields: Any) -> _Bundle[Any]:
        """Group logical data under field names as one dependency and one task
        argument: ``A = ctx.bundle(vals=lv, colind=stf.constant(lc))``, then
        ``ctx.task(A.read(), x.rw())`` and ``t.get(0).vals`` (see ``_handles.bundles``).

        ``view`` (optional, positional) is a ``typing.NamedTuple`` class with the
        same fields in the same order, the type of the bundle's slot in a task.

        Raises
        ------
        TypeError
            A field that is not logical data.
        ContextMismatchError
            A field of another context.
        AccessModeError
            The same logical data in two fields.
        """
        runtime = self._live()
        label = "ctx.bundle()"
        check = local_field_check(runtime, self._data_class, label)
        made = make_bundle(
            view, fields, check, live_check(runtime), label, dep, state_key
        )
        made._runtime = runtime
        return made

    # -- work --------------------------------------------------------------------
    def task(self, *args: Any, symbol: str | None = None) -> _Task:
        """A task with dependencies ``ld.read()/write()/rw()`` and an optional
        ``exec_place``; start it with ``with`` or ``start()``/``end()``."""
        runtime = self._runtime
        if runtime is None:
            runtime = self._live()  # raises: the context is finalized
        return new_task(runtime, args, symbol)

    def host_launch(
        self,
        *deps: dep,
        fn: Callable[..., Any] | None = None,
        args: Any = None,
        symbol: str | None = None,
    ) -> None:
        """Run ``fn(*arrays, *args)`` on a host thread once ``deps`` are satisfied.

        Notes
        -----
        ``arrays`` are zero-copy NumPy views of the host instances, valid during the
        call only, read-only for ``read()`` dependencies. An exception from ``fn`` is
        raised at the next synchronisation point (``wait``, ``fence``, ``finalize``,
        ``check_errors``).
        """
        host_launch(self._live(), deps, fn, args, symbol)

    def cuda_kernel(self, *args: Any, symbol: str | None = None) -> _CudaKernel:
        """A task whose body describes launches, ``k.launch(kernel, grid, block,
        args)``; takes the arguments of :meth:`task`."""
        runtime = self._live()
        runtime.check_submit("cuda_kernel()")
        from .kernel import cuda_kernel

        made = cuda_kernel.__new__(cuda_kernel)
        made._setup(runtime, args, symbol)
        return made

    # -- synchronisation -----------------------------------------------------------
    def fence(self) -> int:
        """A raw stream handle that completes when all work submitted so far has.

        Does not block the host and, as in the reference, never raises pending
        asynchronous errors (``check_errors()``, ``wait()`` and ``finalize()`` do).
        """
        return self._live().fence()

    def wait(self, ld: _LogicalData) -> np.ndarray:
        """Block until ``ld`` can be read and return a new host array of its value."""
        runtime = self._live()
        if not isinstance(ld, logical_data):
            raise TypeError(f"wait() expects a logical_data, got {type(ld).__name__}")
        if ld._is_token:
            raise TypeError(
                f"wait() on token {ld._label()}: a token holds no data; "
                "order on it with fence()"
            )
        runtime.owns(ld, "wait()")
        assert ld._shape is not None and ld._dtype is not None
        return runtime.wait(ld._state, ld._shape, ld._dtype, ld._label())

    def statistics(self) -> Statistics:
        """Counters of this context so far: tasks, copies and bytes per direction,
        allocations, waits issued and skipped, and the emulated seed (stflow-only)."""
        runtime = self._runtime
        assert runtime is not None
        return runtime.statistics()

    def attach(self, instrument: Instrument) -> None:
        """Attach an instrument (``stflow.instrument.DotRecorder``, ...) that sees the
        work submitted from now on (stflow-only)."""
        from .._instruments.seam import Instrument as base

        if not isinstance(instrument, base):
            raise TypeError(
                f"attach expects a stflow.instrument.Instrument, got "
                f"{type(instrument).__name__}"
            )
        self._live().attach(instrument)

    def check_errors(self) -> None:
        """Raise the oldest asynchronous error captured so far, and forget it.

        One per call, oldest first, so ``except ValueError:`` catches a failed
        callback's ``ValueError``; the exception carries a note saying how many more
        are pending. Does nothing when none is. Works after ``finalize()``.

        Notes
        -----
        Does not block: in a caller-stream context, synchronise the stream first so
        that every callback has run. A borrowed context shares its owner's errors.
        """
        runtime = self._runtime
        if runtime is not None:
            runtime.errors.raise_pending("check_errors()")

    def pending_errors(self) -> list[BaseException]:
        """The asynchronous errors captured and not raised yet, oldest first.

        Does not clear them: ``check_errors()``, ``wait()`` and ``finalize()`` raise
        them one per call (stflow-only).
        """
        runtime = self._runtime
        return [] if runtime is None else runtime.errors.pending()

    def finalize(self) -> None:
        """Wait for all work, write results back to user buffers, free everything.

        Idempotent. Then raises the oldest pending asynchronous error (the others
        stay for ``check_errors()``). With a caller stream, the completion is enqueued
        on that stream and the host does not block: the errors captured so far are
        raised, later ones by ``check_errors()`` (or reported as ``RuntimeWarning``
        when the context is collected).
        """
        if self._borrowed:
            raise RuntimeError(
                "cannot finalize borrowed context: a borrowed context "
                "is not the owner; finalize the context that owns the "
                "data"
            )
        runtime = self._runtime
        if runtime is not None:
            try:
                runtime.finalize()
            except KeyboardInterrupt:
                # Ctrl-C while waiting: the program is ending, so the at-exit hook
                # must not wait again for work that may never complete.
                _interrupted.append(runtime)
                raise

    # -- lifecycle ---------------------------------------------------------------
    def __enter__(self) -> context:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._borrowed:
            self.finalize()

    def __del__(self) -> None:
        runtime = self._runtime
        if runtime is None or self._borrowed:
            return
        if runtime.finalized:
            _warn_errors(runtime)  # e.g. callbacks that failed after a
            return  # caller-stream finalize()
        if sys.is_finalizing():
            return
        abandon(runtime, "collected")

    def __repr__(self) -> str:
        runtime = self._runtime
        ident = runtime.id if runtime is not None else 0
        state = ", finalized" if runtime is not None and runtime.finalized else ""
        return f"context(handle={ident}, borrowed={self._borrowed}{state})"

    def __copy__(self) -> context:
        raise TypeError(
            "a context cannot be copied: it owns streams and device memory; "
            "share the context object itself (or ld.borrow_ctx_handle())"
        )

    def __deepcopy__(self, memo: Any) -> context:
        return self.__copy__()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a context cannot be pickled: it owns streams and device memory "
            "of this process"
        )


def _backend(name: str | None) -> Backend:
    """The backend called ``name`` (default: ``STFLOW_BACKEND``, else ``"auto"``)."""
    if name is None:
        from .._core.config import config

        name = config().backend
    warn_ignored_reference_variables()
    backend = get_backend(name)
    backend.revalidate_contexts()  # primary contexts reset by another library
    return backend


def _graph_mode(native: Backend, caller: Stream | None, epochs: bool) -> Mode:
    """The mode of a graph-mode context, over a recording backend; with a ``caller``
    stream, its graphs are launched on that stream (the host never waits for them).
    The one place stream-mode code reaches graph mode (``stflow._graph``)."""
    if native.graphs is None:
        raise BackendUnavailableError(
            f"graph mode (use_graph=True) needs graph support, "
            f"which the {native.name} backend lacks"
        )
    from .._graph.mode import GraphMode
    from .._graph.recording import GraphRecorder

    return GraphMode(GraphRecorder(native, launch_stream=caller), epochs=epochs)


def _kind(runtime: Runtime) -> str:
    """``"stackable_context"`` or ``"context"``, for messages."""
    return runtime.mode.context_name


def abandon(runtime: Runtime, how: str) -> None:
    """End an unfinalized context without writing into the user's buffers.

    Warns (``ResourceWarning``; plus :class:`UnfinalizedContextWarning` when user
    buffers lose results a ``finalize()`` would have written), then waits for the
    work already submitted and frees every allocation, stream and event. Open scopes
    of the calling thread and work recorded but not launched are discarded. Errors
    nobody can raise any more become ``RuntimeWarning`` warnings.

    Parameters
    ----------
    runtime : Runtime
        The runtime of the context being collected.
    how : str
        ``"collected"`` or ``"alive at interpreter exit"``, for the messages.

    Notes
    -----
    Waiting blocks the calling thread. When it must not (the collection runs on a
    stflow thread, or a task is still started), the wait and the release run on a
    helper thread instead.
    """
    with runtime.lock:
        if runtime.finalized:
            return
        runtime.closing = True  # new submissions give up
        lost = _lost_results(runtime)
        discarded = _discard_open_scopes(runtime)
    kind = _kind(runtime)
    extra = f"; {discarded} open scope(s) were discarded" if discarded else ""
    try:  # a warning filter may turn these into errors
        warn_user(
            f"stflow.{kind} {how} without an explicit finalize(): its work "
            f"was waited for and its memory freed, but results were not "
            f"written back{extra}; use 'with stf.{kind}() as ctx:' or call "
            f"ctx.finalize()",
            ResourceWarning,
        )
        if lost:
            names = ", ".join(lost[:3]) + (
                f" and {len(lost) - 3} more" if len(lost) > 3 else ""
            )
            warn_user(
                f"stflow.{kind} {how} without an explicit finalize(): the "
                f"results of {names} were NOT written back to the user's "
                f"arrays; use 'with stf.{kind}() as ctx:' or call "
                "ctx.finalize() before reading them",
                UnfinalizedContextWarning,
            )
    finally:  # released in any case: nothing leaks
        if callback_state.active or runtime.started:
            threading.Thread(
                target=_release_abandoned,
                args=(runtime,),
                name="stflow-abandon",
                daemon=True,
            ).start()
        else:
            _release_abandoned(runtime)


def _lost_results(runtime: Runtime) -> list[str]:
    """Labels of the data whose user buffer a ``finalize()`` would write (lock held)."""
    data = runtime.data
    states = list(data.states.values())
    retired = set(data.retired)
    lost = []
    for state in states:
        if state.reference is None or state.is_token:
            continue
        if state.pending is not None or state.writeback_plan() is not None:
            lost.append(state.label + (" (collected)" if state.key in retired else ""))
    return lost


def _discard_open_scopes(runtime: Runtime) -> int:
    """Drop the calling thread's open scopes and the current graph-mode epoch: what
    they recorded never runs (lock held). Returns the number of user scopes."""
    return runtime.mode.discard()


def _release_abandoned(runtime: Runtime) -> None:
    """Wait for the submitted work of an abandoned context, then free everything."""
    backend = runtime.backend
    try:
        with runtime.lock:
            runtime._await_no_started()
            events = merge_events(runtime.outstanding_events())
            events.extend(entry.done for entry in runtime.releases)
        for event in events:
            backend.synchronize(event)
        with runtime.lock:
            runtime.tear_down(None)
            runtime.wake()
        for failure in runtime.instruments.finalized():
            runtime.errors.capture(failure)
    except BaseException as exc:  # noqa: BLE001 - nobody can catch it any more
        warnings.warn(
            f"stflow: error while releasing an abandoned context: {exc!r}",
            RuntimeWarning,
            stacklevel=2,
        )
    _warn_errors(runtime)


def _warn_errors(runtime: Runtime) -> None:
    """Report errors nobody can raise any more as RuntimeWarnings."""
    for error in runtime.errors.take():
        warnings.warn(
            f"stflow: asynchronous error of a context that is gone: {error!r}",
            RuntimeWarning,
            stacklevel=2,
        )


_interrupted: list[Runtime] = []
"""The runtimes whose ``finalize()`` a KeyboardInterrupt ended (kept alive: the
program is ending)."""


@atexit.register
def _abandon_at_exit() -> None:
    """Abandon the contexts still alive at interpreter exit (never finalize them:
    their user buffers are not written), and report the errors of finalized ones."""
    with _live_lock:
        contexts = list(_live_contexts)
    for ctx in contexts:
        runtime = ctx._runtime
        if runtime is None or ctx._borrowed:
            continue
        if runtime.finalized:
            _warn_errors(runtime)
        elif any(runtime is stopped for stopped in _interrupted):
            warnings.warn(
                f"stflow.{_kind(runtime)}: finalize() was interrupted "
                "(KeyboardInterrupt); its work was not waited for and its "
                "results were not written back",
                UnfinalizedContextWarning,
                stacklevel=2,
            )
        else:
            abandon(runtime, "alive at interpreter exit")
