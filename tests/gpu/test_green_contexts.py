"""Green contexts on CUDA: a green place's kernels really run on its SMs only.

A kernel records ``%smid`` (the SM each block ran on) into the task's data; many
blocks that spin a little spread over every SM they may use, so the set of SMs seen
is the partition (at most its SM count, disjoint from another partition's), while the
same kernel on the whole device uses more SMs. Checked in stream and graph mode.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import stflow as stf
from stflow.errors import PlaceError

SMID_SOURCE = r"""
extern "C" __global__ void record_smid(int* out, unsigned long long cycles)
{
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    unsigned long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = (int)smid;
}
"""

BLOCKS = 4096


def _total_sms():
    from cuda.bindings import driver

    err, value = driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0
    )
    assert not err
    return int(value)


def _sms_used(cupy, place, use_graph=False):
    """The SMs the kernel's blocks ran on, in a task on ``place``."""
    from stflow.testing import cupy_array, cupy_stream

    kernel = cupy.RawKernel(SMID_SOURCE, "record_smid")
    out = np.full(BLOCKS, -1, dtype=np.int32)
    with stf.context(backend="cuda", use_graph=use_graph) as ctx:
        lout = ctx.logical_data(out)
        with ctx.task(place, lout.write()) as t:
            with cupy_stream(t.stream_ptr()):
                kernel(
                    (BLOCKS,), (64,), (cupy_array(t.get_arg_cai(0)), np.uint64(20_000))
                )
    assert (out >= 0).all()
    return set(out.tolist())


@pytest.fixture
def green(cuda_by_default):
    try:
        helper = stf.green_context_helper(8)
    except RuntimeError as exc:
        pytest.skip(f"green contexts unavailable here: {exc}")
    if len(helper) < 2:
        pytest.skip("fewer than two green contexts of 8 SMs")
    return helper


@pytest.mark.parametrize("use_graph", [False, True])
def test_green_place_kernels_stay_on_its_sms(green, cupy, use_graph):
    first = stf.exec_place.green_ctx(green.get_view(0))
    second = stf.exec_place.green_ctx(green.get_view(1))
    sms_first = _sms_used(cupy, first, use_graph)
    sms_second = _sms_used(cupy, second, use_graph)
    whole = _sms_used(cupy, stf.exec_place.device(0), use_graph)
    limit = first.backing_context._partition.sm_count
    assert 1 <= len(sms_first) <= limit, (sms_first, limit)
    assert 1 <= len(sms_second) <= limit
    assert not sms_first & sms_second
    assert len(whole) > limit


def test_green_places_function_limits_sms(cuda_by_default, cupy):
    try:
        places = stf.green_places(sms_per_place=8, n_places=2)
    except RuntimeError as exc:
        pytest.skip(f"green_places unavailable: {exc}")
    assert len(places) == 2
    used = [_sms_used(cupy, place) for place in places]
    assert not used[0] & used[1]
    assert all(len(sms) < _total_sms() for sms in used)
    for place in places:
        assert place.backing_context.is_green


def test_green_places_counts_and_errors(cuda_by_default):
    try:
        everything = stf.green_places(sms_per_place=8)
    except RuntimeError as exc:
        pytest.skip(f"green_places unavailable: {exc}")
    assert 1 <= len(everything) <= _total_sms() // 8
    with pytest.raises(RuntimeError, match="could not partition"):
        stf.green_places(sms_per_place=8, n_places=_total_sms())
    with pytest.raises(ValueError):
        stf.green_places(sms_per_place=0)
    with pytest.raises(PlaceError):
        stf.green_places(8, device_id=cuda_by_default.device_count)


def test_green_places_restore_the_current_context(cuda_by_default):
    from cuda.bindings import driver

    cuda_by_default.set_current_device(0)
    err, before = driver.cuCtxGetCurrent()
    try:
        stf.green_places(sms_per_place=8, n_places=1)
    except RuntimeError as exc:
        pytest.skip(f"green_places unavailable: {exc}")
    err, after = driver.cuCtxGetCurrent()
    assert int(after) == int(before)


def test_from_context_primary_context_is_a_device_place(cuda_by_default):
    from cuda.bindings import driver

    err, device = driver.cuDeviceGet(0)
    err, primary = driver.cuDevicePrimaryCtxRetain(device)
    try:
        place = stf.exec_place.from_context(int(primary))
        assert place.kind == "device" and place.device_id == 0
        assert place._stream_key == 0  # the device's own pools
        assert place.backing_context == int(primary)
        resources = stf.exec_place_resources()
        with place:
            assert place.pick_stream(resources) != 0
    finally:
        driver.cuDevicePrimaryCtxRelease(device)


def test_from_context_keeps_a_cuda_core_context_alive(green, cupy):
    ctx = green.get_view(0)._helper._contexts[0]
    ref = weakref.ref(ctx)
    place = stf.exec_place.from_context(ctx)
    del ctx
    assert ref() is not None
    assert place.backing_context is ref()
    X = np.arange(64.0)
    from stflow.testing import cupy_array, cupy_stream

    with stf.context(backend="cuda") as sctx:
        lX = sctx.logical_data(X)
        with sctx.task(place, lX.rw()) as t:
            with cupy_stream(t.stream_ptr()):
                cupy_array(t.get_arg_cai(0))[...] *= 2.0
    np.testing.assert_array_equal(X, np.arange(64.0) * 2.0)


def test_locality_domain_count_reads_the_driver(cuda_by_default):
    count = stf.locality_domain_count(0)
    assert count >= 1
    from cuda.bindings import driver

    attribute = getattr(
        driver.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT", None
    )
    if attribute is None:
        assert count == 1  # bindings older than CUDA 13.4
