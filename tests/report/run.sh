#!/usr/bin/env bash
# `lowbit report` checked in headless Chromium (issue 7): the page made from the fixture loads with
# no console error, CSP violation or network request, and its charts are on the screen.
#   tests/report/run.sh LOWBIT_BINARY [OUT_DIR]
# Installs Debian's chromium when it is missing (apt-get, with sudo when not root). Exit 77 (CTest:
# skipped) only when Chromium is absent and cannot be installed. Screenshots land in OUT_DIR
# (default: a temporary directory, kept and printed on failure).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: tests/report/run.sh LOWBIT_BINARY [OUT_DIR]" >&2
  exit 2
fi
lowbit="$1"

if ! command -v chromium >/dev/null; then
  echo "run.sh: installing Debian's chromium (not in scripts/install-deps.sh: it is large)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $SUDO apt-get update -qq && \
         $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "run.sh: SKIPPED: chromium is not installed and apt-get could not install it" >&2
    exit 77
  fi
fi
command -v python3 >/dev/null || { echo "run.sh: python3 is needed" >&2; exit 2; }

if [ $# -ge 2 ]; then
  out="$2"
  mkdir -p "$out"
else
  out="$(mktemp -d /tmp/lowbit-report-test.XXXXXX)"
fi
fail() { echo "FAIL: $*" >&2; echo "files kept in $out" >&2; exit 1; }

# The CLI's errors: exit code 2 and a message naming the file and the field.
mkdir -p "$out/empty" "$out/bad"
set +e
message="$("$lowbit" report "$out/empty" 2>&1)"; code=$?
set -e
[ $code -eq 2 ] || fail "lowbit report on a directory without compare.json exited $code, not 2"
[[ "$message" == *"$out/empty/compare.json"* ]] || fail "the error does not name the file: $message"
python3 - "$here/data/compare_example.json" "$out/bad/compare.json" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
data["schemes"][1]["kld_mean"] = "small"
json.dump(data, open(sys.argv[2], "w"))
EOF
set +e
message="$("$lowbit" report "$out/bad" 2>&1)"; code=$?
set -e
[ $code -eq 2 ] || fail "lowbit report on a malformed compare.json exited $code, not 2"
[[ "$message" == *"compare.json: schemes[1].kld_mean"* ]] || fail "the error does not name the field: $message"
echo "errors: missing file and bad field reported with exit code 2"

# The report from the fixture; -o writes it elsewhere than beside compare.json.
mkdir -p "$out/run"
cp "$here/data/compare_example.json" "$out/run/compare.json"
"$lowbit" report "$out/run" -o "$out/report.html"
[ -s "$out/report.html" ] || fail "no report written"
[ ! -e "$out/report.html.tmp" ] || fail "the temporary file was left behind"

python3 "$here/check_report.py" --chromium "$(command -v chromium)" --report "$out/report.html" \
  --out "$out" || fail "the page failed in Chromium"
[ $# -ge 2 ] || rm -rf "$out"
