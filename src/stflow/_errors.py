"""The exception hierarchy of stflow.

Every class derives from :class:`STFError` *and* from the builtin whose meaning it
matches, so ``except ValueError`` written for the reference API keeps working.
"""

from __future__ import annotations

import sys
from typing import Sequence

__all__ = [
    "AccessModeError",
    "BackendNotice",
    "BackendUnavailableError",
    "ContextFinalizedError",
    "ContextMismatchError",
    "CudaError",
    "PlaceError",
    "STFError",
    "ScopeError",
    "ShapeError",
]


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
