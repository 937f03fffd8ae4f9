"""The reference's package surface on the CUDA backend (the rest is in
``tests/unit/test_parity_surface.py``): ``DeviceArray`` with the reference's keyword
and private finalizer name, and ``get_stream_pointer`` / ``context(stream=...)`` with
a ``cuda.core`` stream, as the reference's ``test_stream_utils.py`` does."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import stflow as stf
from stflow._stream_utils import get_stream_pointer


def test_device_array_size_keyword_on_a_device(cuda_by_default):
    array = stf.DeviceArray(size=16, dtype=np.float32, dplace=stf.data_place.device(0))
    interface = array.__cuda_array_interface__
    assert interface["shape"] == (16,) and interface["strides"] is None
    assert interface["data"] == (array.ptr, False) and array.ptr != 0
    values = np.arange(16, dtype=np.float32)
    array.copy_to_device(values)
    np.testing.assert_array_equal(array.copy_to_host(), values)
    finalizer = array._finalizer_ref
    assert finalizer.alive
    del array
    gc.collect()
    assert not finalizer.alive


def test_dlpack_consumer_keeps_the_allocation_alive(cuda_by_default, torch):
    array = stf.DeviceArray(size=256, dtype=np.float32, dplace=stf.data_place.device(0))
    array.copy_to_device(np.arange(256, dtype=np.float32))
    alive, finalizer = weakref.ref(array), array._finalizer_ref
    tensor = torch.from_dlpack(array)
    del array
    gc.collect()
    assert alive() is not None and finalizer.alive
    assert torch.equal(tensor.cpu(), torch.arange(256, dtype=torch.float32))
    del tensor
    gc.collect()
    assert alive() is None and not finalizer.alive


def test_a_cuda_core_stream_resolves_and_drives_a_context(cuda):
    core = pytest.importorskip("cuda.core")
    device = core.Device(0)
    device.set_current()
    stream = device.create_stream()
    try:
        assert get_stream_pointer(stream) == int(stream.handle) != 0
        ctx = stf.context(stream=stream, backend="cuda")
        data = ctx.logical_data(np.ones(8))
        with ctx.task(data.rw()) as t:
            assert int(t.stream_ptr()) != 0
        ctx.finalize()
    finally:
        stream.sync()
        stream.close()
