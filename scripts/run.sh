#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build, then run the
# default DAQ chain (`sddaq run` with its embedded topology): an emulated tracker sector read
# out by two boards -> two readout units -> two builder units -> Hough track trigger -> HDF5
# file under runs/, with every trigger decision on a feedback buffer. A progress line every
# second, then the summary and the accounting of every event. Extra arguments go to
# `sddaq run` (e.g. -d 30, or a topology file: ./scripts/run.sh examples/topologies/x.yaml).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/deps.sh"
sddaq_install_deps
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target sddaq_cli >/dev/null
echo "sddaq: the default DAQ chain on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
exec "$root/build/sddaq" run "$@"
