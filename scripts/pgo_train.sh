#!/usr/bin/env bash
# pgo_train.sh: records the profile in cmake/pgo/ (see cmake/pgo.cmake). Builds kiln with the
# hot libraries instrumented (in build-pgo/, about 8 minutes on 2 cores), runs seed_fleet
# with it, and puts the counts it wrote in cmake/pgo/ with the compiler that made them.
# The counts are updated atomically, so none is lost between the run's threads; a few
# (the progress line's, the threads' turns) follow the wall clock and differ run to run,
# so a new recording differs a little from the last even with no change. Run it after
# changing the engine's, actors' or simulator's hot paths: a function changed since the
# profile was made is compiled as without one.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-pgo
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_PGO_GENERATE=ON -DKILN_CUDA=OFF > /dev/null
cmake --build "$dir" --target kiln
rm -rf "$dir/pgo-profile" "$dir/train-out"
"$dir/cluster/kiln" sim sim/scenarios/seed_fleet.toml --out "$dir/train-out"
count=$(find "$dir/pgo-profile" -name '*.gcda' | wc -l)
if [ "$count" -eq 0 ]; then
  echo "pgo_train: the run wrote no profile" >&2
  exit 1
fi
rm -f cmake/pgo/*.gcda
mkdir -p cmake/pgo
cp "$dir"/pgo-profile/*.gcda cmake/pgo/
cp "$dir/pgo-compiler.txt" cmake/pgo/compiler.txt
echo "pgo_train: $count object profiles in cmake/pgo/ (made by $(cat cmake/pgo/compiler.txt))"
