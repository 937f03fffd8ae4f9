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
            self.__cuda_array_interface__ = {
                "shape": shape,
                "strides": strides,
                "typestr": "<f8",
                "data": (0, False),
                "version": 3,
            }

    with pytest.raises(ValueError, match="row-major"):
        linalg.gemm(Fake((4, 4), (8, 32)), Fake((4, 4), None), Fake((4, 4), None))
    with pytest.raises(ValueError, match="positive element stride"):
        linalg.dot(Fake((4,), (-8,)), Fake((4,), None), Fake((1,), None))


def test_the_new_routines_check_their_operands():
    with pytest.raises(ValueError, match="square"):
        linalg.trtri(np.ones((2, 3)))
    with pytest.raises(ValueError, match="square"):
        linalg.lauum(np.ones((3, 2)))
    with pytest.raises(ValueError, match="one-element int32"):
        linalg.trtri(np.eye(2), info=np.zeros(1))
    with pytest.raises(TypeError, match="float32 and float64"):
        linalg.lauum(np.eye(2, dtype=np.int64))
    with pytest.raises(TypeError, match="all NumPy arrays or all CUDA arrays"):
        linalg.trtri([[1.0]])


def test_batched_shapes():
    with pytest.raises(ValueError, match="c must be 3-D"):
        linalg.gemm_batched(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="with 3 matrices"):
        linalg.gemm_batched(np.ones((2, 2, 2)), np.ones((2, 2)), np.ones((3, 2, 2)))
    with pytest.raises(ValueError, match="does not fit"):
        linalg.gemm_batched(np.ones((3, 2, 4)), np.ones((3, 2, 2)), np.ones((3, 2, 2)))
    with pytest.raises(TypeError, match="share a dtype"):
        linalg.gemm_batched(
            np.ones((3, 2, 2), np.float32), np.ones((2, 2)), np.ones((3, 2, 2))
        )


@pytest.mark.parametrize(
    "call",
    [
        lambda: linalg.gemm(np.eye(2), np.eye(2), np.eye(2), trans_a="T"),
        lambda: linalg.gemm_batched(
            np.ones((1, 2, 2)), np.eye(2), np.ones((1, 2, 2)), trans_b=1
        ),
        lambda: linalg.gemv(np.eye(2), np.ones(2), np.ones(2), trans="N"),
        lambda: linalg.syrk(np.eye(2), np.eye(2), trans=None),
        lambda: linalg.trsm(np.eye(2), np.eye(2), lower="U"),
        lambda: linalg.trmm(np.eye(2), np.eye(2), unit_diagonal="N"),
        lambda: linalg.trtri(np.eye(2), lower="L"),
        lambda: linalg.lauum(np.eye(2), lower=0),
    ],
    ids=["gemm", "gemm_batched", "gemv", "syrk", "trsm", "trmm", "trtri", "lauum"],
)
def test_flags_must_be_bools(call):
    """A LAPACK-style letter ("U", "T") would otherwise count as True."""
    with pytest.raises(TypeError, match="must be True or False"):
        call()
