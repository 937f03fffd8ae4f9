"""The device code of CUDA graph loops (``backends/_cuda_conditions.py``): a loop
condition is checked and turned into a kernel's source and arguments without a GPU
(the GPU tests compile and run the kernels)."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from stflow.backends._cuda_conditions import (
    MAX_TERMS,
    condition_kernel,
    condition_source,
    integer_threshold,
)


@pytest.mark.parametrize(
    ("op", "threshold", "expected"),
    [
        (">", 2.5, 2),  # x > 2.5  <=>  x > 2
        ("<=", 2.5, 2),  # x <= 2.5 <=>  x <= 2
        ("<", 2.5, 3),  # x < 2.5  <=>  x < 3
        (">=", 2.5, 3),  # x >= 2.5 <=>  x >= 3
        (">", -2.5, -3),
        ("<", -2.5, -2),
        (">", 4.0, 4),
        (">", math.inf, 2**63 - 1),
        ("<", -math.inf, -(2**63)),
        ("<", 1e30, 2**63 - 1),  # clamped to the 64-bit range
    ],
)
def test_integer_thresholds_keep_the_comparison_true_for_every_integer(
    op, threshold, expected
):
    assert integer_threshold(op, threshold) == expected
    compare = {">": np.greater, "<": np.less, ">=": np.greater_equal, "<=": np.less_equal}
    for x in range(-6, 7):
        assert compare[op](x, threshold) == compare[op](x, expected)


def test_a_nan_threshold_against_integer_elements_is_refused():
    with pytest.raises(ValueError, match="not NaN"):
        integer_threshold(">", math.nan)
    with pytest.raises(ValueError, match="not NaN"):
        condition_kernel(7, [(0x1000, np.dtype(np.int32), ">", math.nan, False)], "all")


def test_the_kernel_reads_each_term_and_combines_them():
    terms = [
        (0x1000, np.dtype(np.float64), ">", 1.5, False),
        (0x2000, np.dtype(np.int64), "<=", 2.5, True),
    ]
    source, args = condition_kernel(42, terms, "any")
    assert "stflow_condition" in source and "cudaGraphSetConditional" in source
    assert "const double* p0" in source and "const long long* p1" in source
    assert "((double)p0[0] > t0) || !((long long)p1[0] <= t1)" in source
    assert [type(a) for a in args] == [
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_double,
        ctypes.c_uint64,
        ctypes.c_int64,
    ]
    assert [a.value for a in args] == [42, 0x1000, 1.5, 0x2000, 2]
    assert source == condition_source(
        (("float64", ">", False), ("int64", "<=", True)), "any"
    )
    all_of, _ = condition_kernel(42, terms, "all")
    assert " && " in all_of and " || " not in all_of


@pytest.mark.parametrize(
    ("terms", "combiner", "message"),
    [
        ([], "all", "1 to 8 terms, not 0"),
        ([(1, np.dtype(np.float32), ">", 0.0, False)] * (MAX_TERMS + 1), "all", "not 9"),
        ([(1, np.dtype(np.float32), ">", 0.0, False)], "xor", "'all' or 'any'"),
        ([(1, np.dtype(np.int16), ">", 0.0, False)], "all", "not int16"),
        ([(1, np.dtype(np.float32), "==", 0.0, False)], "all", "not '=='"),
    ],
)
def test_bad_conditions_are_refused_with_what_is_allowed(terms, combiner, message):
    with pytest.raises(ValueError, match=message):
        condition_kernel(1, terms, combiner)
