"""Tier 3 places other than grids, on every backend: locality domains, green contexts,
places from contexts and handles, ``exec_place_resources`` / ``pick_stream`` and
``async_resources`` (API.md 3.26 to 3.29).

The place factories resolve devices on the default backend, so each test makes the
backend under test the default (``make_default``). The emulated backend is run with
1, 2 and 4 virtual devices in subprocesses (``test_emulated_device_counts``).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from helpers.backends import make_default
from helpers.bodies import add_to, fill_with

import stflow as stf
from stflow.errors import ContextFinalizedError, PlaceError


@pytest.fixture
def default(backend, monkeypatch):
    """The backend under test, made the default one for the place factories."""
    make_default(monkeypatch, backend)
    return backend


def _stream_of(ctx, t):
    """The backend stream a task runs on."""
    return ctx._runtime.backend.stream_from_handle(int(t.stream_ptr()))


def _task_streams(ctx, place, ld, count=8):
    """The streams of ``count`` independent tasks on ``place`` (each reads ``ld``)."""
    streams = set()
    for _ in range(count):
        with ctx.task(place, ld.read()) as t:
            streams.add(_stream_of(ctx, t))
    return streams


# -- locality domains ----------------------------------------------------------------
def test_locality_domain_count_is_at_least_one_per_device(default):
    count = stf.context(backend=default)
    devices = count._runtime.device_count
    count.finalize()
    for device in range(devices):
        assert stf.locality_domain_count(device) >= 1
    assert stf.locality_domain_count() == stf.locality_domain_count(0)
    if default == "emulated":
        assert stf.locality_domain_count(0) == 1


@pytest.mark.parametrize(
    "bad, error",
    [(-1, PlaceError), (99, PlaceError), (1.0, TypeError), (True, TypeError)],
)
def test_locality_domain_count_checks_the_ordinal(default, bad, error):
    with pytest.raises(error):
        stf.locality_domain_count(bad)
    if error is PlaceError:
        with pytest.raises(ValueError, match=f"device.*{bad}"):
            stf.locality_domain_count(bad)


def test_locality_domain_places_name_their_domain(default):
    place = stf.exec_place.locality_domain(0, 0)
    assert place.kind == "device" and place.device_id == 0
    assert "locality_domain(dev=0,id=0)" in repr(place)
    memory = stf.data_place.locality_domain(0, 0)
    assert memory.kind == "locality_domain(dev=0,id=0)"
    assert memory.device_id == 0 and memory.allocation_is_stream_ordered
    assert repr(memory) == "data_place('locality_domain(dev=0,id=0)')"
    assert place.affine_data_place.kind == memory.kind
    for split in ("backfill", "aligned", "fine"):
        assert stf.exec_place.locality_domain(0, 0, sm_split=split).device_id == 0


def test_locality_domain_factories_check_at_once(default):
    domains = stf.locality_domain_count(0)
    with pytest.raises(PlaceError, match="locality domain"):
        stf.exec_place.locality_domain(0, domains)
    with pytest.raises(PlaceError, match="locality domain"):
        stf.data_place.locality_domain(0, domains)
    with pytest.raises(PlaceError):
        stf.exec_place.locality_domain(99, 0)
    with pytest.raises(PlaceError):
        stf.data_place.locality_domain(-1, 0)
    with pytest.raises(ValueError, match="sm_split"):
        stf.exec_place.locality_domain(0, 0, sm_split="warp")
    with pytest.raises(TypeError):
        stf.exec_place.locality_domain(0, "0")


def test_locality_domain_allocation_roundtrip(default):
    for domain in range(stf.locality_domain_count(0)):
        memory = stf.data_place.locality_domain(0, domain)
        ptr = memory.allocate(1 << 16)
        assert ptr != 0
        memory.deallocate(ptr, 1 << 16)


def test_tasks_on_each_locality_domain(default):
    from stflow._places.places import locality_domain_places

    places = locality_domain_places(0)
    assert len(places) == stf.locality_domain_count(0)
    X = np.zeros(64)
    with stf.context(backend=default) as ctx:
        lX = ctx.logical_data(X)
        for place in places:
            with ctx.task(place, lX.rw()) as t:
                add_to(t, 0, None, 1.0)
        memory = stf.data_place.locality_domain(0, 0)
        with ctx.task(stf.exec_place.device(0), lX.rw(memory)) as t:
            add_to(t, 0, None, 1.0)
    np.testing.assert_array_equal(X, np.full(64, len(places) + 1.0))


def test_one_domain_places_share_the_device_streams(default):
    """Without several domains a domain place is the whole device: same streams."""
    if stf.locality_domain_count(0) != 1:
        pytest.skip("the device reports several locality domains")
    with stf.context(backend=default) as ctx:
        lX = ctx.logical_data(np.zeros(4))
        domain = _task_streams(ctx, stf.exec_place.locality_domain(0, 0), lX)
        device = _task_streams(ctx, stf.exec_place.device(0), lX)
    assert domain & device


# -- green contexts ------------------------------------------------------------------
def _helper(sm_count=8):
    try:
        return stf.green_context_helper(sm_count)
    except RuntimeError as exc:  # a GPU without green-context support
        pytest.skip(f"green contexts unavailable: {exc}")


def test_green_context_helper_members(default):
    helper = _helper()
    count = helper.get_count()
    assert count >= 1 and len(helper) == count
    assert helper.device_id == 0
    assert repr(helper) == f"green_context_helper(device_id=0, count={count})"
    view = helper.get_view(count - 1)
    assert view.helper is helper and view.index == count - 1 and view.device_id == 0
    assert repr(view) == f"green_ctx_view(device_id=0, index={count - 1})"
    with pytest.raises(IndexError):
        helper.get_view(count)
    with pytest.raises(IndexError):
        helper.get_view(-1)
    with pytest.raises(TypeError):
        stf.green_ctx_view()
    if default == "emulated":  # 32 SMs per virtual device
        assert count == 4 and len(stf.green_context_helper(3)) == 8


def test_green_context_helper_errors(default):
    with pytest.raises(ValueError, match="sm_count must be a positive integer"):
        stf.green_context_helper(0)
    with pytest.raises(PlaceError):
        stf.green_context_helper(8, dev_id=99)
    with pytest.raises(TypeError):
        stf.green_context_helper(8.0)


def test_green_places_from_a_view(default):
    helper = _helper()
    view = helper.get_view(0)
    place = stf.exec_place.green_ctx(view)
    assert place.kind == "device" and place.device_id == 0
    assert place.affine_data_place.kind == "dev0"
    assert place.backing_context is view
    green = stf.exec_place.green_ctx(view, use_green_ctx_data_place=True)
    assert green.affine_data_place.kind == "green_ctx(dev=0, ctx=0)"
    memory = stf.data_place.green_ctx(view)
    assert memory.kind == "green_ctx(dev=0, ctx=0)" and memory.device_id == 0
    with pytest.raises(TypeError):
        stf.exec_place.green_ctx(None)
    with pytest.raises(TypeError):
        stf.data_place.green_ctx(helper)


@pytest.mark.parametrize("use_graph", [False, True])
def test_tasks_on_a_green_place_run_in_its_partition(default, use_graph):
    helper = _helper()
    if len(helper) < 2:
        pytest.skip("the device holds a single green context of 8 SMs")
    first = stf.exec_place.green_ctx(helper.get_view(0))
    second = stf.exec_place.green_ctx(helper.get_view(1), use_green_ctx_data_place=True)
    X = np.zeros(256)
    with stf.context(backend=default, use_graph=use_graph) as ctx:
        lX = ctx.logical_data(X)
        for place in (first, second, stf.exec_place.device(0)) * 2:
            with ctx.task(place, lX.rw()) as t:
                add_to(t, 0, None, 1.0)
                stream = _stream_of(ctx, t)
                expected = (
                    None
                    if place.backing_context is None
                    else place.backing_context._partition
                )
                assert stream.partition is expected
        a = _task_streams(ctx, first, lX, 4)
        b = _task_streams(ctx, second, lX, 4)
        plain = _task_streams(ctx, stf.exec_place.device(0), lX, 4)
    assert not (a & b) and not (a & plain) and not (b & plain)
    np.testing.assert_array_equal(X, np.full(256, 6.0))


def test_green_places_function(default):
    try:
        places = stf.green_places(sms_per_place=8, n_places=2)
    except RuntimeError as exc:
        pytest.skip(f"green_places unavailable: {exc}")
    assert len(places) == 2
    for place in places:
        assert place.kind == "device" and place.device_id == 0
        assert place.backing_context is not None
    assert places[0].backing_context is not places[1].backing_context
    everything = stf.green_places(sms_per_place=8)
    assert len(everything) >= 2
    X = np.zeros(16)
    with stf.context(backend=default) as ctx:
        lX = ctx.logical_data(X)
        for place in places:
            with ctx.task(place, lX.rw()) as t:
                add_to(t, 0, None, 2.0)
    np.testing.assert_array_equal(X, np.full(16, 4.0))


def test_green_places_errors(default):
    with pytest.raises(ValueError, match="sms_per_place must be positive"):
        stf.green_places(0)
    with pytest.raises(ValueError, match="n_places must be positive"):
        stf.green_places(8, n_places=0)
    with pytest.raises(PlaceError):
        stf.green_places(8, device_id=99)
    with pytest.raises(RuntimeError, match="could not partition"):
        stf.green_places(8, n_places=10_000)


def test_emulated_green_places_split_32_sms(monkeypatch):
    make_default(monkeypatch, "emulated")
    assert len(stf.green_places(8)) == 4
    assert len(stf.green_places(3)) == 8  # rounded up to 4 SMs
    assert len(stf.green_places(4, coscheduled_sm_count=8)) == 4
    assert stf.green_places(2, 3)[0].backing_context.sm_count == 2
    with pytest.raises(RuntimeError, match="32 SMs"):
        stf.green_places(16, n_places=3)


def test_partitions_follow_the_cuda_contexts_capability_not_the_name(monkeypatch):
    """A backend called "cuda" without ``cuda_contexts`` gets emulated green contexts
    and one locality domain per device: nothing asks the CUDA driver."""
    import stflow.backends as backends
    from stflow.backends._emulated_green import EmulatedContext
    from stflow.backends.null import NullBackend

    class Renamed(NullBackend):
        name = "cuda"

    renamed = Renamed(devices=2)
    assert not renamed.cuda_contexts
    monkeypatch.setattr(backends, "default_backend", lambda notify=True: renamed)
    assert stf.locality_domain_count(1) == 1
    assert len(stf.green_context_helper(8, dev_id=1)) == 4
    places = stf.green_places(8, n_places=2, device_id=1)
    assert [type(place.backing_context) for place in places] == [EmulatedContext] * 2
    again = stf.exec_place.from_context(places[0].backing_context)
    assert again._stream_key == places[0]._stream_key


def test_green_place_from_another_backend_is_refused(backend, monkeypatch):
    if backend != "emulated":
        make_default(monkeypatch, "emulated")
        place = stf.green_places(8, 1)[0]  # an emulated partition
        with stf.context(backend=backend) as ctx:
            lX = ctx.logical_data(np.zeros(4))
            with pytest.raises(PlaceError, match="emulated backend"):
                with ctx.task(place, lX.rw()):
                    pass
    else:
        make_default(monkeypatch, "emulated")
        place = stf.green_places(8, 1)[0]
        with stf.context(backend="emulated") as ctx:
            with pytest.raises(PlaceError, match="device 5"):
                with ctx.task(stf.exec_place.device(5), ctx.token().rw()):
                    pass
            with ctx.task(place, ctx.token().rw()):
                pass


# -- places from contexts and handles ------------------------------------------------
def test_from_context_rejects_bad_input(default):
    with pytest.raises(ValueError, match="NULL"):
        stf.exec_place.from_context(0)
    with pytest.raises(TypeError):
        stf.exec_place.from_context("not a context")
    with pytest.raises(TypeError):
        stf.exec_place.from_context(None)
    with pytest.raises(TypeError):
        stf.exec_place.from_context(object())


def test_from_context_of_a_green_context(default):
    try:
        green = stf.green_places(8, 1)[0]
    except RuntimeError as exc:
        pytest.skip(f"green contexts unavailable: {exc}")
    backing = green.backing_context
    place = stf.exec_place.from_context(backing)
    assert place.backing_context is backing
    assert place.kind == "device" and place.affine_data_place.device_id == 0
    assert place._stream_key == green._stream_key  # the same partition
    by_int = stf.exec_place.from_context(int(backing.handle), dev_id=0)
    assert by_int._stream_key == green._stream_key
    with pytest.raises(PlaceError, match="belongs to device 0"):
        stf.exec_place.from_context(backing, dev_id=1)
    with stf.context(backend=default) as ctx:
        lX = ctx.logical_data(np.zeros(8))
        with ctx.task(place, lX.rw()) as t:
            fill_with(t, 0, 3.0)
            assert _stream_of(ctx, t).partition is not None
        with place:
            pass
        assert ctx.wait(lX)[0] == 3.0


def test_emulated_from_context_refuses_unknown_handles(monkeypatch):
    make_default(monkeypatch, "emulated")
    with pytest.raises(PlaceError, match="not a context of the emulated backend"):
        stf.exec_place.from_context(0x1234)


def test_from_handle_roundtrip(default):
    places = [
        stf.exec_place.device(0),
        stf.exec_place.host(),
        stf.exec_place.locality_domain(0, 0),
    ]
    for place in places:
        assert stf.exec_place.from_handle(place._handle_int) is place
    memories = [
        stf.data_place.device(0),
        stf.data_place.host(),
        stf.data_place.managed(),
        stf.data_place.affine(),
        stf.data_place.locality_domain(0, 0),
    ]
    for memory in memories:
        handle = memory._handle_int
        assert handle == memory._handle_int != 0  # stable
        assert stf.data_place.from_handle(handle) is memory
    assert len({m._handle_int for m in memories} | {p._handle_int for p in places}) == 8


def test_from_handle_errors(default):
    with pytest.raises(ValueError, match="NULL"):
        stf.exec_place.from_handle(0)
    with pytest.raises(ValueError, match="NULL"):
        stf.data_place.from_handle(0)
    with pytest.raises(PlaceError, match="not the handle of a live exec_place"):
        stf.exec_place.from_handle(10**12)
    with pytest.raises(PlaceError):
        stf.data_place.from_handle(stf.exec_place.device(0)._handle_int)
    with pytest.raises(PlaceError):
        stf.exec_place.from_handle(stf.data_place.host()._handle_int)
    with pytest.raises(TypeError):
        stf.exec_place.from_handle("1")
    place = stf.exec_place.device(0)
    handle = place._handle_int
    del place
    gc.collect()
    with pytest.raises(PlaceError):  # the place is gone
        stf.exec_place.from_handle(handle)


# -- exec_place_resources and pick_stream --------------------------------------------
def test_pick_stream_from_standalone_resources(default):
    resources = stf.exec_place_resources()
    place = stf.exec_place.device(0)
    computing = {int(place.pick_stream(resources)) for _ in range(8)}
    moving = {int(place.pick_stream(resources, for_computation=False)) for _ in range(8)}
    stream = place.pick_stream(resources)
    assert isinstance(stream, stf.CudaStream) and stream != 0
    assert stream.__cuda_stream__() == (0, int(stream))
    assert len(computing) == 4 and len(moving) == 4 and not computing & moving
    other = {int(place.pick_stream(stf.exec_place_resources())) for _ in range(4)}
    assert not other & computing  # separate registries
    with place:
        assert int(place.pick_stream(resources)) in computing
    assert stf.exec_place.host().pick_stream(resources) != 0


def test_pick_stream_errors(default):
    place = stf.exec_place.device(0)
    with pytest.raises(TypeError, match="exec_place_resources"):
        place.pick_stream(None)
    with pytest.raises(TypeError):
        place.pick_stream(stf.async_resources())
    with pytest.raises(PlaceError):
        stf.exec_place.device(99).pick_stream(stf.exec_place_resources())


def test_pick_stream_of_a_green_place_is_in_its_partition(default):
    try:
        place = stf.green_places(8, 1)[0]
    except RuntimeError as exc:
        pytest.skip(f"green contexts unavailable: {exc}")
    resources = stf.exec_place_resources()
    handle = place.pick_stream(resources)
    from stflow.backends import get_backend

    stream = get_backend(default).stream_from_handle(int(handle))
    assert stream.partition is not None
    assert int(stf.exec_place.device(0).pick_stream(resources)) != int(handle)


def test_place_resources_lends_the_context_streams(default):
    with stf.context(backend=default) as ctx:
        lent = ctx.place_resources
        assert ctx.place_resources is lent
        place = stf.exec_place.device(0)
        lX = ctx.logical_data(np.zeros(4))
        tasks = {int(s.handle) for s in _task_streams(ctx, place, lX)}
        picked = {int(place.pick_stream(lent)) for _ in range(4)}
        assert picked <= tasks
        assert place.pick_stream(lent, for_computation=False) not in tasks
    with pytest.raises(ContextFinalizedError):
        ctx.place_resources
    with pytest.raises(ContextFinalizedError):
        place.pick_stream(lent)


def test_place_resources_in_graph_mode(default):
    with stf.context(backend=default, use_graph=True) as ctx:
        stream = stf.exec_place.device(0).pick_stream(ctx.place_resources)
        assert stream != 0


def test_resources_wait_for_queued_work_when_collected(default):
    if default != "emulated":
        pytest.skip("the emulated launch is the portable way to queue slow work")
    from stflow.emulated import launch

    done = threading.Event()

    def slow():
        time.sleep(0.2)
        done.set()

    resources = stf.exec_place_resources()
    launch(stf.exec_place.device(0).pick_stream(resources), slow)
    del resources
    gc.collect()
    assert done.is_set()


# -- async_resources -----------------------------------------------------------------
def test_async_resources_basics(default):
    resources = stf.async_resources()
    assert repr(resources) == f"async_resources(handle={resources._handle_int})"
    with pytest.raises(TypeError, match="async_resources"):
        stf.context(backend=default, handle=object())
    with pytest.raises(TypeError):
        stf.context(backend=default, handle=stf.exec_place_resources())


def test_async_resources_share_streams_across_contexts(default):
    resources = stf.async_resources()
    seen = []
    X = np.zeros(8)
    for _ in range(3):
        with stf.context(backend=default, handle=resources) as ctx:
            assert ctx._async_resources is resources
            lX = ctx.logical_data(X)
            seen.append(
                {
                    int(s.handle)
                    for s in _task_streams(ctx, stf.exec_place.device(0), lX, 4)
                }
            )
            with ctx.task(lX.rw()) as t:
                add_to(t, 0, None, 1.0)
    assert seen[0] & seen[1] and seen[1] & seen[2]
    np.testing.assert_array_equal(X, np.full(8, 3.0))


def test_async_resources_share_the_graph_cache(default):
    resources = stf.async_resources()
    X = np.zeros(8)
    updates = []
    for _ in range(3):
        with stf.context(backend=default, use_graph=True, handle=resources) as ctx:
            recorder = ctx._runtime.backend
            assert recorder.cache is resources._shared.graph_cache
            lX = ctx.logical_data(X)
            with ctx.task(lX.rw()) as t:
                add_to(t, 0, None, 1.0)
        updates.append(recorder.graph_updates)
    np.testing.assert_array_equal(X, np.full(8, 3.0))
    if default == "cuda":  # the same topology: later contexts update
        assert updates[1] + updates[2] >= 1


def test_async_resources_serve_one_backend(backend, monkeypatch):
    resources = stf.async_resources()
    with stf.context(backend=backend, handle=resources):
        pass
    with pytest.raises(ValueError, match="its own async_resources"):
        stf.context(backend="null", handle=resources)


def test_async_resources_collection_waits_for_caller_stream_work(default):
    """I-33: a caller-stream context does not block at finalize; collecting the
    resources must still wait for the work it left on their streams."""
    if default != "emulated":
        pytest.skip("the emulated launch is the portable way to queue slow work")
    from stflow.emulated import launch

    done = threading.Event()

    def slow(_):
        time.sleep(0.2)
        done.set()

    with stf.context(backend="emulated") as outer:
        token = outer.token()
        with outer.task(token.rw()) as t:
            resources = stf.async_resources()
            inner = stf.context(
                backend="emulated", stream=t.stream_ptr(), handle=resources
            )
            lY = inner.logical_data(np.zeros(4))
            with inner.task(stf.exec_place.device(0), lY.rw()) as u:
                launch(u.stream_ptr(), slow, u.get_arg_cai(0))
            inner.finalize()
            del inner, u
            del resources
            gc.collect()
            assert done.is_set()


# -- the emulated backend with 1, 2 and 4 virtual devices -----------------------------
_DEVICE_COUNT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import stflow as stf
    from stflow.errors import PlaceError
    n = {devices}
    assert [stf.locality_domain_count(d) for d in range(n)] == [1] * n
    try:
        stf.locality_domain_count(n)
    except PlaceError:
        pass
    else:
        raise AssertionError("device n accepted")
    last = n - 1
    green = stf.green_places(8, 2, device_id=last)
    helper = stf.green_context_helper(16, dev_id=last)
    places = green + [stf.exec_place.green_ctx(helper.get_view(1)),
                      stf.exec_place.locality_domain(last, 0),
                      stf.exec_place.from_context(green[0].backing_context)]
    assert all(p.device_id == last for p in places)
    X = np.zeros(32)
    with stf.context(backend="emulated") as ctx:
        assert ctx._runtime.device_count == n
        lX = ctx.logical_data(X)
        for place in places:
            with ctx.task(place, lX.rw()) as t:
                stf.emulated.launch(t.stream_ptr(), lambda a: a.__iadd__(1.0),
                                    t.get_arg_cai(0))
        resources = stf.exec_place_resources()
        assert places[0].pick_stream(resources) != places[1].pick_stream(resources)
    assert (X == len(places)).all(), X
    print("ok", n)
""")


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_emulated_device_counts(devices):
    import stflow.emulated  # noqa: F401 - the script uses stf.emulated

    code = "import stflow.emulated\n" + _DEVICE_COUNT_SCRIPT.format(devices=devices)
    env = dict(
        os.environ,
        STFLOW_EMULATED_DEVICES=str(devices),
        STFLOW_BACKEND="emulated",
        STFLOW_PURE_PYTHON="1",
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok {devices}"
