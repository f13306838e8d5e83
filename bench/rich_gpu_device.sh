#!/bin/bash
# The RICH ring finder on a CUDA GPU machine, in one go: the bit-for-bit test against the CPU
# finder (unit_rich_gpu), a stream of buffers with the rings on the GPU (unit_rich_stream),
# the command-line and run tests that take the GPU path (run_rich must not be refused),
# `sddaq trigger rich bench --gpu` (every variant; the chain on 2 threads, as on the
# development machine, and on all), and the CPU bench on the same machine for reference. Uses a
# Release build in build/; LIBDIR, when set, holds shared libraries the GPU machine lacks.
# Output goes to OUT (default bench/results).
set -u
out=${OUT:-bench/results}
mkdir -p "$out"
if [ -n "${LIBDIR:-}" ]; then
    export LD_LIBRARY_PATH=$LIBDIR
fi
run() { # name, command... (a hung kernel costs 120 s, not the lease)
    local name=$1
    shift
    echo "== $name: $*"
    timeout 120 "$@" >"$out/$name.txt" 2>&1
    echo "rc=$?" >>"$out/$name.txt"
    tail -n "${TAIL:-40}" "$out/$name.txt"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
TAIL=3 run unit build/tests/unit_rich_gpu
TAIL=3 run cli bash tests/system/test_trigger_rich_cli.sh build/sddaq
TAIL=3 run stream build/tests/unit_rich_stream
SDDAQ_EXPECT_GPU=1 TAIL=3 run run_rich bash tests/system/test_run_rich.sh build/sddaq
run gpu_t2 build/sddaq trigger rich bench --gpu -t 2
run cpu_t2 build/sddaq trigger rich bench --method hist -t 2
# sddaq run's rich stage with rings on the GPU: one buffer at a time against 2 in flight
run run_inflight bash bench/run_rich_inflight.sh --gpu --pairs 3
