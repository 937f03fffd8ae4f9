"""DLPack import and export on maintained code, checked on the CPU.

CUDA producers are read by cuda.core's ``StridedMemoryView`` where it is installed and
suitable, else by stflow's reader: both readers run here on capsules over host memory
that claim a CUDA device (no driver is involved in reading a capsule). CPU producers go
through ``numpy.from_dlpack``; the emulated ``DeviceArray`` exports NumPy's capsule.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest

import stflow as stf
from stflow._interchange import dlpack as _dlpack
from stflow._interchange import sources as _sources
from stflow.errors import BackendUnavailableError, ShapeError


class _Owner:
    """Something weak-referenceable that owns exported host memory."""

    def __init__(self, values):
        self.values = values


class _Producer:
    """A DLPack-only producer handing out one prepared capsule, recording the calls."""

    def __init__(self, capsule, device=(2, 0)):
        self.capsule = capsule
        self.device = device
        self.calls = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version})
        return self.capsule

    def __dlpack_device__(self):
        return self.device


class _Stream:
    def __init__(self, handle=0x5EED):
        self.handle = handle


def _capsule_over(
    values,
    owner=None,
    device=(2, 0),
    byte_offset=0,
    readonly=False,
    versioned=True,
    shape=None,
):
    code, bits = _dlpack.dtype_code(values.dtype)
    return _dlpack.export_capsule(
        owner if owner is not None else values,
        values.ctypes.data,
        shape or values.shape,
        code,
        bits,
        device[0],
        device[1],
        versioned,
        readonly=readonly,
        byte_offset=byte_offset,
    )


@pytest.fixture(params=["stflow", "cuda.core"])
def reader(request, monkeypatch):
    """Which reader reads CUDA producers' capsules."""
    if request.param == "stflow":
        monkeypatch.setattr(_sources, "_view_type", None)
    else:
        view_type = _sources._find_strided_memory_view()
        if view_type is None:
            pytest.skip("no suitable cuda.core installed (pip install cuda-core)")
        monkeypatch.setattr(_sources, "_view_type", view_type)
    return request.param


# -- importing CUDA producers: pointer, layout, stream, lifetime ------------------------
def test_the_pointer_is_the_producers_own(reader):
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    producer = _Producer(_capsule_over(values, readonly=True))
    source = _sources._from_gpu_dlpack(producer, (2, 0), _Stream())
    assert [call["stream"] for call in producer.calls] == [0x5EED]
    assert tuple(producer.calls[0]["max_version"]) >= (1, 0)  # a versioned one asked
    assert source.ptr == values.ctypes.data and source.shape == (3, 4)
    assert source.dtype == np.int32 and source.readonly and source.strides is None
    assert source.interface == "dlpack" and source.dlpack_device == (2, 0)
    assert source.keepalive[0] is producer and source.ordered_on is not None
    if reader == "cuda.core":
        assert source.keepalive[1].exporting_obj is producer


def test_byte_offset_is_added_to_the_pointer(reader):
    values = np.arange(8.0)
    producer = _Producer(_capsule_over(values, byte_offset=24, shape=(5,)))
    source = _sources._from_gpu_dlpack(producer, (2, 0), _Stream())
    assert source.ptr == values.ctypes.data + 24 and source.shape == (5,)


def test_strided_producers_are_registered_in_place(reader):
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    transposed = _Producer(values.T.__dlpack__())
    source = _sources._from_gpu_dlpack(transposed, (2, 0), _Stream())
    assert source.ptr == values.ctypes.data
    assert source.shape == (4, 3) and source.strides == (4, 16)  # DLPack counts elements
    assert not source.readonly
    columns = _Producer(values[:, 1::2].__dlpack__())
    source = _sources._from_gpu_dlpack(columns, (2, 0), _Stream())
    assert source.ptr == values[:, 1:].ctypes.data and source.strides == (16, 8)
    row = _Producer(np.arange(6.0).reshape(6, 1)[:, :1].__dlpack__())
    assert _sources._from_gpu_dlpack(row, (2, 0), _Stream()).strides is None
    reversed_rows = _Producer(values[::-1].__dlpack__())
    with pytest.raises(ShapeError, match="stride -16 of axis 0"):
        _sources._from_gpu_dlpack(reversed_rows, (2, 0), _Stream())
    with pytest.raises(TypeError, match="CPU and CUDA"):
        _sources._from_gpu_dlpack(transposed, (10, 0), _Stream())


def test_stream_zero_is_asked_as_the_legacy_default_stream(reader):
    values = np.arange(3.0)
    producer = _Producer(_capsule_over(values))
    _sources._from_gpu_dlpack(producer, (2, 0), _Stream(0))
    assert [call["stream"] for call in producer.calls] == [1]  # DLPack forbids 0


def test_the_memory_owner_lives_as_long_as_the_source(reader):
    """The tensor is released when stflow drops the source, not before: the view (or
    the unconsumed capsule) holds it."""
    owner = _Owner(np.arange(4.0))
    alive = weakref.ref(owner)
    exports = len(_dlpack._exports)
    producer = _Producer(_capsule_over(owner.values, owner=owner))
    del owner
    source = _sources._from_gpu_dlpack(producer, (2, 0), _Stream())
    producer.capsule = None  # only the source refers to the tensor now
    gc.collect()
    assert alive() is not None and len(_dlpack._exports) == exports + 1
    values = np.frombuffer(
        (np.ctypeslib.as_ctypes_type(np.float64) * 4).from_address(source.ptr), np.float64
    )
    np.testing.assert_array_equal(values, np.arange(4.0))
    del source, values
    gc.collect()
    assert alive() is None and len(_dlpack._exports) == exports


def test_producers_without_max_version_are_asked_again(reader):
    values = np.arange(3.0)

    class Old:
        calls = 0

        def __dlpack__(self, stream=None):
            Old.calls += 1
            return values.__dlpack__()

        def __dlpack_device__(self):
            return (2, 0)

    source = _sources._from_gpu_dlpack(Old(), (2, 0), _Stream())
    assert source.ptr == values.ctypes.data and source.shape == (3,)
    assert Old.calls == 1  # the call with max_version failed before the producer


def test_refusals_say_what_to_pass(reader):
    values = np.zeros(4, np.uint16)
    bfloat16 = _Producer(
        _dlpack.export_capsule(values, values.ctypes.data, (4,), 4, 16, 2, 0, True)
    )
    try:
        import ml_dtypes  # noqa: F401 - with it, cuda.core reads bfloat16
    except ImportError:
        with pytest.raises(TypeError, match="convert"):
            _sources._from_gpu_dlpack(bfloat16, (2, 0), _Stream())


# -- which reader -----------------------------------------------------------------------
def _fake_cuda_core(monkeypatch, view_type):
    module = types.ModuleType("cuda.core.utils")
    module.StridedMemoryView = view_type
    monkeypatch.setitem(sys.modules, "cuda.core.utils", module)


def test_without_cuda_core_stflow_reads_the_capsule(monkeypatch):
    for name in ("cuda.core.utils", "cuda.core.experimental.utils"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    monkeypatch.setattr(_sources, "_view_type", _sources._UNKNOWN)
    assert _sources.strided_memory_view() is None
    values = np.arange(3.0)
    capsule = values.__dlpack__()
    source = _sources._from_gpu_dlpack(_Producer(capsule), (2, 0), _Stream())
    assert source.ptr == values.ctypes.data and source.keepalive[1] is capsule


def test_a_cuda_core_without_from_dlpack_is_not_used(monkeypatch):
    class ConstructorOnly:
        def __init__(self, obj=None, stream_ptr=None):
            raise AssertionError("the deprecated constructor is never called")

    _fake_cuda_core(monkeypatch, ConstructorOnly)
    assert _sources._find_strided_memory_view() is None


def test_a_cuda_core_that_drops_the_byte_offset_is_not_used(monkeypatch):
    class DropsOffset:
        @classmethod
        def from_dlpack(cls, obj, stream_ptr=None):
            tensor = _dlpack.read_capsule(obj.__dlpack__(stream=None))
            view = cls()
            view.ptr = tensor.ptr - 8  # what reading data alone gives
            return view

    _fake_cuda_core(monkeypatch, DropsOffset)
    assert _sources._find_strided_memory_view() is None

    class KeepsOffset(DropsOffset):
        @classmethod
        def from_dlpack(cls, obj, stream_ptr=None):
            view = cls()
            view.ptr = _dlpack.read_capsule(obj.__dlpack__(stream=None)).ptr
            return view

    _fake_cuda_core(monkeypatch, KeepsOffset)
    assert _sources._find_strided_memory_view() is KeepsOffset


# -- CUDA Array Interface v2 with DLPack: read through DLPack on GPU backends -----------
class _Both(_Producer):
    """A CUDA tensor exporting CAI of some version and DLPack (as PyTorch does)."""

    def __init__(self, values, version):
        super().__init__(values.__dlpack__())
        self.values = values
        self.version = version

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.values.shape,
            "typestr": self.values.dtype.str,
            "data": (self.values.ctypes.data, False),
            "version": self.version,
        }


def test_cai_version_2_with_dlpack_is_read_through_dlpack(reader):
    values = np.arange(6.0)
    streams = []

    def producer_stream(device):
        streams.append(device)
        return _Stream(0xABC)

    old = _Both(values, version=2)
    source = _sources.describe_buffer(old, producer_stream)
    assert source.interface == "dlpack" and streams == [(2, 0)]
    assert [call["stream"] for call in old.calls] == [0xABC]
    assert source.ptr == values.ctypes.data and source.ordered_on.handle == 0xABC
    new = _Both(values, version=3)  # v3 can name its stream: CAI
    source = _sources.describe_buffer(new, producer_stream)
    assert source.interface == "cai" and new.calls == []
    assert _sources.describe_buffer(old, None).interface == "cai"  # emulated


# -- CPU producers and the emulated export ----------------------------------------------
def test_torch_cpu_tensor_registered_in_place_is_written_back():
    torch = pytest.importorskip("torch")
    tensor = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    columns = tensor[:, 1::2]  # strided: registered in place
    with stf.context(backend="emulated") as ctx:
        whole = ctx.logical_data(torch.arange(5, dtype=torch.int32))
        part = ctx.logical_data(columns)
        assert part.shape == (3, 2) and part.dtype == np.float64
        with ctx.task(part.rw()) as t:
            t.run(lambda xp, a: xp.add(a, 100, out=a))
        with ctx.task(whole.rw()) as t:
            t.run(lambda xp, a: xp.multiply(a, 3, out=a))
        ctx.host_launch(part.rw(), fn=lambda a: a.__imul__(2))
    expected = np.arange(12.0).reshape(3, 4)
    expected[:, 1::2] = (expected[:, 1::2] + 100) * 2
    np.testing.assert_array_equal(tensor.numpy(), expected)


def test_emulated_device_array_exports_numpys_capsule():
    with stf.context(backend="emulated") as ctx:
        array = stf.DeviceArray.from_host(np.arange(6.0), stf.data_place.device(0))
        finalizer = array._finalizer
        exports = len(_dlpack._exports)
        view = np.from_dlpack(array)
        assert len(_dlpack._exports) == exports  # not stflow's exporter
        assert view.ctypes.data == array.ptr and view.flags.writeable
        view[2] = 42.0  # zero-copy both ways
        np.testing.assert_array_equal(array.copy_to_host(), [0, 1, 42, 3, 4, 5])
        del array
        gc.collect()
        assert finalizer.alive  # the consumer owns it
        del view
        gc.collect()
        assert not finalizer.alive
        ctx.finalize()


def test_emulated_device_array_refusals_come_before_numpy():
    with stf.context(backend="emulated"):
        array = stf.DeviceArray(
            size=2, dtype=np.dtype([("a", "<i4")]), dplace=stf.data_place.device(0)
        )
        with pytest.raises(BufferError, match="no DLPack equivalent"):
            array.__dlpack__()
        plain = stf.DeviceArray(size=2, dtype=np.float32, dplace=stf.data_place.host())
        with pytest.raises(BufferError, match="zero-copy"):
            plain.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="cannot be exported"):
            plain.__dlpack__(dl_device=(2, 0))


def test_cuda_producer_on_the_emulated_backend_names_the_backend():
    producer = _Producer(None)
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(BackendUnavailableError, match="CUDA backend"):
            ctx.logical_data(producer)
    assert producer.calls == []
