"""stflow.linalg refuses bad input with clear errors (NumPy arrays; the CUDA path
checks the same things before calling a library)."""

from __future__ import annotations

import numpy as np
import pytest

from stflow import linalg


def test_shapes_that_do_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        linalg.gemm(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="must be 3x3"):
        linalg.trsm(np.eye(2), np.ones((3, 2)))
    with pytest.raises(ValueError, match="square"):
        linalg.potrf(np.ones((2, 3)))
    with pytest.raises(ValueError, match="one element"):
        linalg.dot(np.ones(3), np.ones(3), np.zeros(2))


def test_dtypes():
    with pytest.raises(TypeError, match="share a dtype"):
        linalg.gemm(np.ones((2, 2)), np.ones((2, 2), np.float32), np.ones((2, 2)))
    with pytest.raises(TypeError, match="float32 and float64"):
        linalg.syrk(np.ones((2, 2), complex), np.ones((2, 2), complex))


def test_mixed_kinds_and_bad_side():
    with pytest.raises(TypeError, match="all NumPy arrays or all CUDA arrays"):
        linalg.gemm([[1.0]], np.ones((1, 1)), np.ones((1, 1)))
    with pytest.raises(ValueError, match="side must be"):
        linalg.trsm(np.eye(2), np.ones((2, 2)), side="top")


def test_not_positive_definite_raises_with_numpy():
    with pytest.raises(np.linalg.LinAlgError):
        linalg.potrf(-np.eye(3))


def test_layout_checks_of_device_operands():
    """The CUDA path reads layouts from the CUDA Array Interface (no GPU needed)."""
    class Fake:
        def __init__(self, shape, strides):
            self.__cuda_array_interface__ = {"shape": shape, "strides": strides,
                                             "typestr": "<f8", "data": (0, False),
                                             "version": 3}
    with pytest.raises(ValueError, match="row-major"):
        linalg.gemm(Fake((4, 4), (8, 32)), Fake((4, 4), None), Fake((4, 4), None))
    with pytest.raises(ValueError, match="positive element stride"):
        linalg.dot(Fake((4,), (-8,)), Fake((4,), None), Fake((1,), None))
