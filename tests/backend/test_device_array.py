"""DeviceArray and dlpack_export: allocation, copies, slices, the CUDA Array Interface /
array interface, DLPack export (capsules, ownership, stream handshake) and the
reading of producers' capsules."""

from __future__ import annotations

import ctypes
import gc
import threading
import warnings
import weakref

import numpy as np
import pytest
from helpers.backends import make_default

import stflow as stf
from stflow._interchange import dlpack as _dlpack
from stflow.backends import default_backend
from stflow.errors import BackendUnavailableError, PlaceError, ShapeError

_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
_USED = b"used_dltensor"  # must outlive the capsules renamed with it
_USED_VERSIONED = b"used_dltensor_versioned"


@pytest.fixture
def ctx(backend, monkeypatch):
    """A context on the backend, which is also the default backend: the one
    DeviceArray allocates on (it has no context)."""
    make_default(monkeypatch, backend)
    with stf.context(backend=backend) as context:
        yield context


def _places(backend):
    return [stf.data_place.device(0), stf.data_place.host(), stf.data_place.managed()]


class _Owner:
    """Something weak-referenceable to own exported memory."""

    def __init__(self, buffer=None):
        self.buffer = buffer


class _Producer:
    """Exposes a prepared capsule through the DLPack protocol (a DLPack-only object)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device
        self.calls = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version})
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def _sync_default(backend_object):
    stream = backend_object.stream_from_handle(0)
    backend_object.synchronize(backend_object.record(stream))


# -- construction ------------------------------------------------------------------
def test_properties_and_repr(ctx):
    array = stf.DeviceArray(10, np.float32, stf.data_place.device(0))
    assert isinstance(array, stf.DeviceArray)
    assert array.shape == (10,) and array.size == 10 and array.ndim == 1
    assert array.nbytes == 40 and array.dtype == np.float32 and len(array) == 10
    assert array.data_place.kind == "dev0" and array.ptr != 0
    assert (
        repr(array) == f"DeviceArray(size=10, dtype=float32, ptr=0x{array.ptr:x}, "
        "place=dev0)"
    )
    cube = stf.DeviceArray((2, 3, 4), np.int16, stf.data_place.host())
    assert cube.shape == (2, 3, 4) and cube.size == 24 and cube.nbytes == 48
    assert repr(cube).startswith("DeviceArray(shape=(2, 3, 4), dtype=int16")
    assert "place=host" in repr(cube)
    with pytest.raises(AttributeError):
        array.unknown_attribute = 1  # __slots__
    assert weakref.ref(array)() is array


def test_empty_array_allocates_nothing(ctx):
    array = stf.DeviceArray(0, np.float64, stf.data_place.device(0))
    assert array.ptr == 0 and array.nbytes == 0
    assert array.copy_to_host().shape == (0,)
    array.copy_to_device(np.empty(0))
    if ctx.backend == "emulated":  # NumPy imports CPU DLPack only
        assert np.from_dlpack(array).shape == (0,)


@pytest.mark.parametrize(
    "size, error",
    [
        (2.0, TypeError),
        (np.int64(3), TypeError),
        (True, TypeError),
        (None, TypeError),
        ("4", TypeError),
        ((2, 1.5), TypeError),
        (-1, ValueError),
        ((3, -2), ValueError),
    ],
)
def test_bad_sizes(ctx, size, error):
    with pytest.raises(error):
        stf.DeviceArray(size, np.float64, stf.data_place.device(0))


def test_bad_places_and_dtypes(ctx):
    with pytest.raises(TypeError, match="data_place"):
        stf.DeviceArray(4, np.float64, None)
    with pytest.raises(TypeError, match="data_place"):
        stf.DeviceArray(4, np.float64, "dev0")
    with pytest.raises(PlaceError, match="cannot allocate"):
        stf.DeviceArray(4, np.float64, stf.data_place.affine())
    with pytest.raises(TypeError):
        stf.DeviceArray(4, object, stf.data_place.device(0))
    with pytest.raises(TypeError):
        stf.DeviceArray(4, "not a dtype", stf.data_place.device(0))
    with pytest.raises(TypeError):
        stf.DeviceArray(4, np.float64, stf.data_place.device(0), stream="stream")
    with pytest.raises(TypeError):
        stf.DeviceArray()


# -- copies ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.float64, np.int8, np.uint64, np.complex128, np.bool_, np.float16],
)
def test_round_trip_on_every_place(ctx, backend, dtype):
    values = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    for place in _places(backend):
        array = stf.DeviceArray.from_host(values, place)
        assert array.shape == (4, 6) and array.dtype == dtype
        result = array.copy_to_host()
        assert result.dtype == dtype and result.shape == (4, 6)
        np.testing.assert_array_equal(result, values)


def test_structured_dtype_round_trip(ctx):
    record = np.dtype([("a", "<i4"), ("b", "<f8")])
    values = np.array([(1, 2.5), (3, 4.5), (5, 6.5)], dtype=record)
    array = stf.DeviceArray.from_host(values, stf.data_place.device(0))
    np.testing.assert_array_equal(array.copy_to_host(), values)


def test_from_host_copies_non_contiguous_input(ctx):
    source = np.arange(20.0).reshape(4, 5)[:, ::2]
    array = stf.DeviceArray.from_host(source, stf.data_place.device(0))
    np.testing.assert_array_equal(array.copy_to_host(), source)
    source[...] = -1  # a copy, not a view
    assert array.copy_to_host()[0, 0] == 0


def test_copy_to_device_casting_and_sizes(ctx):
    array = stf.DeviceArray(6, np.float64, stf.data_place.device(0))
    array.copy_to_device([1, 2, 3, 4, 5, 6])  # int -> float: same kind
    np.testing.assert_array_equal(array.copy_to_host(), np.arange(1.0, 7.0))
    array.copy_to_device(np.arange(6.0).reshape(2, 3))  # any shape, same byte count
    np.testing.assert_array_equal(array.copy_to_host(), np.arange(6.0))
    integers = stf.DeviceArray(6, np.int32, stf.data_place.host())
    with pytest.raises(TypeError, match="same_kind"):  # I-38: no silent truncation
        integers.copy_to_device(np.full(6, 1.5))
    with pytest.raises(ValueError, match="bytes"):
        array.copy_to_device(np.zeros(5))
    with pytest.raises(ValueError, match="bytes"):
        array.copy_to_device(np.zeros(7))


# -- slices ------------------------------------------------------------------------
def test_slices_are_views_keeping_the_root_alive(ctx):
    array = stf.DeviceArray.from_host(np.arange(10.0), stf.data_place.device(0))
    view = array[2:5]
    assert view.shape == (3,) and view.ptr == array.ptr + 16
    np.testing.assert_array_equal(view.copy_to_host(), [2.0, 3.0, 4.0])
    view.copy_to_device([-2.0, -3.0, -4.0])
    np.testing.assert_array_equal(array.copy_to_host()[:6], [0, 1, -2, -3, -4, 5])
    assert array[-3:].copy_to_host().tolist() == [7.0, 8.0, 9.0]
    assert array[7:3].shape == (0,) and array[7:3].ptr == 0
    nested = view[1:]
    assert nested.ptr == array.ptr + 24
    root = weakref.ref(array)
    del array
    gc.collect()
    assert root() is not None  # the slice keeps it
    np.testing.assert_array_equal(nested.copy_to_host(), [-3.0, -4.0])


def test_slices_of_nd_arrays_cut_the_first_axis(ctx):
    values = np.arange(12, dtype=np.int32).reshape(4, 3)
    array = stf.DeviceArray.from_host(values, stf.data_place.device(0))
    np.testing.assert_array_equal(array[1:3].copy_to_host(), values[1:3])
    assert array[1:3].ptr == array.ptr + 12


def test_bad_slices(ctx):
    array = stf.DeviceArray(10, np.float64, stf.data_place.device(0))
    with pytest.raises(IndexError, match="step"):
        array[::2]
    with pytest.raises(TypeError, match="slices"):
        array[3]
    with pytest.raises(TypeError, match="slices"):
        array[(slice(1, 2), slice(0, 1))]


# -- exported interfaces ------------------------------------------------------------
def test_array_interface_of_the_backend(ctx, backend):
    array = stf.DeviceArray.from_host(np.arange(6.0), stf.data_place.device(0))
    if backend == "emulated":
        assert not hasattr(array, "__cuda_array_interface__")
        interface = array.__array_interface__
        assert interface["data"] == (array.ptr, False)
        assert interface["shape"] == (6,) and interface["typestr"] == "<f8"
        alias = np.asarray(array)  # zero-copy, writable
        assert alias.ctypes.data == array.ptr
        alias[0] = 42.0
        assert array.copy_to_host()[0] == 42.0
    else:
        assert not hasattr(array, "__array_interface__")
        interface = array.__cuda_array_interface__
        assert interface["version"] == 3 and interface["data"] == (array.ptr, False)
        assert interface["strides"] is None and interface["stream"] is None
        record = stf.DeviceArray(2, [("a", "<i4"), ("b", "<f8")], stf.data_place.host())
        assert record.__cuda_array_interface__["descr"] == record.dtype.descr


def test_dlpack_device(ctx, backend):
    device, host, managed = (
        stf.DeviceArray(4, np.float32, place) for place in _places(backend)
    )
    if backend == "emulated":
        assert device.__dlpack_device__() == host.__dlpack_device__() == (1, 0)
        assert managed.__dlpack_device__() == (1, 0)
    else:  # I-36
        assert device.__dlpack_device__() == (2, 0)
        assert host.__dlpack_device__() == (3, 0)
        assert managed.__dlpack_device__()[0] == 13


def test_numpy_from_dlpack_is_zero_copy(ctx, backend):
    if backend != "emulated":
        pytest.skip("NumPy imports CPU DLPack tensors only")
    for dtype in (np.float64, np.int32, np.uint8, np.complex64, np.bool_):
        values = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
        array = stf.DeviceArray.from_host(values, stf.data_place.device(1))
        alias = np.from_dlpack(array)
        assert alias.dtype == dtype and alias.shape == (3, 4)
        assert alias.__array_interface__["data"][0] == array.ptr
        np.testing.assert_array_equal(alias, values)
        alias[0, 0] = 1
        assert array.copy_to_host()[0, 0] == 1


def test_versioned_or_legacy_capsule_by_max_version(ctx):
    array = stf.DeviceArray.from_host(np.arange(4.0), stf.data_place.device(0))
    assert _name(array.__dlpack__()) == b"dltensor"
    assert _name(array.__dlpack__(max_version=None)) == b"dltensor"
    assert _name(array.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert _name(array.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert _name(array.__dlpack__(max_version=(1, 3))) == b"dltensor_versioned"
    capsule = array.__dlpack__(max_version=(1, 2))
    managed = _dlpack.DLManagedTensorVersioned.from_address(
        _pointer(capsule, b"dltensor_versioned")
    )
    assert (managed.version.major, managed.version.minor) == (1, 0)
    assert managed.flags == 0 and managed.dl_tensor.data == array.ptr
    tensor = _dlpack.read_capsule(capsule)
    assert tensor.shape == (4,) and tensor.dtype == np.float64 and not tensor.readonly
    with pytest.raises(TypeError):
        array.__dlpack__(max_version="1.0")


def test_dlpack_export_checks(ctx, backend):
    array = stf.DeviceArray(4, np.float64, stf.data_place.device(0))
    with pytest.raises(BufferError, match="zero-copy"):
        array.__dlpack__(copy=True)
    array.__dlpack__(copy=False)
    wrong = (2, 0) if backend == "emulated" else (1, 0)
    with pytest.raises(BufferError, match="without a copy"):
        array.__dlpack__(dl_device=wrong)
    array.__dlpack__(dl_device=array.__dlpack_device__())
    record = stf.DeviceArray(4, [("a", "<i4"), ("b", "<f4")], stf.data_place.device(0))
    with pytest.raises(BufferError, match="no DLPack"):
        record.__dlpack__()
    with pytest.raises(ValueError, match="stream"):
        array.__dlpack__(stream=-2)
    with pytest.raises(TypeError, match="stream"):
        array.__dlpack__(stream="default")
    with pytest.raises(TypeError, match="stream"):
        array.__dlpack__(stream=True)
    array.__dlpack__(stream=-1)


def test_unconsumed_capsule_releases_the_array(ctx, backend):
    array = stf.DeviceArray.from_host(np.arange(8.0), stf.data_place.device(0))
    finalizer = array._finalizer
    capsule = array.__dlpack__(max_version=(1, 0))
    legacy = array.__dlpack__()
    assert (_name(capsule), _name(legacy)) == (b"dltensor_versioned", b"dltensor")
    alive = weakref.ref(array)
    exports = len(_dlpack._exports)
    ours = backend != "emulated"  # the emulated backend exports NumPy's capsule
    del array
    gc.collect()
    assert alive() is not None and finalizer.alive  # the capsules own it
    del capsule
    assert alive() is not None and finalizer.alive
    assert len(_dlpack._exports) == exports - ours
    del legacy
    assert alive() is None and not finalizer.alive  # released without gc
    assert len(_dlpack._exports) == exports - 2 * ours


def test_consumer_keeps_memory_alive(ctx, backend):
    if backend != "emulated":
        pytest.skip("NumPy imports CPU DLPack tensors only")
    array = stf.DeviceArray.from_host(np.arange(8.0), stf.data_place.device(0))
    finalizer = array._finalizer
    alive = weakref.ref(array)
    consumer = np.from_dlpack(array)
    del array
    gc.collect()
    assert alive() is not None and finalizer.alive
    np.testing.assert_array_equal(consumer, np.arange(8.0))
    del consumer
    gc.collect()
    assert alive() is None and not finalizer.alive


def test_memory_is_freed_exactly_once_on_the_allocation_stream(ctx, monkeypatch):
    native = default_backend(notify=False)
    freed = []
    original = native.free

    def spy(allocation, stream):
        freed.append((allocation.ptr, stream))
        original(allocation, stream)

    monkeypatch.setattr(native, "free", spy)
    stream = native.create_stream(0)
    try:
        array = stf.DeviceArray.from_host(
            np.arange(8.0), stf.data_place.device(0), stream=stf.CudaStream(stream.handle)
        )
        ptr = array.ptr
        view = array[2:4]
        capsule = view.__dlpack__()
        del array
        gc.collect()
        assert freed == []
        del view
        gc.collect()
        assert freed == []
        del capsule
        gc.collect()
        assert freed == [(ptr, stream)]
        gc.collect()
        assert len(freed) == 1
    finally:
        native.synchronize(native.record(stream))
        native.destroy_stream(stream)


def test_free_failure_becomes_a_runtime_warning(ctx, monkeypatch):
    native = default_backend(notify=False)
    array = stf.DeviceArray(16, np.float64, stf.data_place.device(0))
    original = native.free
    allocations = []

    def failing(allocation, stream):
        allocations.append(allocation)
        raise RuntimeError("injected driver failure")

    monkeypatch.setattr(native, "free", failing)
    with pytest.warns(RuntimeWarning, match="injected driver failure"):
        del array
        gc.collect()
    for allocation in allocations:  # release it after all
        original(allocation, None)


def test_stream_handshake_records_only_when_needed(ctx, backend):
    native = default_backend(notify=False)
    producer = native.create_stream(0)
    consumer = native.create_stream(0)
    try:
        array = stf.DeviceArray.from_host(
            np.arange(4.0),
            stf.data_place.device(0),
            stream=stf.CudaStream(producer.handle),
        )
        recorded = producer.recorded
        array.__dlpack__(stream=-1)  # no synchronisation
        array.__dlpack__(stream=producer.handle)  # the allocation stream itself
        assert producer.recorded == recorded
        array.__dlpack__(stream=consumer.handle)  # waits on an allocation event
        assert producer.recorded == recorded + 1
        array.__dlpack__(stream=None)  # legacy default stream
        assert producer.recorded == recorded + 2
        stf.DeviceArray(
            0,
            np.float64,
            stf.data_place.device(0),
            stream=stf.CudaStream(producer.handle),
        ).__dlpack__(stream=consumer.handle)  # empty: nothing to wait for
        assert producer.recorded == recorded + 2
        if backend == "cuda":
            assert array.__cuda_array_interface__["stream"] == producer.handle
    finally:
        for stream in (producer, consumer):
            native.synchronize(native.record(stream))
            native.destroy_stream(stream)


def test_device_array_as_logical_data(ctx):
    last = default_backend(notify=False).device_count - 1
    array = stf.DeviceArray.from_host(np.arange(6.0), stf.data_place.device(last))
    ld = ctx.logical_data(array, name="array")
    with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
        view = t.get_arg_cai(0)
        if ctx.backend == "emulated":
            np.asarray(view)[...] *= 3
        else:
            import cupy
            from helpers.gpu import cupy_stream

            with cupy_stream(t.stream_ptr()):
                cupy.asarray(view)[...] *= 3
    np.testing.assert_array_equal(ctx.wait(ld), 3 * np.arange(6.0))
    ctx.finalize()
    np.testing.assert_array_equal(array.copy_to_host(), 3 * np.arange(6.0))


def test_torch_from_dlpack(ctx, backend):
    torch = pytest.importorskip("torch")
    array = stf.DeviceArray.from_host(
        np.arange(5, dtype=np.int64), stf.data_place.device(0)
    )
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    finalizer = array._finalizer
    tensor = torch.from_dlpack(array)
    assert tensor.data_ptr() == array.ptr
    assert tensor.device.type == ("cpu" if backend == "emulated" else "cuda")
    assert tensor.tolist() == [0, 1, 2, 3, 4]
    del array
    gc.collect()
    assert finalizer.alive
    assert tensor.sum().item() == 10
    del tensor
    gc.collect()
    assert not finalizer.alive


# -- dlpack_export -----------------------------------------------------------------
def test_dlpack_export_builds_a_capsule_owned_by_the_consumer():
    values = np.arange(6, dtype=np.float32)
    owner = _Owner(values)
    alive = weakref.ref(owner)
    capsule = stf.dlpack_export(
        owner, values.ctypes.data, (2, 3), 2, 32, 0, device_type=1
    )
    del owner
    assert alive() is not None
    alias = np.from_dlpack(_Producer(capsule))
    assert _name(capsule) == b"used_dltensor"
    del capsule
    gc.collect()
    assert alive() is not None  # the consumer holds it now
    np.testing.assert_array_equal(alias, values.reshape(2, 3))
    del alias
    gc.collect()
    assert alive() is None


def test_dlpack_export_versioned_and_reference_defaults():
    values = np.arange(3, dtype=np.int16)
    capsule = stf.dlpack_export(values, values.ctypes.data, [3], 0, 16, 5)
    assert _name(capsule) == b"dltensor"
    tensor = _dlpack.read_capsule(capsule)
    assert tensor.device == (2, 5) and tensor.dtype == np.int16
    assert tensor.strides is None and tensor.ptr == values.ctypes.data
    versioned = stf.dlpack_export(
        values, values.ctypes.data, [3], 0, 16, 0, device_type=1, versioned=True
    )
    assert _name(versioned) == b"dltensor_versioned"
    np.testing.assert_array_equal(np.from_dlpack(_Producer(versioned)), values)


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ((1.0, (3,), 2, 32, 0), {}, TypeError),
        ((0, 3, 2, 32, 0), {}, TypeError),
        ((0, (3.0,), 2, 32, 0), {}, TypeError),
        ((0, (3,), "f", 32, 0), {}, TypeError),
        ((0, (3,), 2, 32, None), {}, TypeError),
        ((0, (3,), 2, 32, 0), {"device_type": "cuda"}, TypeError),
        ((0, (3,), 3, 32, 0), {}, ValueError),
        ((0, (3,), 9, 32, 0), {}, ValueError),
        ((0, (3,), 2, 12, 0), {}, ValueError),
        ((0, (3,), 2, 0, 0), {}, ValueError),
        ((0, (3,), 2, -8, 0), {}, ValueError),
        ((0, (-3,), 2, 32, 0), {}, ValueError),
        ((-16, (3,), 2, 32, 0), {}, ValueError),
    ],
)
def test_dlpack_export_argument_errors(args, kwargs, error):
    before = len(_dlpack._exports)
    with pytest.raises(error):
        stf.dlpack_export(None, *args, **kwargs)
    assert len(_dlpack._exports) == before


def test_renamed_capsule_does_not_run_the_deleter():
    """A consumer that took the tensor over (renamed the capsule) calls the deleter
    itself, here from another thread."""
    for versioned, used in ((False, _USED), (True, _USED_VERSIONED)):
        owner = _Owner()
        alive = weakref.ref(owner)
        capsule = stf.dlpack_export(owner, 0, (0,), 2, 64, 0, versioned=versioned)
        del owner
        address = _pointer(capsule, _name(capsule))
        assert _set_name(capsule, used) == 0
        del capsule
        gc.collect()
        assert alive() is not None  # renamed: the consumer owns it
        struct = (
            _dlpack.DLManagedTensorVersioned if versioned else _dlpack.DLManagedTensor
        ).from_address(address)
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(struct.deleter)
        worker = threading.Thread(target=deleter, args=(address,))
        worker.start()
        worker.join()
        gc.collect()
        assert alive() is None


# -- stflow's reader of producers' capsules (more in test_dlpack_interchange.py) -----
def test_read_capsule_strides_and_read_only_flag():
    values = np.arange(6.0).reshape(2, 3)
    compact = _dlpack.read_capsule(values.__dlpack__())
    assert compact.shape == (2, 3) and compact.strides in (None, (3, 1))
    assert compact.ptr == values.ctypes.data and compact.dtype == np.float64
    transposed = _dlpack.read_capsule(values.T.__dlpack__())
    assert transposed.strides == (1, 3) and transposed.shape == (3, 2)
    values.setflags(write=False)
    readonly = _dlpack.read_capsule(values.__dlpack__(max_version=(1, 0)))
    assert readonly.readonly and not compact.readonly
    with pytest.raises(TypeError, match="not a DLPack capsule"):
        _dlpack.read_capsule(object())


def test_gpu_producer_without_max_version_is_asked_again():
    values = np.arange(3.0)

    class Old:
        def __init__(self):
            self.calls = 0

        def __dlpack__(self, stream=None):
            self.calls += 1
            return values.__dlpack__()

    old = Old()
    assert _name(_dlpack.request_capsule(old, 7)) == b"dltensor"
    assert old.calls == 1


def test_cpu_dlpack_producers_keep_read_only_flag_and_strides():
    values = np.arange(6.0).reshape(2, 3)
    values.setflags(write=False)

    class DLPackOnly:
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(DLPackOnly(values))
        assert ld.readonly and ld.shape == (2, 3)  # from the versioned capsule's flags
        np.testing.assert_array_equal(ctx.wait(ld), values)
        source = np.arange(6.0).reshape(2, 3)
        transposed = ctx.logical_data(DLPackOnly(source.T))  # registered in place
        with ctx.task(transposed.rw()) as t:
            t.run(lambda xp, a: xp.multiply(a, 2, out=a))
        with pytest.raises(ShapeError, match="stride -24 of axis 0"):
            ctx.logical_data(DLPackOnly(np.arange(6.0).reshape(2, 3)[::-1]))
    np.testing.assert_array_equal(source, 2 * np.arange(6.0).reshape(2, 3))


def test_cuda_dlpack_producer_needs_the_cuda_backend():
    producer = _Producer(None, device=(2, 0))
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(BackendUnavailableError, match="CUDA backend"):
            ctx.logical_data(producer)
    assert producer.calls == []


def test_cuda_dlpack_producer_registers_on_the_cuda_backend(backend, monkeypatch):
    if backend != "cuda":
        pytest.skip("GPU memory")
    make_default(monkeypatch, backend)
    with stf.context(backend="cuda") as ctx:
        array = stf.DeviceArray.from_host(np.arange(8.0), stf.data_place.device(0))
        capsules = []

        class DLPackOnly:
            def __dlpack__(self, **kwargs):
                capsules.append(kwargs)
                return array.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return array.__dlpack_device__()

        ld = ctx.logical_data(DLPackOnly(), name="dlpack")
        assert capsules and capsules[0]["stream"] not in (None, -1)
        assert ld.shape == (8,) and ld.dtype == np.float64 and not ld.readonly
        np.testing.assert_array_equal(ctx.wait(ld), np.arange(8.0))
        with ctx.task(ld.rw()) as t:
            import cupy
            from helpers.gpu import cupy_stream

            with cupy_stream(t.stream_ptr()):
                cupy.asarray(t.get_arg_cai(0))[...] += 1
    np.testing.assert_array_equal(array.copy_to_host(), np.arange(1.0, 9.0))


def test_no_warnings_from_plain_use(ctx):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        array = stf.DeviceArray.from_host(np.ones(3), stf.data_place.host())
        capsule = array.__dlpack__()
        del array, capsule
        gc.collect()
    _sync_default(default_backend(notify=False))
