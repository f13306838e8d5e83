#!/usr/bin/env bash
# Build and run every test, from a fresh Debian 12 machine: install what is missing, then two
# builds with warnings as errors, a release build and an address+undefined sanitizer build,
# each running the whole ctest suite (unit tests, fabric conformance over tcp, shm and shm
# without cross-memory attach, system tests, benchmark smoke runs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/deps.sh"
sddaq_install_deps
jobs=$(nproc)
status=0
run_suite() {
    local dir=$1
    shift
    echo "== sddaq tests: $dir ($*)"
    cmake -S "$root" -B "$root/$dir" -DSDDAQ_WERROR=ON "$@" >/dev/null
    cmake --build "$root/$dir" -j"$jobs" >/dev/null
    (cd "$root/$dir" && ctest --output-on-failure --timeout 300) || status=1
}
run_suite build-test -DCMAKE_BUILD_TYPE=Release
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSDDAQ_SANITIZE=ON
exit $status
