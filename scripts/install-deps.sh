#!/usr/bin/env bash
# Installs the Debian packages lowbit builds and tests with. Idempotent: silent and fast when
# everything is already present; installs only what is missing otherwise.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  nlohmann-json3-dev   # config.json, tokenizer.json, safetensors headers
  libonig-dev          # Oniguruma: the regex engine HF tokenizers uses for pre-tokenizer splits
  libicu-dev           # ICU: Unicode normalization and properties for the tokenizer
  libcli11-dev         # command-line parsing
  libyaml-cpp-dev      # llm-compressor recipes (YAML) in and out
  libcpp-httplib-dev   # HTTP for `lowbit serve` and `lowbit bench serve`
  libgtest-dev libgmock-dev
  libomp-dev           # OpenMP runtime headers (gcc uses libgomp; clang builds use libomp)
  clang libclang-rt-14-dev  # libFuzzer and sanitizer runtimes for the fuzz targets
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
