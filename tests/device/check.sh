#!/usr/bin/env bash
# tests/device/check.sh: the GPU checks, in one call on the device machine (CUDA 13, CMake,
# ninja, Python; none of our Debian packages). From this machine:
#   scripts/stage_device_deps.sh
#   device run: bash tests/device/check.sh   (carry: .device-deps; timeout_s: 480)
# 1. every GPU kernel test against its CPU twin;
# 2. a greedy decode of a small model on the GPU (F32 weights) equal to the CPU executor's;
# 3. the 7B-shaped decode benchmark: batch-1 step time against the bandwidth floor, and
#    tokens/s at batch 64 and 256 with 1,000-token contexts.
# Logs come back in $OUT; a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp}"
[ -f .device-deps/include/doctest/doctest.h ] || { echo "missing .device-deps: run scripts/stage_device_deps.sh and carry it"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-device -G Ninja -DKILN_DEVICE_ONLY=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
build-device/kiln_gpu_tests >"$out/gpu_tests.log" 2>&1; kernels=$?
timeout 120 build-device/gpu_decode_check >"$out/decode_check.log" 2>&1; decode=$?
timeout 240 build-device/gpu_decode >"$out/bench.log" 2>&1; bench=$?
echo "== kernel tests (exit $kernels)"
grep -E "relative-norm|rows equal|mismatch|test cases|ERROR" "$out/gpu_tests.log"
echo "== greedy decode, GPU against CPU (exit $decode)"
cat "$out/decode_check.log"
echo "== 7B-shaped decode (exit $bench)"
cat "$out/bench.log"
[ $kernels -eq 0 ] && [ $decode -eq 0 ] && [ $bench -eq 0 ]
