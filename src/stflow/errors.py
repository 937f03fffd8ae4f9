"""The exceptions stflow raises (see the API's error model)."""

from ._errors import (AccessModeError, BackendNotice, BackendUnavailableError,
                      ContextFinalizedError, ContextMismatchError, CudaError,
                      OutOfMemoryError, PlaceError, ScopeError, ShapeError, STFError)

__all__ = [
    "AccessModeError",
    "BackendNotice",
    "BackendUnavailableError",
    "ContextFinalizedError",
    "ContextMismatchError",
    "CudaError",
    "OutOfMemoryError",
    "PlaceError",
    "STFError",
    "ScopeError",
    "ShapeError",
]
