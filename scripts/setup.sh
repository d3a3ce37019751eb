#!/usr/bin/env bash
# setup.sh: install every Debian package kiln needs (idempotent; quick when all are present).
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config
      libcaf-dev libboost-dev nlohmann-json3-dev libmsgpack-cxx-dev doctest-dev
      libsqlite3-dev sqlite3 libpq-dev postgresql libssl-dev libtomlplusplus-dev libpcre2-dev libxxhash-dev libbenchmark-dev libutf8proc-dev
      curl python3 prometheus chromium strace libtcmalloc-minimal4)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
