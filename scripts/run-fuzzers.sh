#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang in build-fuzz and runs each for
# SECONDS seconds (JOBS of them at a time, default nproc) over a scratch copy of its seed corpus
# tests/fuzz/corpus/<name>/ (the repository is not modified). Fails if any target finds a crash, a
# sanitizer report, an exception other than lowbit::Error, a hang (one input over 10 s) or runaway
# memory; the reproducer is kept under build-fuzz/crashes/<target>/ and can be replayed with
# `build-fuzz/fuzz/<target> FILE`.
#   scripts/run-fuzzers.sh 10                                   (make test)
#   scripts/run-fuzzers.sh 600                                  (make fuzz-long)
#   FUZZ_TARGETS="safetensors_fuzz" scripts/run-fuzzers.sh 60   (some targets only)
set -euo pipefail

seconds="${1:?usage: scripts/run-fuzzers.sh SECONDS}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD:-$root/build-fuzz}"
jobs="${JOBS:-$(nproc)}"

for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "run-fuzzers: $tool not found (make deps)" >&2; exit 1; }
done

targets=()
for source in "$root"/tests/fuzz/*_fuzz.cc; do
  [ -e "$source" ] || continue
  name="$(basename "$source" .cc)"
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  targets+=("$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run-fuzzers: no fuzz targets to run"
  exit 0
fi

# The compiler is fixed when the build directory is first configured.
if [ ! -f "$build/CMakeCache.txt" ]; then
  export CC=clang CXX=clang++
fi
# Line tables are all the debug information the sanitizer and libFuzzer reports need (file:line
# of every frame, inlined ones too); full -g costs this build, which make test pays each time on
# 2 cores, a tenth more compile time. Rebuild with -g to step through a reproducer in a debugger.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOWBIT_FUZZ=ON -DLOWBIT_TESTS=ON \
  -DLOWBIT_CUDA=OFF -DLOWBIT_BENCH=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
  >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/lowbit-fuzz-XXXXXX")"
# Fuzzers still running when the script stops (Ctrl-C, an error) stop with it.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$scratch"' EXIT
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# One target for $seconds over its own scratch corpus; the outcome goes to $scratch/<target>.status.
fuzz_one() {
  local target="$1"
  local corpus="$scratch/$target" artifacts="$build/crashes/$target"
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
                 -artifact_prefix="$artifacts/")
  [ -f "$root/tests/fuzz/$target.dict" ] && options+=(-dict="$root/tests/fuzz/$target.dict")
  if "$build/fuzz/$target" "${options[@]}" "$corpus" >"$scratch/$target.log" 2>&1; then
    echo ok >"$scratch/$target.status"
  else
    echo failed >"$scratch/$target.status"
  fi
}

# A libFuzzer process runs on one core: $jobs targets run side by side, each still for the full
# $seconds (on 2 cores the 7 targets of make test take 40 s instead of 70).
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "$build/crashes/$target"
  seeds="$root/tests/fuzz/corpus/${target%_fuzz}"
  [ -d "$seeds" ] && cp -R "$seeds/." "$scratch/$target/"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "run-fuzzers: $target for ${seconds}s ($(ls "$scratch/$target" | wc -l) seeds)"
  fuzz_one "$target" &
done
wait

failed=()
for target in "${targets[@]}"; do
  log="$scratch/$target.log"
  if [ "$(cat "$scratch/$target.status" 2>/dev/null)" = ok ]; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
    echo "run-fuzzers: $target ok (${runs:-?} inputs, corpus $(ls "$scratch/$target" | wc -l))"
  else
    echo "run-fuzzers: $target FAILED; reproducer in $build/crashes/$target/; log tail:" >&2
    tail -n 60 "$log" >&2 || true
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "run-fuzzers: failing targets: ${failed[*]}" >&2
  exit 1
fi
