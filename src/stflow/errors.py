"""The exceptions and warnings stflow raises (see the API's error model, section 1.1).

Each exception derives from :class:`STFError` and from the builtin matching its
meaning; the subclasses in the second group are also instances of the builtin the
reference raises at the same call, so ``except`` clauses written for the reference keep
working (``docs/errors.md``).
"""

from ._core.errors import (
    AccessModeError,
    BackendNotice,
    BackendUnavailableError,
    BufferOverlapError,
    BundleFieldError,
    ContextFinalizedError,
    ContextMismatchError,
    CudaError,
    DeviceOrdinalError,
    DivergentProgramError,
    GreenContextUnavailableError,
    GridIndexError,
    NegativeCountError,
    NegativeIndexError,
    OutOfMemoryError,
    PlaceAllocationError,
    PlaceError,
    RemoteTaskError,
    ScopeError,
    ShapeError,
    STFError,
    TokenArgumentError,
    UnfinalizedContextWarning,
)

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
    "GreenContextUnavailableError",
    "GridIndexError",
    "NegativeCountError",
    "NegativeIndexError",
    "OutOfMemoryError",
    "PlaceAllocationError",
    "PlaceError",
    "RemoteTaskError",
    "STFError",
    "ScopeError",
    "ShapeError",
    "TokenArgumentError",
    "UnfinalizedContextWarning",
]
