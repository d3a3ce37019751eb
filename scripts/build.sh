#!/usr/bin/env bash
# build.sh: install packages if missing, configure (Ninja, ccache) and build kiln.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build_type="${KILN_BUILD_TYPE:-RelWithDebInfo}"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type"
fi
cmake --build build
