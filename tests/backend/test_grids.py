"""Tier 3 grids: exec_place_grid, tasks over a grid (one stream per member),
composite data places (data spread over a grid by a mapper) and replicated places."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stflow as stf
from stflow.errors import AccessModeError, PlaceError, ScopeError

N = 1000


def _devices(backend: str) -> int:
    from stflow.backends import get_backend

    return get_backend(backend).device_count


def _grid_of(backend: str, size: int, **kwargs):
    """A grid of ``size`` places over the backend's devices (repeating them)."""
    count = _devices(backend)
    places = [stf.exec_place.device(i % count) for i in range(size)]
    return stf.exec_place_grid.create(places, **kwargs)


def _on_stream(t, stream, fn, *indices):
    """``fn(xp, *views)`` in stream order on ``stream`` (a raw handle)."""
    views = [t.get_arg_cai(i) for i in indices]
    if t._runtime.backend.name == "emulated":
        from stflow.emulated import launch

        launch(stream, lambda *arrays: fn(np, *arrays), *views)
        return
    import cupy

    from stflow.testing import cupy_array, cupy_stream

    with cupy_stream(stream):
        fn(cupy, *[cupy_array(v) for v in views])


def first_half(coords, dims, grid):
    """Member 0 owns the first half of the bytes, member 1 the rest."""
    return (0 if coords[0] < dims[0] // 2 else 1, 0, 0, 0)


# -- places ----------------------------------------------------------------------------


def test_grids_are_built_from_devices_or_places_with_c_order_dims():
    grid = stf.exec_place_grid.from_devices([0, 0])
    assert isinstance(grid, stf.exec_place_grid) and isinstance(grid, stf.exec_place)
    assert (grid.size, grid.dims, grid.grid_rank, grid.kind) == (2, (2,), 1, "device")
    assert grid.get_place(1).device_id == 0 and grid[0].device_id == 0
    single = stf.exec_place_grid.from_devices([0])
    assert not isinstance(single, stf.exec_place_grid) and single.dims == (1,)
    square = stf.exec_place_grid.create([stf.exec_place.device(0)] * 4, grid_dims=(2, 2))
    assert (square.dims, square.size, square.grid_rank) == ((2, 2), 4, 2)
    cube = stf.exec_place_grid.create([stf.exec_place.host()] * 24, grid_dims=(2, 3, 4))
    assert cube.collapse_axes(0, 1).dims == (6, 4)
    assert cube.collapse_axes(1, 2).dims == (2, 12)
    assert cube.collapse_axes(0, 2).dims == (24,)
    assert cube.reshape((4, 6)).dims == (4, 6) and cube.reshape(24).grid_rank == 1
    assert cube.reshape((4, 6))[5] is cube[5]
    assert stf.exec_place.device(0).reshape((1, 1)).dims == (1, 1)
    nested = stf.exec_place_grid.create([square, stf.exec_place.device(0)])
    assert nested.size == 5


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: stf.exec_place_grid.from_devices([]), ValueError, "at least one device"),
        (lambda: stf.exec_place_grid.from_devices([0] * 65), ValueError, "at most 64"),
        (lambda: stf.exec_place_grid.from_devices([0, -1]), PlaceError, "-1"),
        (lambda: stf.exec_place_grid.from_devices(3), TypeError, "sequence"),
        (lambda: stf.exec_place_grid.create([]), ValueError, "at least one place"),
        (lambda: stf.exec_place_grid.create([0, 1]), TypeError, "exec_place"),
        (
            lambda: stf.exec_place_grid.create([stf.exec_place.host()] * 3, (2, 2)),
            ValueError,
            "hold 4 places",
        ),
        (
            lambda: stf.exec_place_grid.create([stf.exec_place.host()] * 2, (2, True)),
            TypeError,
            "Python ints",
        ),
        (
            lambda: stf.exec_place_grid.create(
                [stf.exec_place.host()] * 2, (1, 1, 1, 1, 2)
            ),
            ValueError,
            "1 to 4 axes",
        ),
        (
            lambda: stf.exec_place_grid.create([stf.exec_place.host()] * 2, (2, 0)),
            ValueError,
            "positive",
        ),
        (
            lambda: stf.exec_place_grid.from_devices([0, 0]).reshape((3,)),
            ValueError,
            "hold 3",
        ),
        # the reference's phrase, so pytest.raises(match=...) written for it still works
        (
            lambda: stf.exec_place_grid.from_devices([0, 0]).reshape((3,)),
            ValueError,
            "cannot reshape",
        ),
        (
            lambda: stf.exec_place_grid.from_devices([0, 0]).collapse_axes(0, 1),
            ValueError,
            "first <= last",
        ),
        (lambda: stf.exec_place_grid.from_devices([0, 0])[2], IndexError, "out of range"),
        (lambda: stf.exec_place_grid.from_devices([0, 0])[-1], IndexError, "negative"),
        (lambda: stf.exec_place_grid.machine("socket"), ValueError, "granularity"),
        (
            lambda: stf.data_place.composite(stf.exec_place_grid.from_devices([0, 0]), 3),
            TypeError,
            "callable",
        ),
        (lambda: stf.data_place.composite(None, first_half), TypeError, "exec_place"),
        (lambda: stf.data_place.replicated(5), TypeError, "exec_place"),
        (lambda: stf.exec_place_grid(), TypeError, "from_devices"),
    ],
)
def test_bad_grid_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_layout_places_report_their_kind_and_refuse_raw_allocation():
    grid = stf.exec_place_grid.from_devices([0, 0])
    composite = stf.data_place.composite(grid, first_half)
    assert (composite.kind, composite.device_id) == ("composite", -5)
    assert repr(composite) == "data_place('composite')"
    assert stf.data_place.replicated().kind == "replicated(deferred)"
    assert stf.data_place.replicated(grid).kind == "replicated"
    assert stf.data_place.replicated(grid).device_id == -5
    with pytest.raises(PlaceError, match="cannot allocate"):
        composite.allocate(16)


def test_machine_has_one_place_per_device_and_a_blocked_affine_place(
    backend, monkeypatch
):
    from helpers.backends import make_default

    make_default(monkeypatch, backend)
    machine = stf.exec_place_grid.machine()
    count = _devices(backend)
    assert machine.size == count
    if count > 1:
        assert machine.affine_data_place.kind == "composite"
        X = np.arange(N, dtype=np.float64)
        with stf.context(backend=backend) as ctx:
            x = ctx.logical_data(X)
            with ctx.task(machine, x.rw()) as t:
                for member in range(count):
                    _on_stream(
                        t,
                        t.get_stream_at_index(member),
                        lambda xp, a, m=member: a.__setitem__(
                            slice(m * N // count, (m + 1) * N // count),
                            a[m * N // count : (m + 1) * N // count] * 2,
                        ),
                        0,
                    )
        np.testing.assert_array_equal(X, np.arange(N) * 2.0)


# -- tasks on grids ---------------------------------------------------------------------


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
def test_each_member_writes_its_part_of_a_composite_array(backend, use_graph):
    """Members write disjoint halves on their own streams; a scalar task and the
    user's array then see the whole result."""
    X = np.arange(N, dtype=np.float64)
    grid = _grid_of(backend, 2, mapper=first_half)
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        x = ctx.logical_data(X)
        with ctx.task(grid, x.rw()) as t:
            assert t.get_grid_dims() == (2,)
            streams = t.get_stream_ptrs()
            assert len(streams) == 2 and all(s != 0 for s in streams)
            assert streams == [t.get_stream_at_index(0), t.get_stream_at_index(1)]
            if not use_graph:
                assert streams[0] != streams[1]  # one stream per member
            _on_stream(
                t,
                streams[0],
                lambda xp, a: a.__setitem__(slice(0, N // 2), a[: N // 2] + 1000),
                0,
            )
            _on_stream(
                t,
                streams[1],
                lambda xp, a: a.__setitem__(slice(N // 2, N), -a[N // 2 :]),
                0,
            )
        with ctx.task(x.rw()) as t:  # a scalar task reads it back
            _on_stream(t, t.stream_ptr(), lambda xp, a: a.__imul__(2), 0)
    expected = np.arange(N, dtype=np.float64)
    expected[: N // 2] += 1000
    expected[N // 2 :] *= -1
    np.testing.assert_array_equal(X, expected * 2)


def test_grid_task_stream_accessors_check_their_window_and_index(backend):
    grid = _grid_of(backend, 3)
    grid.set_affine_data_place(stf.data_place.device(0))
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(grid, x.rw()) as t:
            for bad in (3, -1):
                with pytest.raises(IndexError, match="3 places|negative"):
                    t.get_stream_at_index(bad)
            with pytest.raises(TypeError, match="int"):
                t.get_stream_at_index("0")
            assert t.get_stream_at_index(place_index=2) == t.get_stream_ptrs()[2]
        with ctx.task(stf.exec_place.device(0), x.rw()) as t:
            assert t.get_grid_dims() is None
            assert len(t.get_stream_ptrs()) == 1
            with pytest.raises(ScopeError, match="grid"):
                t.get_stream_at_index(0)
        with pytest.raises(ScopeError):
            t.get_grid_dims()


def test_a_grid_without_an_affine_place_names_the_three_remedies(backend):
    grid = _grid_of(backend, 2)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.ones(8))
        with pytest.raises(PlaceError, match="mapper=.*machine.*set_affine_data_place"):
            with ctx.task(grid, x.rw()):
                pass
        with ctx.task(grid, x.rw(stf.data_place.device(0))) as t:  # explicit: fine
            _on_stream(t, t.get_stream_at_index(1), lambda xp, a: a.__iadd__(1), 0)
        assert ctx.wait(x)[0] == 2.0
        with ctx.task(grid, ctx.token().rw()):  # tokens need none
            pass


def test_set_exec_place_takes_the_reference_keyword(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        t = ctx.task(x.rw())
        t.set_exec_place(exec_p=_grid_of(backend, 2, mapper=first_half))
        with t:
            assert t.get_grid_dims() == (2,)


# -- composite places -------------------------------------------------------------------


def test_the_mapper_decides_where_each_chunk_lives(backend):
    """Every chunk is mapped in the memory of the member the mapper names (the
    emulated backend registers chunks per virtual device; CUDA: see tests/gpu)."""
    if backend != "emulated":
        pytest.skip("chunk placement on CUDA is checked in tests/gpu")
    from stflow.backends import get_backend
    from stflow.backends.emulated import COMPOSITE_CHUNK

    count = _devices(backend)
    grid = _grid_of(backend, count, mapper=stf.partitions.cyclic(COMPOSITE_CHUNK))
    X = np.arange(4096, dtype=np.uint8)
    calls = []
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        with ctx.task(grid, x.read()) as t:
            ptr = t.get_arg_cai(0).ptr
        ctx.wait(x)
        located = [
            get_backend(backend).locate(ptr + chunk * COMPOSITE_CHUNK)
            for chunk in range(4096 // COMPOSITE_CHUNK)
        ]
    assert located == [chunk % count for chunk in range(4096 // COMPOSITE_CHUNK)]
    del calls


def test_the_mapper_sees_the_reference_contract(backend):
    seen = []

    def recording(coords, dims, grid):
        seen.append((coords, dims, grid))
        return 0

    grid = _grid_of(backend, 4, grid_dims=(2, 2), mapper=recording)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros((10, 20), dtype=np.float32))
        with ctx.task(grid, x.rw()):
            pass
    assert seen
    coords, dims, grid_dims = seen[0]
    assert coords == (0, 0, 0, 0) and dims == (800, 1, 1, 1) and grid_dims == (2, 2, 1, 1)
    assert all(len(c) == 4 and c[1:] == (0, 0, 0) for c, _, _ in seen)


@pytest.mark.parametrize(
    "mapper, error, match",
    [
        (
            lambda c, d, g: (_ for _ in ()).throw(RuntimeError("mapper boom")),
            RuntimeError,
            "mapper boom",
        ),
        (lambda c, d, g: g[0] + 5, ValueError, "out-of-range"),
        (lambda c, d, g: (0, 1, 0, 0), ValueError, "out-of-range"),
        (lambda c, d, g: -1, ValueError, "out-of-range"),
        (lambda c, d, g: "zero", ValueError, "grid coordinate"),
        (lambda c, d, g: (0, 0, 0, 0, 0), ValueError, "1 to 4"),
    ],
)
def test_a_bad_mapper_fails_the_start_and_leaves_the_context_usable(
    backend, mapper, error, match
):
    X = np.arange(64, dtype=np.float32)
    grid = _grid_of(backend, 2, mapper=mapper)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        with pytest.raises(error, match=match):
            with ctx.task(grid, x.rw()):
                pytest.fail("the body must not run")
        with ctx.task(x.rw()) as t:
            _on_stream(t, t.stream_ptr(), lambda xp, a: a.__iadd__(1), 0)
    np.testing.assert_array_equal(X, np.arange(64) + 1.0)


def test_composite_data_round_trips_through_host_callbacks_and_scalar_tasks(backend):
    grid = _grid_of(backend, 2)
    composite = stf.data_place.composite(grid, stf.partitions.blocked())
    X = np.arange(N, dtype=np.float64)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        with ctx.task(stf.exec_place.device(0), x.rw(composite)) as t:  # a scalar task
            _on_stream(t, t.stream_ptr(), lambda xp, a: a.__imul__(3), 0)
        sums = []
        ctx.host_launch(x.read(), fn=lambda a: sums.append(float(a.sum())))
        ctx.finalize()
    assert sums == [3.0 * N * (N - 1) / 2]
    np.testing.assert_array_equal(X, np.arange(N) * 3.0)


def test_reductions_into_composite_data_are_combined(backend):
    grid = _grid_of(backend, 2, mapper=stf.partitions.blocked())
    X = np.full(N, 1.0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        for _ in range(3):
            with ctx.task(grid, x.reduce("sum")) as t:
                _on_stream(t, t.stream_ptr(), lambda xp, a: a.__iadd__(2.0), 0)
    np.testing.assert_array_equal(X, np.full(N, 7.0))


# -- replicated places -----------------------------------------------------------------


def test_replicated_reads_copy_the_data_to_every_member(backend):
    count = _devices(backend)
    grid = _grid_of(backend, 2 * count, mapper=stf.partitions.blocked())
    A = np.arange(N, dtype=np.float64)
    Y = np.zeros(N)
    with stf.context(backend=backend) as ctx:
        a = ctx.logical_data(A)
        y = ctx.logical_data(Y)
        stats = ctx.statistics() if hasattr(ctx, "statistics") else None
        for place in (stf.data_place.replicated(), stf.data_place.replicated(grid)):
            with ctx.task(grid, a.read(place), y.rw()) as t:
                copies = {t.get_member_arg_cai(0, m).ptr for m in range(grid.size)}
                assert len(copies) == count  # one copy per device
                assert t.get_member_arg_cai(0, 0).ptr == t.get_arg_cai(0).ptr
                assert t.get_member_arg_cai(1, 1).ptr == t.get_arg_cai(1).ptr
                with pytest.raises(IndexError, match="out of range"):
                    t.get_member_arg_cai(0, grid.size)
                member = grid.size - 1
                views = [t.get_member_arg_cai(0, member), t.get_arg_cai(1)]
                if backend == "emulated":
                    from stflow.backends import get_backend

                    assert (
                        get_backend(backend).locate(views[0].ptr)
                        == grid[member].device_id
                    )
                stream = t.get_stream_at_index(member)
                if backend == "emulated":
                    from stflow.emulated import launch

                    launch(stream, lambda src, dst: dst.__iadd__(src), *views)
                else:
                    import cupy

                    from stflow.testing import cupy_array, cupy_stream

                    with cupy.cuda.Device(grid[member].device_id), cupy_stream(stream):
                        cupy_array(views[1])[...] += cupy_array(views[0])
        with ctx.task(stf.exec_place.device(0), a.read(stf.data_place.replicated())):
            pass  # deferred on a single place: affine
        del stats
    np.testing.assert_array_equal(Y, 2 * A)


def test_writes_to_a_replicated_place_are_refused(backend):
    grid = _grid_of(backend, 2)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        for mode in ("rw", "write"):
            with pytest.raises(AccessModeError, match="replicated"):
                getattr(x, mode)(stf.data_place.replicated(grid))
        with pytest.raises(AccessModeError, match="replicated"):
            x.reduce("sum", stf.data_place.replicated())
        grid.set_affine_data_place(stf.data_place.replicated(grid))
        with pytest.raises(AccessModeError, match="read-only copies"):
            with ctx.task(grid, x.rw()):
                pass


# -- 1, 2 and 4 virtual devices ---------------------------------------------------------

_SCRIPT = textwrap.dedent("""
    import numpy as np
    import stflow as stf
    from stflow.backends import get_backend
    from stflow.backends.emulated import COMPOSITE_CHUNK
    count = get_backend("emulated").device_count
    grid = stf.exec_place_grid.machine()
    assert grid.size == count, (grid, count)
    wide = stf.exec_place_grid.create([stf.exec_place.device(i % count)
                                       for i in range(4)], (2, 2),
                                      mapper=stf.partitions.cyclic(COMPOSITE_CHUNK))
    X = np.arange(2048, dtype=np.float64)
    with stf.context(backend="emulated") as ctx:
        x = ctx.logical_data(X)
        with ctx.task(wide, x.rw()) as t:
            ptr = t.get_arg_cai(0).ptr
            np.asarray(t.get_arg_cai(0))[:] *= 2
        ctx.wait(x)
        seen = {get_backend("emulated").locate(ptr + k * COMPOSITE_CHUNK)
                for k in range(X.nbytes // COMPOSITE_CHUNK)}
        with ctx.task(grid, x.read(stf.data_place.replicated())) as t:
            assert len(t.get_stream_ptrs()) == count
    assert seen == set(range(count)), seen
    assert (X == np.arange(2048) * 2).all()
    print("ok", count)
""")


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_grids_over_1_2_and_4_virtual_devices(devices):
    environment = dict(
        os.environ, STFLOW_EMULATED_DEVICES=str(devices), STFLOW_BACKEND="emulated"
    )
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", str(devices)]


def test_the_c_order_form_of_the_mapper_contract_with_data_rank(backend):
    """``data_rank=`` (later reference releases): element coordinates in C order,
    the data's shape at that rank, C-order grid dims; the result in C order."""
    seen = []

    def halves(coords, shape, grid_dims):
        seen.append((coords, shape, grid_dims))
        return min(coords[0] * grid_dims[0] // shape[0], grid_dims[0] - 1)

    grid = _grid_of(backend, 2, mapper=halves, data_rank=1)
    X = np.arange(N, dtype=np.float64)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        with ctx.task(grid, x.rw()) as t:
            _on_stream(t, t.stream_ptr(), lambda xp, a: a.__imul__(2), 0)
    np.testing.assert_array_equal(X, np.arange(N) * 2.0)
    assert seen[0] == ((0,), (N,), (2,))
    with pytest.raises(ValueError, match="data_rank"):
        stf.data_place.composite(grid, halves, data_rank=5)


def test_data_rank_merges_leading_axes():
    from stflow._places.partition import chunk_owners

    seen = []

    def record(coords, shape, grid_dims):
        seen.append((coords, shape))
        return (0, 1) if coords[-1] >= 5 else (0, 0)

    owners = chunk_owners(
        record, 4 * 10 * 8, 40, (1, 2), "test", data_rank=2, shape=(2, 2, 10), itemsize=8
    )
    assert seen[0] == ((0, 0), (4, 10)) and seen[1] == ((0, 5), (4, 10))
    assert owners == [0, 1] * 4
