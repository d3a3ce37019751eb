#!/usr/bin/env bash
# stage_device_deps.sh: copy what the device machine lacks into .device-deps/ (git ignores
# it; the device run carries it): doctest and nlohmann-json headers, xxhash.h (used inline),
# PCRE2's, utf8proc's and libpq's headers and shared libraries (the device machine is x86-64
# too).
set -euo pipefail
cd "$(dirname "$0")/.."
d=.device-deps
rm -rf "$d"
mkdir -p "$d/include" "$d/lib"
cp -r /usr/include/doctest /usr/include/nlohmann "$d/include/"
cp /usr/include/xxhash.h /usr/include/pcre2.h /usr/include/utf8proc.h "$d/include/"
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libpcre2-8.so)
cp "$lib" "$d/lib/libpcre2-8.so"
cp "$lib" "$d/lib/libpcre2-8.so.0"
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libutf8proc.so)
cp "$lib" "$d/lib/libutf8proc.so"
cp "$lib" "$d/lib/libutf8proc.so.2"
mkdir -p "$d/include/postgresql"
cp /usr/include/postgresql/libpq-fe.h /usr/include/postgresql/postgres_ext.h /usr/include/postgresql/pg_config_ext.h \
  "$d/include/postgresql/"
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libpq.so)
cp "$lib" "$d/lib/libpq.so"
cp "$lib" "$d/lib/libpq.so.5"
du -sh "$d"
