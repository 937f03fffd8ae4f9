"""The exceptions stflow raises (see the API's error model)."""

from ._errors import (AccessModeError, BackendNotice, BackendUnavailableError,
                      ContextFinalizedError, ContextMismatchError, CudaError, PlaceError,
                      ScopeError, ShapeError, STFError)

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
