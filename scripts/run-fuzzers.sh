#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang in build-fuzz and runs each for
# SECONDS seconds over a scratch copy of its seed corpus tests/fuzz/corpus/<name>/ (the repository
# is not modified). Fails if any target finds a crash, a sanitizer report, an exception other than
# lowbit::Error, a hang (one input over 10 s) or runaway memory; the reproducer is kept under
# build-fuzz/crashes/<target>/ and can be replayed with `build-fuzz/fuzz/<target> FILE`.
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
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOWBIT_FUZZ=ON -DLOWBIT_TESTS=ON \
  -DLOWBIT_CUDA=OFF -DLOWBIT_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/lowbit-fuzz-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

failed=()
for target in "${targets[@]}"; do
  corpus="$scratch/$target"
  mkdir -p "$corpus"
  seeds="$root/tests/fuzz/corpus/${target%_fuzz}"
  [ -d "$seeds" ] && cp -R "$seeds/." "$corpus/"
  artifacts="$build/crashes/$target"
  mkdir -p "$artifacts"
  options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$artifacts/")
  [ -f "$root/tests/fuzz/$target.dict" ] && options+=(-dict="$root/tests/fuzz/$target.dict")
  log="$scratch/$target.log"
  echo "run-fuzzers: $target for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  if "$build/fuzz/$target" "${options[@]}" "$corpus" >"$log" 2>&1; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
    echo "run-fuzzers: $target ok (${runs:-?} inputs, corpus $(ls "$corpus" | wc -l))"
  else
    echo "run-fuzzers: $target FAILED; reproducer in $artifacts/; log tail:" >&2
    tail -n 60 "$log" >&2
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "run-fuzzers: failing targets: ${failed[*]}" >&2
  exit 1
fi
