#!/usr/bin/env bash
# test.sh: build kiln and run every test (unit, actor, end-to-end) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j2
