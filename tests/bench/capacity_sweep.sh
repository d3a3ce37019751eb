#!/usr/bin/env bash
# capacity_sweep.sh N...: for each stream count N, run stream_load against a kiln whose pool
# has ceil(N/83) replicas (83 streams per replica, seed 000's figure), so the engines keep
# every stream in the batch at about 30 tokens/s and the front's overhead is what is measured.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cfg="$(mktemp --suffix=.toml)"
trap 'rm -f "$cfg"' EXIT
for n in "$@"; do
  replicas=$(( (n + 82) / 83 ))
  sed "s/^replicas = .*/replicas = $replicas/; s/^max_running = .*/max_running = 256/" \
    "$here/peak_12_replicas.toml" >"$cfg"
  echo "== $n streams on $replicas replicas"
  "$here/run_stream_load.sh" "$cfg" --streams "$n" --duration 20 --ramp 200 --prompt-words 200 --max-tokens 300
done
