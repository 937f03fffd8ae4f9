"""Review of DeviceArray / DLPack / cuda_kernel / fill_utils on the emulated backend.

Each test fails today for the reason given in its comment.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import stflow as stf
from stflow.fill_utils import init_logical_data


# API.md 3.12: __dlpack__ is a zero-copy export of the array's values; DLPack has no
# byte-order field, so non-native data must be refused (BufferError), never relabelled.
def test_dlpack_of_non_native_byte_order_is_refused_or_correct(backend):
    values = np.array([1.0, 2.0, 3.0], dtype=">f8")
    with stf.context(backend=backend):
        array = stf.DeviceArray.from_host(values, stf.data_place.device(0))
        try:
            imported = np.from_dlpack(array)
        except BufferError:
            return
        np.testing.assert_array_equal(imported, values)


# API.md 3.12: a dtype without a DLPack type -> BufferError; x87 long double is not the
# IEEE binary128 that DLPack float128 means (NumPy itself refuses it). Today NumPy rejects
# the capsule and the destructor callback turns that into a SystemError.
def test_dlpack_of_x87_long_double_raises_buffer_error(backend):
    if np.finfo(np.longdouble).nmant != 63:
        pytest.skip("long double is not the x87 extended type here")
    with stf.context(backend=backend):
        array = stf.DeviceArray.from_host(
            np.array([1.5, 2.5], np.longdouble), stf.data_place.device(0)
        )
        with pytest.raises(BufferError):
            np.from_dlpack(array)


# API.md 3.12: stream handshake: "another negative int -> ValueError"; only the *wait*
# is skipped for empty arrays, not the validation.
def test_dlpack_negative_stream_on_empty_array_raises_value_error(backend):
    with stf.context(backend=backend):
        array = stf.DeviceArray(0, np.float32, stf.data_place.device(0))
        with pytest.raises(ValueError):
            array.__dlpack__(stream=-5)


# API.md 3.17: launch "values are captured at the call and kept until end()"; on the
# emulated backend a ctypes Structure argument is passed by reference, so a later
# change of the caller's object is what the kernel sees.
def test_emulated_kernel_captures_ctypes_structure_at_launch(backend):
    if backend != "emulated":
        pytest.skip("Python callables run on the emulated backend")

    class Params(ctypes.Structure):
        _fields_ = [("alpha", ctypes.c_double)]

    gate = threading.Event()
    seen = []
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        with ctx.cuda_kernel(ld.rw()) as k:
            k.launch(lambda x: gate.wait(5), 1, 1, (k.get_arg(0),))  # holds the stream
            params = Params(1.0)
            k.launch(lambda p: seen.append(p.alpha), 1, 1, (params,))
            params.alpha = 99.0  # after the call: must not reach the kernel
            gate.set()
    assert seen == [1.0]


# API.md 3.32 / 3.4: a fill value that does not fit is a ValueError before anything is
# submitted; uint8 <- 300 is refused ("cannot be stored ... without loss"), but int8 <- 1000
# and int32 <- 2**40 are silently wrapped (-24, 0) and written.
@pytest.mark.parametrize(
    "dtype, value", [(np.int8, 1000), (np.int32, 2**40), (np.int64, 2**63)]
)
def test_fill_value_out_of_range_for_signed_integers_is_refused(backend, dtype, value):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data_empty((3,), dtype)
        with pytest.raises(ValueError):
            init_logical_data(ctx, ld, value)
        with pytest.raises(ValueError):
            ctx.logical_data_full((3,), value, dtype=dtype)


def test_launch_refuses_a_string_grid(backend):
    # API.md 3.17: grid and block are an int or 1-3 values; a string is neither
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with ctx.cuda_kernel(ld.rw()) as k:
            with pytest.raises(TypeError, match="string"):
                k.launch(lambda a: None, "12", 1, (k.get_arg(0),))


def test_dlpack_export_checks_versioned():
    # API.md 3.13: a wrong argument type -> TypeError
    with pytest.raises(TypeError, match="versioned"):
        stf.dlpack_export(object(), 0, (1,), 2, 64, 0, versioned="yes")
