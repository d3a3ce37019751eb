#!/usr/bin/env bash
# stage_device_deps.sh: copy what the device machine lacks (doctest's header) into
# .device-deps/, which git ignores and the device run carries.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device-deps/include
cp -r /usr/include/doctest .device-deps/include/
echo "staged .device-deps/include/doctest"
