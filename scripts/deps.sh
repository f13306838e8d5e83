#!/usr/bin/env bash
# Install the Debian packages sddaq needs, only when some are missing. Sourced by run.sh and
# test.sh; usable alone: scripts/deps.sh [extra packages...]
set -euo pipefail

# clang (with libFuzzer) runs the fuzz smoke test; iperf3 is bench_readout's UDP reference;
# liburing lets bench_uring measure io_uring against recvmmsg;
# libhdf5-dev is the run store's HDF5 writer, python3-h5py/numpy run examples/read_run.py;
# libyaml-dev reads topology files, libmicrohttpd-dev serves the control API and metrics,
# curl checks that API from a plain HTTP client in test_ctl_cli.sh;
# the rest build, test and benchmark.
SDDAQ_PACKAGES=(build-essential cmake pkg-config libfabric-dev libfabric-bin ucx-utils python3
    iproute2 procps util-linux clang iperf3 liburing-dev libhdf5-dev python3-h5py python3-numpy
    libyaml-dev libmicrohttpd-dev curl)

sddaq_install_deps() {
    local missing=()
    for pkg in "${SDDAQ_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "sddaq: installing Debian packages: ${missing[*]}" >&2
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || {
            echo "sddaq: need root or sudo to install: ${missing[*]}" >&2
            return 1
        }
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    sddaq_install_deps "$@"
fi
