"""Compatibility alias for code that imported the reference's private bindings module."""

from ._logical_data import dep, logical_data, read, rw, write
from ._task import task
from ._views import stf_cai

__all__ = ["dep", "logical_data", "read", "rw", "stf_cai", "task", "write"]
