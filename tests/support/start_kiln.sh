# start_kiln.sh (sourced): start_kiln KILN starts `KILN serve` on a free port with a store of
# its own (removed, with its files, at exit) and sets url, key (the first team's) and admin
# from its banner; exits 1 when it does not start.
start_kiln() {
  log="$(mktemp)"
  store="$log.db"  # a store of its own, not ~/.kiln's
  "$1" serve --port 0 --store "$store" >"$log" 2>/dev/null &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$log" "$store" "$store-wal" "$store-shm" "$store".usage.* "$store".files "$store".snapshot' EXIT
  for _ in $(seq 200); do grep -q "admin key" "$log" && break; sleep 0.05; done
  url="$(sed -n 's/^kiln serving on \(http:\/\/[0-9.:]*\) .*/\1/p' "$log")"
  key="$(sed -n 's/^  team [^ ]* key \(.*\)$/\1/p' "$log" | head -1)"
  admin="$(sed -n 's/^  admin key \(.*\)$/\1/p' "$log" | head -1)"
  [ -n "$url" ] && [ -n "$key" ] && [ -n "$admin" ] || { echo "kiln did not start"; cat "$log"; exit 1; }
}
