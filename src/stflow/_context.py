"""The public ``context``: creates data, submits tasks, synchronises, finalizes.

A context is a thin handle on a :class:`~stflow._runtime.Runtime`. Logical data and
tasks refer to the runtime, not to the context object, so dropping the last reference
to a context finalizes it (with a ``ResourceWarning``) even while its data objects are
still referenced somewhere.
"""

from __future__ import annotations

import atexit
import sys
import threading
import warnings
import weakref
from typing import Any, Callable

import numpy as np

from ._config import warn_ignored_reference_variables
from ._errors import BackendUnavailableError
from ._instrument import Instrument, Statistics
from ._logical_data import dep, logical_data
from ._places import exec_place
from ._registry import check_empty_args, check_name
from ._runtime import Runtime, RuntimeOwner
from ._sources import check_dtype
from ._task import host_launch, task
from ._views import stream_handle
from .backends import get_backend
from .backends._base import Backend, Stream, callback_state

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
        blocking the host.
    handle : None
        Shared ``async_resources`` arrive with multi-device support; only ``None`` is
        accepted now.
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
    device memory. A context collected unfinalized warns (``ResourceWarning``) and
    finalizes all the same.
    """

    _data_class: type[logical_data] = logical_data
    """The class of the logical data this context creates."""

    def __init__(self, use_graph: bool = False, borrowed: bool = False, stream: Any = None,
                 handle: Any = None, *, backend: str | None = None,
                 memory_budget: Any = None) -> None:
        self._runtime: Runtime | None = None
        self._borrowed = False
        if borrowed:
            raise TypeError("borrowed contexts come from ld.borrow_ctx_handle()")
        caller_handle = None if stream is None else stream_handle(stream)
        if handle is not None:
            raise TypeError(f"handle must be None in this release (async_resources "
                            f"are not supported yet), got {type(handle).__name__}")
        native = _backend(backend)
        caller = None if caller_handle is None else native.stream_from_handle(caller_handle)
        if use_graph:
            self._start(_graph_backend(native, caller), caller, "epochs", memory_budget)
        else:
            self._start(native, caller, None, memory_budget)
        self._stream_owner = stream

    def _start(self, backend: Backend, caller: Stream | None,
               graph_mode: str | None, memory_budget: Any = None) -> None:
        runtime = self._runtime = Runtime(backend, caller, graph_mode, memory_budget)
        runtime.context_type = type(self)
        with _live_lock:
            _live_contexts.add(self)

    @classmethod
    def _recording(cls, backend: str | None, data_class: type[logical_data],
                   memory_budget: Any = None) -> context:
        """The context behind a ``stackable_context``: its scopes are recorded."""
        ctx = cls.__new__(cls)
        ctx._runtime = None
        ctx._borrowed = False
        ctx._stream_owner = None
        ctx._data_class = data_class
        ctx._start(_graph_backend(_backend(backend), None), None, "scopes", memory_budget)
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

    # -- data --------------------------------------------------------------------
    def logical_data(self, buf: Any, dplace: Any = None, name: str | None = None
                     ) -> _LogicalData:
        """Register ``buf`` (NumPy array, buffer, CAI or DLPack object) as logical data.

        Its bytes are the initial value; the latest value is written back into it at
        ``finalize()``. A read-only buffer makes read-only data.
        """
        runtime = self._live()
        check_name(name)
        state, source = runtime.register(buf, dplace, None, None)
        return self._data_class._new(runtime, state, source.shape, source.dtype,
                                     source.readonly, name, source.keepalive)

    def logical_data_empty(self, shape: Any, dtype: Any = None, name: str | None = None
                           ) -> _LogicalData:
        """Logical data without an initial value (``float64`` by default)."""
        return self._empty(shape, dtype, name, "logical_data_empty")

    def _empty(self, shape: Any, dtype: Any, name: str | None, what: str
               ) -> _LogicalData:
        runtime = self._live()
        runtime.check_submit(f"{what}()")
        check_name(name)
        checked_shape, checked_dtype = check_empty_args(shape, dtype, what)
        state = runtime.empty(checked_shape, checked_dtype, what)
        return self._data_class._new(runtime, state, checked_shape, checked_dtype,
                                     False, name)

    def logical_data_full(self, shape: Any, fill_value: Any, dtype: Any = None,
                          where: Any = None, exec_place: exec_place | None = None,
                          name: str | None = None) -> _LogicalData:
        """Logical data whose every element is ``fill_value``.

        The fill is a task with a ``write()`` dependency at ``where`` (default: the
        memory of ``exec_place``, itself the current device by default).
        """
        return self._full(shape, fill_value, dtype, where, exec_place, name,
                          "logical_data_full")

    def _full(self, shape: Any, fill_value: Any, dtype: Any, where: Any,
              exec_place: Any, name: str | None, what: str) -> _LogicalData:
        from .fill_utils import check_fill_places, fill_pattern, init_logical_data
        self._live()
        check_fill_places(where, exec_place, what, "where")
        if dtype is None:
            dtype = np.array(fill_value).dtype
        checked = check_dtype(dtype, what)
        fill_pattern(fill_value, checked, what)
        ld = self._empty(shape, checked, name, what)
        init_logical_data(self, ld, fill_value, where, exec_place)
        return ld

    def logical_data_zeros(self, shape: Any, dtype: Any = None, where: Any = None,
                           exec_place: exec_place | None = None, name: str | None = None
                           ) -> _LogicalData:
        """Logical data filled with zeros (``float64`` by default)."""
        return self._full(shape, 0.0, np.float64 if dtype is None else dtype, where,
                          exec_place, name, "logical_data_zeros")

    def logical_data_ones(self, shape: Any, dtype: Any = None, where: Any = None,
                          exec_place: exec_place | None = None, name: str | None = None
                          ) -> _LogicalData:
        """Logical data filled with ones (``float64`` by default)."""
        return self._full(shape, 1.0, np.float64 if dtype is None else dtype, where,
                          exec_place, name, "logical_data_ones")

    def token(self) -> _LogicalData:
        """A logical data without bytes, used only for ordering."""
        runtime = self._live()
        return self._data_class._new(runtime, runtime.token(), None, None, False, None)

    # -- work --------------------------------------------------------------------
    def task(self, *args: Any, symbol: str | None = None) -> _Task:
        """A task with dependencies ``ld.read()/write()/rw()`` and an optional
        ``exec_place``; start it with ``with`` or ``start()``/``end()``."""
        runtime = self._runtime
        if runtime is None or runtime.finalized or runtime.closing or \
                callback_state.active:
            self._live().check_submit("task()")
        assert runtime is not None                       # checked above
        made = task.__new__(task)
        made._setup(runtime, args, symbol)
        return made

    def host_launch(self, *deps: dep, fn: Callable[..., Any] | None = None,
                    args: Any = None, symbol: str | None = None) -> None:
        """Run ``fn(*arrays, *args)`` on a host thread once ``deps`` are satisfied.

        Notes
        -----
        ``arrays`` are zero-copy NumPy views of the host instances, valid during the
        call only, read-only for ``read()`` dependencies. An exception from ``fn`` is
        raised at the next synchronisation point (``wait``, ``fence``, ``finalize``,
        ``check_errors``).
        """
        host_launch(self._live(), deps, fn, args, symbol)

    def cuda_kernel(self, *args: Any, symbol: str | None = None) -> Any:
        """A task whose body describes launches, ``k.launch(kernel, grid, block,
        args)``; takes the arguments of :meth:`task`."""
        runtime = self._live()
        runtime.check_submit("cuda_kernel()")
        from ._kernel import cuda_kernel
        return cuda_kernel._make(runtime, args, symbol)

    # -- synchronisation -----------------------------------------------------------
    def fence(self) -> int:
        """A raw stream handle that completes when all work submitted so far has.

        Does not block the host. Raises pending asynchronous errors.
        """
        return self._live().fence()

    def wait(self, ld: _LogicalData) -> np.ndarray:
        """Block until ``ld`` can be read and return a new host array of its value."""
        runtime = self._live()
        if not isinstance(ld, logical_data):
            raise TypeError(f"wait() expects a logical_data, got {type(ld).__name__}")
        if ld._is_token:
            raise TypeError(f"wait() on token {ld._label()}: a token holds no data; "
                            "order on it with fence()")
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
        from ._instrument import Instrument as base
        if not isinstance(instrument, base):
            raise TypeError(f"attach expects a stflow.instrument.Instrument, got "
                            f"{type(instrument).__name__}")
        self._live().attach(instrument)

    def check_errors(self) -> None:
        """Raise the asynchronous errors captured so far (several → ExceptionGroup)."""
        runtime = self._runtime
        if runtime is not None:
            runtime.errors.raise_pending("check_errors()")

    def finalize(self) -> None:
        """Wait for all work, write results back to user buffers, free everything.

        Idempotent. Raises pending asynchronous errors. With a caller stream, the
        completion is enqueued on that stream and the host does not block.
        """
        if self._borrowed:
            raise RuntimeError("a borrowed context cannot be finalized; finalize the "
                               "context that owns the data")
        runtime = self._runtime
        if runtime is not None:
            runtime.finalize()

    # -- lifecycle ---------------------------------------------------------------
    def __enter__(self) -> context:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._borrowed:
            self.finalize()

    def __del__(self) -> None:
        runtime = getattr(self, "_runtime", None)
        if runtime is None or self._borrowed:
            return
        if runtime.finalized:
            _warn_errors(runtime)          # e.g. callbacks that failed after a
            return                         # caller-stream finalize()
        if sys.is_finalizing():
            return
        warnings.warn("stflow context collected without finalize(); use 'with "
                      "stf.context() as ctx:' so results are written back "
                      "deterministically", ResourceWarning, stacklevel=2)
        _finalize_quietly(runtime)

    def __repr__(self) -> str:
        runtime = self._runtime
        ident = runtime.id if runtime is not None else 0
        return f"context(handle={ident}, borrowed={self._borrowed})"

    def __copy__(self) -> context:
        raise TypeError("a context cannot be copied: it owns streams and device memory; "
                        "share the context object itself (or ld.borrow_ctx_handle())")

    def __deepcopy__(self, memo: Any) -> context:
        return self.__copy__()

    def __reduce__(self) -> Any:
        raise TypeError("a context cannot be pickled: it owns streams and device memory "
                        "of this process")


def _backend(name: str | None) -> Backend:
    """The backend called ``name`` (default: ``STFLOW_BACKEND``, else ``"auto"``)."""
    if name is None:
        from ._config import config
        name = config().backend
    warn_ignored_reference_variables()
    return get_backend(name)


def _graph_backend(native: Backend, caller: Stream | None) -> Backend:
    """The recording backend of a graph-mode context."""
    if caller is not None:
        raise ValueError("graph mode with a caller stream (context(stream=...)) is not "
                         "supported; use one or the other")
    if native.graphs is None:
        raise BackendUnavailableError(f"graph mode (use_graph=True) needs graph support, "
                                      f"which the {native.name} backend lacks")
    from .backends.recording import GraphRecorder
    return GraphRecorder(native)


def _finalize_quietly(runtime: Runtime) -> None:
    """Finalize where nobody can catch exceptions: they become RuntimeWarnings."""
    try:
        runtime.finalize()
    except BaseException as exc:  # noqa: BLE001
        errors = list(getattr(exc, "exceptions", None) or [exc])
        for error in errors:
            warnings.warn(f"stflow: error while finalizing a collected context: "
                          f"{error!r}", RuntimeWarning, stacklevel=2)
    _warn_errors(runtime)


def _warn_errors(runtime: Runtime) -> None:
    """Report errors nobody can catch any more as RuntimeWarnings."""
    for error in runtime.errors.take():
        warnings.warn(f"stflow: asynchronous error of a context that is gone: "
                      f"{error!r}", RuntimeWarning, stacklevel=2)


@atexit.register
def _finalize_at_exit() -> None:
    """Finalize contexts still alive at exit, so user buffers get their results."""
    with _live_lock:
        contexts = list(_live_contexts)
    for ctx in contexts:
        runtime = ctx._runtime
        if runtime is not None and not ctx._borrowed:
            if runtime.finalized:
                _warn_errors(runtime)
            else:
                _finalize_quietly(runtime)

