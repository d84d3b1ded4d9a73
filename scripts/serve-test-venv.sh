#!/usr/bin/env bash
# Creates or updates the Python venv of the `lowbit serve` end-to-end tests, idempotently.
#   scripts/serve-test-venv.sh [VENV_DIR]
# VENV_DIR defaults to $LOWBIT_SERVE_VENV, else build/serve-venv under the repository root.
# Installs exactly the pins of tests/serve/requirements.txt. A stamp file records the hash of the
# requirements it installed, so a second run with unchanged pins does nothing (no network) and a
# change of pins reinstalls. Prints the venv's directory on stdout as its last line.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${LOWBIT_SERVE_VENV:-$root/build/serve-venv}}"
requirements="$root/tests/serve/requirements.txt"
stamp="$venv/.lowbit-requirements.sha256"
python="${PYTHON:-python3}"

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv"
  exit 0
fi

# Serialize concurrent callers (two ctest runs, or a developer beside CI) on the same venv.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "serve-test-venv: creating $venv" >&2
  "$python" -m venv "$venv"
fi
echo "serve-test-venv: installing tests/serve/requirements.txt into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --no-deps -r "$requirements" >&2
# --no-deps installs the pins and nothing else; pip check then fails if the pins are not the
# whole dependency closure (a new pin upstream needs adding to requirements.txt).
"$venv/bin/python" -m pip check >&2
echo "$want" > "$stamp"
echo "$venv"
