#!/usr/bin/env bash
# tests/device/check.sh: the GPU checks, in one call on the device machine (CUDA 13, CMake,
# ninja, Python; none of our Debian packages). From this machine:
#   scripts/stage_device_deps.sh
#   device run: bash tests/device/check.sh   (carry: .device-deps; timeout_s: 480)
# It builds kernels/ for sm_90 and runs every GPU kernel test against its CPU twin; the log
# comes back in $OUT. Not here yet (needs the cuda executor): the greedy decode of the tiny
# model on the GPU against the CPU tokens, and the 7B-shaped decode benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp}"
[ -f .device-deps/include/doctest/doctest.h ] || { echo "missing .device-deps: run scripts/stage_device_deps.sh and carry it"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B build-device -G Ninja -DKILN_DEVICE_ONLY=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DKILN_EXTRA_INCLUDE="$PWD/.device-deps/include" >"$out/configure.log"
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
set +e
build-device/kiln_gpu_tests 2>&1 | tee "$out/gpu_tests.log"
rc=${PIPESTATUS[0]}
echo "== summary"
grep -E "relative-norm|rows equal|mismatch" "$out/gpu_tests.log"
exit "$rc"
