"""The backend contract's SM-partition methods (``backends/_base.py``), and places
that go through them only.

The emulated backend's methods are checked directly; then backends that answer
differently (more locality domains, contexts of their own) show that places ask
the backend, never which backend it is. The CUDA implementation is exercised by
``tests/backend/test_places_tier3.py`` and ``tests/gpu/test_green_contexts.py``.
"""

from __future__ import annotations

import types

import pytest

import stflow as stf
import stflow.backends as backends
from stflow.backends._base import Backend
from stflow.backends._emulated_green import (
    EMULATED_SM_COUNT,
    EMULATED_SM_GRANULARITY,
    EmulatedContext,
)
from stflow.backends.emulated import EmulatedBackend
from stflow.backends.null import NullBackend
from stflow.errors import BackendUnavailableError, PlaceError


@pytest.fixture
def emulated():
    return EmulatedBackend(devices=2, seed=0)


def test_emulated_split_device_gives_contexts_of_rounded_sizes(emulated):
    groups = emulated.split_device(1, 8, None, 0)
    assert [sms for _, sms in groups] == [8] * (EMULATED_SM_COUNT // 8)
    contexts = [ctx for ctx, _ in groups]
    assert all(isinstance(ctx, EmulatedContext) and ctx.is_green for ctx in contexts)
    assert {ctx.device_id for ctx in contexts} == {1}
    assert [ctx.sm_count for ctx in contexts] == [8] * 4
    assert len({ctx.handle for ctx in contexts}) == 4
    # Rounded up to the granularity; the co-scheduled count is a lower bound.
    assert [sms for _, sms in emulated.split_device(0, 3, 2, 0)] == [4, 4]
    assert [sms for _, sms in emulated.split_device(0, 1, None, 0)] == [
        EMULATED_SM_GRANULARITY
    ] * (EMULATED_SM_COUNT // EMULATED_SM_GRANULARITY)
    assert [sms for _, sms in emulated.split_device(0, 4, 3, 10)] == [10, 10, 10]
    with pytest.raises(
        RuntimeError, match="could not partition device 0 into 3 places of 16 SMs.*2 fit"
    ):
        emulated.split_device(0, 16, 3, 0)


def test_emulated_context_partition_finds_its_contexts(emulated):
    (ctx, _), (other, _) = emulated.split_device(1, 16, 2, 0)
    assert emulated.context_partition(ctx, ctx.handle) == (1, ctx)
    assert emulated.context_partition(None, other.handle) == (1, other)
    # A context is known to every virtual-device backend, like a CUcontext value.
    assert NullBackend(devices=2).context_partition(ctx, ctx.handle) == (1, ctx)
    with pytest.raises(
        PlaceError,
        match="0x1234 is not a context of the emulated backend.*backing_context",
    ):
        emulated.context_partition(0x1234, 0x1234)


def test_emulated_domains_and_enter_partition(emulated):
    assert [emulated.locality_domain_count(d) for d in range(2)] == [1, 1]
    ((ctx, _),) = emulated.split_device(0, 8, 1, 0)
    emulated.set_current_device(1)
    assert emulated.enter_partition(ctx) is None
    assert emulated.current_device() == 1  # entering changes no device


def test_contract_defaults_have_no_partitions():
    # What a backend that implements none of them answers (``_base.Backend``).
    bare = types.SimpleNamespace(name="bare")
    assert Backend.locality_domain_count(bare, 0) == 1
    with pytest.raises(
        BackendUnavailableError, match="bare backend cannot partition"
    ) as caught:
        Backend.split_device(bare, 0, 8, None, 0)
    assert isinstance(caught.value, RuntimeError)  # the reference's error type
    with pytest.raises(PlaceError, match="not a context of the bare backend"):
        Backend.context_partition(bare, object(), 0x10)
    assert Backend.enter_partition(bare, object()) is None


class _Native:
    """The backend-side object of a partition of :class:`_Partitioned`."""

    def __init__(self, device):
        self.device = device


class _Context:
    def __init__(self, handle, device, sm_count):
        self.handle, self.device, self.sm_count = handle, device, sm_count


class _Partitioned(NullBackend):
    """A backend with three locality domains per device and contexts of its own;
    it records what places ask of it."""

    name = "partitioned"

    def __init__(self):
        super().__init__(devices=2)
        self.contexts = {}
        self.entered = []
        self.stream_partitions = []

    def locality_domain_count(self, device):
        return 3

    def split_device(self, device, sm_count, n_places, coscheduled_sm_count):
        made = []
        for _ in range(n_places or 2):
            ctx = _Context(0x7000 + len(self.contexts), device, sm_count)
            self.contexts[ctx.handle] = (ctx, _Native(device))
            made.append((ctx, sm_count))
        return made

    def context_partition(self, context, handle):
        if handle == 0x7FFF:  # "the primary context of device 1"
            return 1, None
        ctx, native = self.contexts[handle]
        return ctx.device, native

    def enter_partition(self, native):
        self.entered.append(native)

    def create_stream(self, device, error_sink=None, partition=None):
        self.stream_partitions.append(partition)
        return super().create_stream(device, error_sink, partition)


@pytest.fixture
def partitioned(monkeypatch):
    backend = _Partitioned()
    monkeypatch.setattr(backends, "default_backend", lambda notify=True: backend)
    return backend


def test_locality_domains_come_from_the_backend(partitioned):
    assert stf.locality_domain_count(1) == 3
    grid = stf.exec_place_grid.locality_domains(1)
    assert grid.size == 3
    assert [repr(place) for place in (grid[0], grid[2])] == [
        "exec_place(locality_domain(dev=1,id=0), sm_split='backfill')",
        "exec_place(locality_domain(dev=1,id=2), sm_split='backfill')",
    ]
    assert grid[2].affine_data_place.kind == "locality_domain(dev=1,id=2)"
    assert stf.data_place.locality_domain(0, 2).device_id == 0
    with pytest.raises(
        PlaceError,
        match="locality domain 3 does not exist on device 0; "
        r"valid ordinals are 0\.\.2",
    ):
        stf.exec_place.locality_domain(0, 3)
    assert stf.exec_place_grid.machine("locality_domain").size == 6


def test_green_places_are_the_backends_contexts(partitioned):
    places = stf.green_places(6, n_places=2, device_id=1)
    assert [type(place.backing_context) for place in places] == [_Context] * 2
    natives = [partitioned.contexts[place.backing_context.handle][1] for place in places]
    assert places[0]._stream_key != places[1]._stream_key
    again = stf.exec_place.from_context(places[1].backing_context.handle, dev_id=1)
    assert again._stream_key == places[1]._stream_key  # one partition a context
    with pytest.raises(PlaceError, match="belongs to device 1, not 0"):
        stf.exec_place.from_context(places[0].backing_context, dev_id=0)
    primary = stf.exec_place.from_context(0x7FFF)
    assert primary._stream_key == 1 and repr(primary) == "exec_place(device=1)"
    # Entering a place enters its partition; streams are created in it.
    with places[1]:
        assert partitioned.current_device() == 1
    assert partitioned.entered == [natives[1]]
    with primary:
        pass
    assert partitioned.entered == [natives[1]]  # no partition to enter
    resources = stf.exec_place_resources()
    places[0].pick_stream(resources)
    made = [p for p in partitioned.stream_partitions if p is not None]
    assert made and {p.native for p in made} == {natives[0]}


def test_green_context_helper_partitions_are_the_backends(partitioned):
    helper = stf.green_context_helper(4, dev_id=0)
    assert len(helper) == 2
    views = [helper.get_view(i) for i in range(2)]
    natives = [partitioned.contexts[0x7000 + i][1] for i in range(2)]
    assert [view._partition.native for view in views] == natives
    assert [view._partition.sm_count for view in views] == [4, 4]
    place = stf.exec_place.green_ctx(views[1], use_green_ctx_data_place=True)
    assert repr(place) == "exec_place(green_ctx(dev=0, ctx=1))"
    assert place.affine_data_place.kind == "green_ctx(dev=0, ctx=1)"
    with place:
        pass
    assert partitioned.entered == [natives[1]]


def test_a_backend_without_partitions_says_so(monkeypatch):
    class Plain(NullBackend):
        name = "plain"
        split_device = Backend.split_device
        context_partition = Backend.context_partition

    plain = Plain(devices=1)
    monkeypatch.setattr(backends, "default_backend", lambda notify=True: plain)
    with pytest.raises(
        RuntimeError, match="green_context_helper: the plain backend cannot partition"
    ):
        stf.green_context_helper(8)
    with pytest.raises(BackendUnavailableError, match="plain backend cannot partition"):
        stf.green_places(8)
    with pytest.raises(PlaceError, match="not a context of the plain backend"):
        stf.exec_place.from_context(0x55)


def test_places_take_declared_protocols_only():
    # exec_place_grid.create converts what implements the reference's conversion
    # protocol; pick_stream takes StreamResources (exec_place_resources).
    from stflow._places.places import ExecPlaceConvertible, StreamResources

    class Foreign:
        def _as_stf_exec_place(self):
            return stf.exec_place.host()

    assert isinstance(Foreign(), ExecPlaceConvertible)
    grid = stf.exec_place_grid.create([Foreign(), stf.exec_place.host()])
    assert grid.size == 2 and grid[0].kind == "host"
    with pytest.raises(TypeError, match="places must be exec_place objects, got object"):
        stf.exec_place_grid.create([object()])
    resources = stf.exec_place_resources()
    assert isinstance(resources, StreamResources)
    assert int(stf.exec_place.host().pick_stream(resources)) != 0

    class Lookalike:  # a _pick_stream alone is not the protocol
        def _pick_stream(self, place, for_computation):
            return 1

    with pytest.raises(TypeError, match="pick_stream expects an exec_place_resources"):
        stf.exec_place.host().pick_stream(Lookalike())
