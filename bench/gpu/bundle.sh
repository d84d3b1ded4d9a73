#!/usr/bin/env bash
# Packs lowbit's binaries (stripped) and the Debian shared libraries they load that a bare GPU
# machine may lack (ICU, oniguruma, yaml-cpp, cpp-httplib, OpenSSL, libstdc++, libgomp; not glibc,
# not CUDA's own libraries) into one archive, to run the GPU tests and benchmarks on a machine that
# has the NVIDIA driver and CUDA runtime but not lowbit's build dependencies. Binaries keep their
# paths relative to the repository root; the libraries go to .gpu-carry/lib.
#
#   bench/gpu/bundle.sh OUT.tar.xz build/bin/lowbit build/tests/lowbit_gpu_tests ...
#   # on the GPU machine, in a checkout of the same commit (tests read models/ and tests/golden/):
#   tar xJf OUT.tar.xz && export LD_LIBRARY_PATH=$PWD/.gpu-carry/lib:$LD_LIBRARY_PATH
#
# The GPU tests find their data through the source path compiled in (LOWBIT_SOURCE_DIR): run them
# from a checkout at the same path, or link that path to the checkout.
set -euo pipefail
out=${1:?usage: bench/gpu/bundle.sh OUT.tar.xz BINARY...}
shift
[ $# -gt 0 ] || { echo "bench/gpu/bundle.sh: name at least one binary" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/.gpu-carry/lib"
for f in "$@"; do
  mkdir -p "$stage/$(dirname "$f")"
  cp "$root/$f" "$stage/$f"
  strip "$stage/$f"
done
ldd "$root/$1" | awk '/=>/ {print $3}' | sort -u | grep '^/lib' |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/.gpu-carry/lib/"; done
(cd "$stage" && tar -cf - .) | xz -T0 -9 > "$out.tmp"
mv "$out.tmp" "$out"
ls -la "$out"
