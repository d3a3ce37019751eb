#!/usr/bin/env bash
# Compiler launcher for the profile-guided libraries (cmake/pgo.cmake): runs the compile with
# the project's .cpp files and include folders named relative to the build folder, so the
# build sees the same source and header paths wherever the checkout is.
#
# Why: GCC keys the profile of a function with internal linkage (an anonymous namespace's,
# a lambda's) by a checksum of its source file's path as the compile names it. CMake names
# sources and include folders by their absolute paths, so a profile recorded in one checkout
# misses those functions (and templates instantiated with a lambda, declared in a header) in
# a checkout anywhere else (GCC's "missing counts"): about 70 of the hot libraries'
# functions, some 1.5% of seed_fleet's speed.
#   relative_source.sh SOURCE_DIR [launcher...] compiler args...
set -euo pipefail
root=$1
shift
args=()
for a in "$@"; do
  case $a in
    "$root"/*.cpp) args+=("$(realpath -s --relative-to=. "$a")") ;;
    -I"$root" | -I"$root"/*) args+=("-I$(realpath -s --relative-to=. "${a#-I}")") ;;  # its headers too
    *) args+=("$a") ;;
  esac
done
exec "${args[@]}"
