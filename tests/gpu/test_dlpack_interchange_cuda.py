"""DLPack import of PyTorch and CuPy arrays on the CUDA backend, through each reader
(cuda.core's StridedMemoryView, stflow's own): the registered pointer is the
producer's, strided producers are registered in place, the producer's pending work is
ordered before stflow's, results are written back into the producer's memory, and the
producer lives as long as stflow uses it."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from helpers.gpu import cupy_stream

import stflow as stf
from stflow._interchange import sources as _sources


class DLPackOnly:
    """Hides every interface of ``array`` but DLPack (forces the DLPack path)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.fixture(params=["stflow", "cuda.core"])
def reader(request, monkeypatch):
    if request.param == "stflow":
        monkeypatch.setattr(_sources, "_view_type", None)
    else:
        view_type = _sources._find_strided_memory_view()
        if view_type is None:
            pytest.skip("no suitable cuda.core installed")
        monkeypatch.setattr(_sources, "_view_type", view_type)
    return request.param


def _torch_view(torch, t, index=0):
    return torch.as_tensor(t.get_arg_cai(index), device="cuda")


def test_the_registered_pointer_is_the_producers(reader, torch, cupy, stream):
    base = torch.arange(40, dtype=torch.float64, device="cuda").reshape(4, 10)
    cases = [
        (base, base.data_ptr()),
        (base[1:], base[1:].data_ptr()),
        (base[:, 1::2], base[:, 1:].data_ptr()),
    ]
    for tensor, ptr in cases:
        for producer in (tensor, DLPackOnly(tensor)):
            source = _sources.describe_buffer(producer, lambda device: stream)
            assert source.interface == "dlpack" and source.ptr == ptr
            assert source.shape == tuple(tensor.shape)
            assert source.keepalive[0] is producer and source.ordered_on is stream
            if reader == "cuda.core":
                assert source.keepalive[1].exporting_obj is producer
    strided = _sources.describe_buffer(DLPackOnly(base[:, 1::2]), lambda device: stream)
    assert strided.strides == (80, 16)
    array = cupy.arange(12, dtype=cupy.float32)[3:]
    source = _sources.describe_buffer(DLPackOnly(array), lambda device: stream)
    assert source.ptr == array.data.ptr and source.shape == (9,)
    torch.cuda.synchronize()


def test_task_views_point_at_the_torch_tensor(reader, torch):
    base = torch.zeros(6, 8, dtype=torch.float32, device="cuda")
    with stf.context(backend="cuda") as ctx:
        whole = ctx.logical_data(DLPackOnly(base[:3]))
        columns = ctx.logical_data(DLPackOnly(base[3:, ::2]))
        with ctx.task(whole.rw(), columns.rw()) as t:
            assert t.get_arg_cai(0)["data"][0] == base.data_ptr()
            assert t.get_arg_cai(1)["data"][0] == base[3:].data_ptr()


@pytest.mark.parametrize("wrap", [False, True], ids=["tensor", "dlpack-only"])
def test_torch_tensor_registered_in_place_is_written_back(reader, torch, wrap):
    x = torch.arange(1000, dtype=torch.float64, device="cuda")
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(DLPackOnly(x) if wrap else x)
        with ctx.task(ld.rw()) as t:
            with torch.cuda.stream(torch.cuda.ExternalStream(int(t.stream_ptr()))):
                _torch_view(torch, t).add_(0.5)
        ctx.host_launch(ld.rw(), fn=lambda a: a.__imul__(2))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.cpu().numpy(), (np.arange(1000) + 0.5) * 2)


def test_strided_torch_tensor_is_written_back_in_place(reader, torch):
    base = torch.arange(60, dtype=torch.float64, device="cuda").reshape(6, 10)
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(DLPackOnly(base[1:5, 2::3]))
        assert ld.shape == (4, 3)
        with ctx.task(ld.rw()) as t:
            with torch.cuda.stream(torch.cuda.ExternalStream(int(t.stream_ptr()))):
                _torch_view(torch, t).add_(1000)
        ctx.host_launch(ld.rw(), fn=lambda a: a.__imul__(-1))
    torch.cuda.synchronize()
    expected = np.arange(60.0).reshape(6, 10)
    expected[1:5, 2::3] = -(expected[1:5, 2::3] + 1000)
    np.testing.assert_array_equal(base.cpu().numpy(), expected)


def test_cupy_array_registered_in_place_is_written_back(reader, cupy):
    x = cupy.arange(1000, dtype=cupy.float64)
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(DLPackOnly(x))
        with ctx.task(ld.rw()) as t:
            assert t.get_arg_cai(0)["data"][0] == x.data.ptr
            with cupy_stream(t.stream_ptr()):
                view = cupy.asarray(t.get_arg_cai(0))
                view += 0.5
        ctx.host_launch(ld.rw(), fn=lambda a: a.__imul__(2))
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(cupy.asnumpy(x), (np.arange(1000) + 0.5) * 2)


@pytest.mark.parametrize("wrap", [False, True], ids=["tensor", "dlpack-only"])
def test_torch_pending_work_is_ordered_before_the_task(reader, torch, wrap):
    """The tensor is filled on a torch stream after a long sleep; stflow's task must
    see the fill (the DLPack handshake makes stflow's stream wait for torch's)."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 20, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(200_000_000)  # GPU cycles, on the side stream
        x.fill_(7)
        with stf.context(backend="cuda") as ctx:
            ld = ctx.logical_data(DLPackOnly(x) if wrap else x)
            with ctx.task(ld.rw()) as t:
                with torch.cuda.stream(torch.cuda.ExternalStream(int(t.stream_ptr()))):
                    _torch_view(torch, t).mul_(2)
    torch.cuda.synchronize()
    assert bool((x == 14).all())


def test_the_producer_lives_while_stflow_uses_it(reader, torch):
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    same_memory = x.view(-1)  # another tensor object over the same memory
    alive = weakref.ref(x)
    ctx = stf.context(backend="cuda")
    ld = ctx.logical_data(DLPackOnly(x))
    del x
    gc.collect()
    assert alive() is not None  # stflow keeps it (view or capsule)
    with ctx.task(ld.rw()) as t:
        with torch.cuda.stream(torch.cuda.ExternalStream(int(t.stream_ptr()))):
            _torch_view(torch, t).add_(1)
    np.testing.assert_array_equal(ctx.wait(ld), np.arange(1.0, 257.0, dtype=np.float32))
    assert alive() is not None
    ctx.finalize()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(
        same_memory.cpu().numpy(), np.arange(1.0, 257.0, dtype=np.float32)
    )
    del ld, ctx, t, same_memory  # a view of x keeps x (its base) alive
    gc.collect()
    assert alive() is None  # released once stflow is done
