#!/usr/bin/env bash
# capacity_sweep.sh [--floor] N...: for each stream count N, run stream_load against a kiln
# whose pool has ceil(N/83) replicas (83 streams per replica, seed 000's figure), so the
# engines keep every stream in the batch at about 30 tokens/s and the front's overhead is
# what is measured. With --floor, the bare epoll server (floor_server) then serves the same N
# streams with the same client right after, so each count's overhead has the machine's own
# beside it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="$here/../../build/tests/bench"
floor=0
if [ "${1:-}" = "--floor" ]; then floor=1; shift; fi
cfg="$(mktemp --suffix=.toml)"
flog="$(mktemp)"
fpid=""
trap 'rm -f "$cfg" "$flog"; [ -z "$fpid" ] || kill "$fpid" 2>/dev/null || true' EXIT
for n in "$@"; do
  replicas=$(( (n + 82) / 83 ))
  sed "s/^replicas = .*/replicas = $replicas/; s/^max_running = .*/max_running = 256/" \
    "$here/peak_12_replicas.toml" >"$cfg"
  load=(--streams "$n" --duration 20 --ramp 200 --prompt-words 200 --max-tokens 300)
  echo "== $n streams on $replicas replicas"
  "$here/run_stream_load.sh" "$cfg" "${load[@]}"
  [ "$floor" = 1 ] || continue
  echo "== $n streams on floor_server"
  "$bench/floor_server" --port 0 >"$flog" 2>&1 &
  fpid=$!
  for _ in $(seq 100); do grep -q "serving on" "$flog" && break; sleep 0.05; done
  port="$(sed -n 's/.*serving on http:\/\/[0-9.]*:\([0-9]*\).*/\1/p' "$flog" | head -1)"
  "$bench/stream_load" --port "$port" --pid "$fpid" "${load[@]}"
  kill "$fpid"; wait "$fpid" 2>/dev/null || true
  fpid=""
done
