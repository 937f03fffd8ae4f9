#!/usr/bin/env bash
# One device session: the GPU test suite, the differential test on CUDA, B1, B4 and the
# demo with a trace. Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir bash benchmarks/gpu_session.sh [tests|bench|graphs|all]
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/stflow-gpu}
mkdir -p "$OUT"
what=${1:-all}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 330 python3 -m pytest -q -m "gpu and not slow" tests -p no:cacheprovider --timeout 300 ${PYTEST_EXTRA:-} \
    --tb=native -rf -W "ignore::DeprecationWarning" > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -n 30
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  (cd benchmarks && timeout 60 python3 runtime_overhead.py) 2>&1
  (cd benchmarks && timeout 150 python3 b1_overhead.py --json "$OUT/b1.json" ${B1_EXTRA:-}) 2>&1
  (cd benchmarks && timeout 120 python3 b4_transfers.py --json "$OUT/b4.json" --trace "$OUT/b4-trace.json") 2>&1
  timeout 60 python3 -m stflow.demo --backend cuda 2>&1 | tee "$OUT/demo.txt"
  STFLOW_TRACE_FILE="$OUT/demo-trace.json" STFLOW_DOT_FILE="$OUT/demo.dot" timeout 60 \
    python3 -m stflow.demo --backend cuda --size 8192 --iterations 3 --warmup 2>&1
fi
if [ "$what" = graphs ] || [ "$what" = all ]; then
  (cd benchmarks && timeout 200 python3 b2_graph_mode.py --json "$OUT/b2.json" ${B2_EXTRA:-}) 2>&1
  (cd benchmarks && timeout 150 python3 b3_replay.py --json "$OUT/b3.json") 2>&1
  timeout 120 python3 examples/cg_while_loop.py --backend cuda --n 2048 2>&1
fi
