#!/usr/bin/env bash
# Create (or bring up to date) the Python venv that the llm-compressor reference scripts run in:
# llmcompressor, compressed-tensors, torch, transformers... at the exact versions of
# requirements-llmcompressor.txt. Idempotent: an existing venv is reused, and nothing is downloaded
# when it already holds exactly the pinned set.
# Only the reference scripts need it; the C++ build and CI use the committed data under
# tests/golden/llmcompressor/.
#
# Usage: scripts/reference/setup-llmcompressor-venv.sh [VENV_DIR]   (default: <repo>/.venv-llmcompressor)
# Then (CPU only):
#   CUDA_VISIBLE_DEVICES= VENV_DIR/bin/python scripts/reference/make_calibration_ids.py
#   CUDA_VISIBLE_DEVICES= VENV_DIR/bin/python scripts/reference/run_llmcompressor.py
#   CUDA_VISIBLE_DEVICES= VENV_DIR/bin/python scripts/reference/check_lowbit_checkpoint.py DIR
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/.venv-llmcompressor}"
req="$here/requirements-llmcompressor.txt"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
# Skip the network round trip when the venv already holds exactly the pinned set.
want="$(grep -Ev '^\s*(#|$)' "$req" | sed -E 's/\s*;.*$//' | tr 'A-Z_' 'a-z-' | sort)"
have="$("$venv/bin/python" -m pip freeze 2>/dev/null | tr 'A-Z_' 'a-z-' | sort)"
if [[ "$want" == "$have" ]]; then
  echo "llm-compressor venv $venv is up to date"
  exit 0
fi
"$venv/bin/python" -m pip install --upgrade --quiet pip
"$venv/bin/python" -m pip install --quiet -r "$req"
"$venv/bin/python" -m pip check
"$venv/bin/python" -c 'import llmcompressor, compressed_tensors, torch, transformers; print("llmcompressor", llmcompressor.__version__, "compressed-tensors", compressed_tensors.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
