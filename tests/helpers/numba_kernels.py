"""Numba kernels of the tests, at module level: Numba's CUDA simulator swaps the
``cuda`` global of a kernel's module while it runs it. Import this only where the
simulator (``NUMBA_ENABLE_CUDASIM=1`` before Numba's import) or a GPU is wanted."""

from __future__ import annotations

from numba import cuda


def scale_add(y, x, a):
    """``y += a * x``, one element per thread."""
    i = cuda.grid(1)
    if i < y.size:
        y[i] += a * x[i]
