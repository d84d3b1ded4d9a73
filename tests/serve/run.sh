#!/usr/bin/env bash
# End-to-end tests of `lowbit serve` with real clients (openai SDK, httpx, curl).
#   tests/serve/run.sh LOWBIT_BINARY [pytest arguments...]
# e.g. tests/serve/run.sh build/bin/lowbit -k soak -s
# Creates or updates the pinned venv first (scripts/serve-test-venv.sh; $LOWBIT_SERVE_VENV picks
# its directory). Needs curl and network access to PyPI the first time only.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: tests/serve/run.sh LOWBIT_BINARY [pytest args...]" >&2
  exit 2
fi
LOWBIT_BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export LOWBIT_BIN
shift

command -v curl >/dev/null || { echo "run.sh: curl is needed (apt-get install curl)" >&2; exit 2; }
venv="$("$root/scripts/serve-test-venv.sh" | tail -n 1)"

# Soak length. Locally 120 s. CI (CI=true) runs `make test` on 2 cores within a 30-minute budget of
# which the other suites take ~20 minutes and the rest of this suite ~1.5 minutes: 45 s of soak
# still runs hundreds of requests at concurrency 16 (every one checked) and keeps this whole suite
# near 3 minutes. An explicit LOWBIT_SOAK_SECONDS always wins.
if [ -z "${LOWBIT_SOAK_SECONDS:-}" ]; then
  if [ "${CI:-}" = "true" ]; then LOWBIT_SOAK_SECONDS=45; else LOWBIT_SOAK_SECONDS=120; fi
fi
export LOWBIT_SOAK_SECONDS

# The server's OpenMP threads should sleep when idle: the client shares the machine's two cores.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
export PYTHONDONTWRITEBYTECODE=1
cd "$here"
exec "$venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" "$@"
