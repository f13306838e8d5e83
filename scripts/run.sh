#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build, then run the
# default DAQ job. Until the full chain exists that is the transport self-benchmark: every
# operation (send, RMA write, RMA read; latency and bandwidth) over libfabric's shm and tcp
# providers, server and client on this machine, as a table. Extra arguments go to
# `sddaq perf self` (e.g. -p tcp -s 8:1M).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/deps.sh"
sddaq_install_deps
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target sddaq_cli >/dev/null
echo "sddaq: transport self-benchmark on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
exec "$root/build/sddaq" perf self "$@"
