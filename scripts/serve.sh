#!/usr/bin/env bash
# serve.sh: build kiln, then run `kiln serve` on the embedded default (extra arguments pass on).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec build/cluster/kiln serve "$@"
