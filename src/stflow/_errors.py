"""The exception hierarchy of stflow.

Every class derives from :class:`STFError` *and* from the builtin whose meaning it
matches, so ``except ValueError`` written for the reference API keeps working.
"""

from __future__ import annotations

import itertools
import sys
import threading
from typing import Sequence

__all__ = [
    "AccessModeError",
    "BackendNotice",
    "BackendUnavailableError",
    "ContextFinalizedError",
    "ContextMismatchError",
    "CudaError",
    "ErrorLog",
    "PlaceError",
    "STFError",
    "ScopeError",
    "ShapeError",
    "work_ids",
]

work_ids = itertools.count(1)
"""Idents of tasks, host callbacks and internal copies, in submission order (unique in
the process): captured errors are raised in this order."""


class STFError(Exception):
    """Root of the stflow hierarchy; never raised directly."""


class ContextFinalizedError(STFError, RuntimeError):
    """A context, or one of its data or tasks, was used after ``finalize()``."""


class AccessModeError(STFError, ValueError):
    """An access mode is not allowed (write to read-only data, unknown mode)."""


class PlaceError(STFError, ValueError):
    """An invalid data or execution place (device out of range, wrong kind)."""


class ShapeError(STFError, ValueError):
    """A shape, dtype, contiguity or size mismatch."""


class ScopeError(STFError, RuntimeError):
    """A call made where it is not legal (outside its window, unmatched scope)."""


class ContextMismatchError(STFError, ValueError):
    """An object of one context used with another."""


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


class BackendNotice(UserWarning):
    """Issued once per process when ``backend="auto"`` falls back to emulation."""


def raise_collected(errors: Sequence[BaseException], what: str) -> None:
    """Raise captured asynchronous errors: one as itself, several as a group.

    Parameters
    ----------
    errors : sequence of exceptions
        In submission order; nothing is raised when empty.
    what : str
        Describes the sync point for the group message ("fence()", ...).
    """
    if not errors:
        return
    if len(errors) == 1:
        raise errors[0]
    exceptions = [e if isinstance(e, Exception) else RuntimeError(repr(e)) for e in errors]
    if sys.version_info >= (3, 11):
        group = ExceptionGroup  # noqa: F821 - builtin on 3.11+
    else:  # pragma: no cover - exercised on Python 3.10 only
        from exceptiongroup import ExceptionGroup as group
    raise group(f"{len(errors)} asynchronous errors raised at {what}", exceptions)


class ErrorLog:
    """Asynchronous failures of one context, kept for its next synchronisation point.

    Failures arrive from any thread (host callbacks, the emulated device thread,
    launched work); each comes with the ident of the work that failed, so they are
    raised in submission order.
    """

    __slots__ = ("_errors", "_lock")

    def __init__(self) -> None:
        self._errors: list[tuple[int, BaseException]] = []
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._errors)

    def capture(self, exc: BaseException, order: int | None = None) -> None:
        """Keep ``exc``; ``order`` is the ident of the work that failed (default: now)."""
        with self._lock:
            self._errors.append((next(work_ids) if order is None else order, exc))

    def take(self) -> list[BaseException]:
        """The captured errors in submission order; forgets them."""
        with self._lock:
            errors, self._errors = self._errors, []
        errors.sort(key=lambda entry: entry[0])
        return [exc for _, exc in errors]

    def raise_pending(self, where: str) -> None:
        """Raise what was captured (see :func:`raise_collected`)."""
        if self._errors:
            raise_collected(self.take(), where)
