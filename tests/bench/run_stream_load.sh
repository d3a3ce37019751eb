#!/usr/bin/env bash
# run_stream_load.sh CONFIG [stream_load args...]: start kiln with CONFIG on a free port,
# run stream_load against it with kiln's pid, then stop kiln (SIGTERM) and wait for it.
# KILN_BIN names another kiln binary (an earlier build, for side-by-side runs).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
config="$1"; shift
log="$(mktemp)"
store="$log.db"
"${KILN_BIN:-$root/build/cluster/kiln}" serve --config "$config" --store "$store" >"$log" 2>/dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log" "$store" "$store-wal" "$store-shm" "$store".usage.*' EXIT
for _ in $(seq 100); do grep -q "serving on" "$log" && break; sleep 0.05; done
port="$(sed -n 's/.*serving on http:\/\/[0-9.]*:\([0-9]*\).*/\1/p' "$log" | head -1)"
[ -n "$port" ] || { echo "kiln did not start" >&2; exit 1; }
"$root/build/tests/bench/stream_load" --port "$port" --pid "$pid" "$@"
kill -TERM "$pid"; wait "$pid"
