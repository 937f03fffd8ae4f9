"""The exception hierarchy of stflow, and the log of asynchronous errors.

Every class derives from :class:`STFError` *and* from the builtin whose meaning it
matches, so ``except ValueError`` written for the reference API keeps working. Where
the reference raises a *different* builtin at the same call (a ``RuntimeError`` for an
invalid device, a ``MemoryError`` for an allocation on a place that cannot allocate,
an ``OverflowError`` for a negative index, ...), stflow raises a small subclass that is
an instance of both, and its message carries the reference's key phrase, so ``except``
clauses and ``pytest.raises(..., match=...)`` written for the reference keep working
too (``docs/errors.md`` lists every such site).

Asynchronous errors
    Work that runs later in stream order (host callbacks, launched work, copies) cannot
    raise into the caller. :class:`ErrorLog` keeps what it raises, in submission
    order, until a blocking synchronisation point (``wait()``, ``finalize()``,
    ``check_errors()``) raises the **oldest** one, with a note saying how many more
    are pending. One per call, as in the reference, so ``except ValueError:`` catches
    a failed callback's ``ValueError`` (an ``ExceptionGroup`` would not).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import types
import warnings

__all__ = [
    "AccessModeError",
    "BackendNotice",
    "BackendUnavailableError",
    "BufferOverlapError",
    "BundleFieldError",
    "ContextFinalizedError",
    "ContextMismatchError",
    "CudaError",
    "DeviceOrdinalError",
    "DivergentProgramError",
    "ErrorLog",
    "GreenContextUnavailableError",
    "GridIndexError",
    "NegativeCountError",
    "NegativeIndexError",
    "OutOfMemoryError",
    "PlaceAllocationError",
    "PlaceError",
    "STFError",
    "ScopeError",
    "ShapeError",
    "TokenArgumentError",
    "UnfinalizedContextWarning",
    "warn_user",
    "work_ids",
]

work_ids = itertools.count(1)
"""Idents of tasks, host callbacks and internal copies, in submission order (unique in
the process): captured errors are raised in this order."""


class STFError(Exception):
    """Root of the stflow hierarchy; never raised directly."""


class ContextFinalizedError(STFError, RuntimeError):
    """A context, or one of its data or tasks, was used after ``finalize()``.

    Messages of the context's own methods contain the reference's phrase "context
    handle is NULL".
    """


class AccessModeError(STFError, ValueError):
    """An access mode is not allowed (write to read-only data, unknown mode), or a
    task wrote to data it declared ``read()`` (detected on the emulated backend)."""


class PlaceError(STFError, ValueError):
    """An invalid data or execution place (device out of range, wrong kind)."""


class ShapeError(STFError, ValueError):
    """A shape, dtype, contiguity or size mismatch."""


class ScopeError(STFError, RuntimeError):
    """A call made where it is not legal (outside its window, unmatched scope)."""


class BufferOverlapError(STFError, ValueError):
    """A buffer registered as logical data overlaps the buffer of live logical data
    of the same context, and at least one of the two is writable: the two would
    hold diverging copies of the same bytes (stale reads, last-writer-wins
    write-backs at ``finalize()``). Use the existing logical data, register
    disjoint slices, or register read-only buffers (overlapping read-only
    registrations are allowed)."""


class ContextMismatchError(STFError, ValueError):
    """An object of one context used with another (the message says "different
    context", as the reference's)."""


class OutOfMemoryError(STFError, MemoryError):
    """Device memory ran out: a task's own data at one place exceeds the memory
    budget, or what is left cannot be freed by eviction; the message names the task,
    the sizes and the budget."""


class BackendUnavailableError(STFError, ImportError):
    """A backend or optional dependency cannot be loaded; the message names the extra."""


class CudaError(STFError, RuntimeError):
    """A CUDA driver call failed.

    Attributes
    ----------
    name : str
        The driver's error name (``"CUDA_ERROR_OUT_OF_MEMORY"``).
    code : int
        The driver's numeric error code.
    """

    def __init__(self, message: str, name: str = "", code: int = 0) -> None:
        super().__init__(message)
        self.name = name
        self.code = code


# -- where the reference raises another builtin: instances of both ------------------
class DeviceOrdinalError(PlaceError, RuntimeError):
    """A device ordinal that does not exist (``data_place.device(99)``, ...).

    A :class:`PlaceError` (``ValueError``) and, as the reference raises there, a
    ``RuntimeError``; the message contains "invalid device id".
    """


class PlaceAllocationError(PlaceError, MemoryError):
    """``allocate`` on a place that cannot allocate (affine, composite, replicated).

    A :class:`PlaceError` and, as in the reference, a ``MemoryError``; the message
    contains "data_place.allocate failed".
    """


class NegativeIndexError(STFError, IndexError, OverflowError):
    """A negative index where the reference takes a ``size_t`` (sub-places, grid
    streams, green-context views): an ``IndexError`` and, as the reference's
    conversion raises, an ``OverflowError``; the message says "negative"."""


class NegativeCountError(STFError, ValueError, OverflowError):
    """A negative count where the reference takes a ``size_t`` (``repeat(-1)``): a
    ``ValueError`` and, as the reference's conversion raises, an ``OverflowError``."""


class GridIndexError(STFError, IndexError, RuntimeError):
    """A grid member index out of range (``task.get_stream_at_index``): an
    ``IndexError`` and, as in the reference, a ``RuntimeError``."""


class TokenArgumentError(STFError, TypeError, RuntimeError):
    """``get_arg`` / ``get_arg_cai`` of a token dependency: a ``TypeError`` (a token
    has no memory) and, as in the reference, a ``RuntimeError``; the message says
    "cannot materialize a token argument"."""


class BundleFieldError(AccessModeError, KeyError):
    """A name that is not a field of the bundle (``bundle.dep(nope=...)``): an
    :class:`AccessModeError` and, as CUDASTF's bundles raise, a ``KeyError``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class GreenContextUnavailableError(BackendUnavailableError, RuntimeError):
    """Green contexts cannot be created (``cuda.core`` or driver support missing): a
    :class:`BackendUnavailableError` (``ImportError``) naming the extra and, as in the
    reference, a ``RuntimeError``."""


class RemoteTaskError(STFError, RuntimeError):
    """A distributed task's body touched its data on a rank where the task does not
    execute (``stf.distributed_context``): guard it with ``t.runs_here`` or write it
    with ``t.run(fn)``."""


class DivergentProgramError(STFError, RuntimeError):
    """The ranks of a ``stf.distributed_context`` made different collective calls
    (data created, tasks submitted, ``wait``/``fence``/``finalize``): every rank must
    make the same ones, in the same order. The message lists each rank's call."""


# -- warnings --------------------------------------------------------------------------
class BackendNotice(UserWarning):
    """Issued once per process when ``backend="auto"`` falls back to emulation."""


class UnfinalizedContextWarning(UserWarning):
    """A context holding results for user buffers was collected, or was still alive at
    interpreter exit, without ``finalize()``: the results were **not** written back.

    Shown by default (a ``UserWarning``), once per such context, in addition to the
    ``ResourceWarning`` every unfinalized context gets. Use ``with stf.context() as
    ctx:`` or call ``ctx.finalize()``.
    """


# Tracebacks, reprs and pickles name the public module users import the classes from
# (``stflow.errors.ShapeError``), not this private one.
for _public in (
    STFError,
    ContextFinalizedError,
    AccessModeError,
    PlaceError,
    ShapeError,
    ScopeError,
    BufferOverlapError,
    ContextMismatchError,
    OutOfMemoryError,
    BackendUnavailableError,
    CudaError,
    DeviceOrdinalError,
    PlaceAllocationError,
    NegativeIndexError,
    NegativeCountError,
    GridIndexError,
    TokenArgumentError,
    GreenContextUnavailableError,
    RemoteTaskError,
    DivergentProgramError,
    BundleFieldError,
    BackendNotice,
    UnfinalizedContextWarning,
):
    _public.__module__ = "stflow.errors"
del _public


# The package's folder (this module is stflow/_core/errors.py).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first caller outside stflow.

    A fixed ``stacklevel`` is wrong as soon as a warning is reachable through more
    than one path (``context()``, ``stackable_context()``, a place factory, ...);
    this one names the user's file and line whatever the path, so ``-W error``,
    filters by module and the printed location all point at the user's code. When
    no frame is outside stflow (interpreter exit), the warning names stflow's.
    """
    frame: types.FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    if frame is None:
        level = 2
    warnings.warn(message, category, stacklevel=level)


# -- asynchronous errors ---------------------------------------------------------------
class ErrorLog:
    """Asynchronous failures of one context, kept for its next synchronisation point.

    Failures arrive from any thread (host callbacks, the emulated device thread,
    launched work); each comes with the ident of the work that failed, so they are
    kept in submission order. A synchronisation point raises the oldest one
    (:meth:`raise_pending`); the others stay pending for the next call.
    """

    __slots__ = ("_errors", "_lock")

    def __init__(self) -> None:
        self._errors: list[tuple[int, BaseException]] = []
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._errors)

    def __len__(self) -> int:
        return len(self._errors)

    def capture(self, exc: BaseException, order: int | None = None) -> None:
        """Keep ``exc``; ``order`` is the ident of the work that failed (default: now)."""
        with self._lock:
            self._errors.append((next(work_ids) if order is None else order, exc))

    def pending(self) -> list[BaseException]:
        """The captured errors, oldest first, without forgetting them."""
        with self._lock:
            errors = sorted(self._errors, key=lambda entry: entry[0])
        return [exc for _, exc in errors]

    def take(self) -> list[BaseException]:
        """The captured errors, oldest first; forgets them."""
        with self._lock:
            errors, self._errors = self._errors, []
        errors.sort(key=lambda entry: entry[0])
        return [exc for _, exc in errors]

    def take_oldest(self) -> tuple[BaseException | None, int]:
        """The oldest captured error (forgotten) and how many remain pending."""
        with self._lock:
            errors = self._errors
            if not errors:
                return None, 0
            oldest = min(range(len(errors)), key=lambda i: errors[i][0])
            exc = errors.pop(oldest)[1]
            return exc, len(errors)

    def raise_pending(self, where: str) -> None:
        """Raise the oldest captured error, if any, noting how many more are pending.

        Parameters
        ----------
        where : str
            The synchronisation point ("wait()", "finalize()", ...), for the note.
        """
        if not self._errors:
            return
        exc, remaining = self.take_oldest()
        if exc is None:
            return
        if remaining:
            note = (
                f"stflow: asynchronous error raised at {where}; {remaining} more "
                f"pending (ctx.check_errors() raises the next, "
                f"ctx.pending_errors() lists them)"
            )
        else:
            note = f"stflow: asynchronous error raised at {where}; none more pending"
        add_note(exc, note)
        raise exc


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` (PEP 678), also on Python 3.10 (``__notes__``)."""
    adder = getattr(exc, "add_note", None)
    if adder is not None:
        adder(note)
        return
    notes = getattr(exc, "__notes__", None)  # pragma: no cover - Python 3.10
    if not isinstance(notes, list):  # pragma: no cover
        notes = []
        try:
            exc.__notes__ = notes
        except AttributeError:
            return
    notes.append(note)  # pragma: no cover
