"""Compatibility alias for code that imported the reference's private bindings module."""

from ._dlpack import dlpack_export
from ._kernel import cuda_kernel
from ._logical_data import dep, logical_data, read, rw, write
from ._task import task
from ._views import stf_cai

__all__ = ["cuda_kernel", "dep", "dlpack_export", "logical_data", "read", "rw",
           "stf_cai", "task", "write"]
