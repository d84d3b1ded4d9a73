#!/usr/bin/env bash
# lm-eval (EleutherAI lm-evaluation-harness) against `lowbit serve`, fully offline: a local
# multiple-choice task built from data/text/heldout.txt (bench/lm_eval/make_task.py), scored through
# the server's /v1/completions (echo + logprobs) by lm-eval's `local-completions` model.
#
#   bench/lm_eval_serve.sh [LOWBIT_BINARY [MODEL_DIR]]
#
# Env: LM_EVAL_VENV (default build/lm-eval-venv), LIMIT (items, default 50), CONCURRENT (default 4),
# PORT (default 0: any free port), WORK (default build/lm-eval). Not part of `make test`: it needs
# ~1 GB of Python packages (pinned in bench/lm_eval/requirements.txt, installed on first use).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lowbit="${1:-$root/build/bin/lowbit}"
model="$(cd "${2:-$root/models/ref-llama-19m}" && pwd)"
venv="${LM_EVAL_VENV:-$root/build/lm-eval-venv}"
work="${WORK:-$root/build/lm-eval}"
limit="${LIMIT:-50}"
concurrent="${CONCURRENT:-4}"
name="$(basename "$model")"
requirements="$root/bench/lm_eval/requirements.txt"

# 1. The pinned venv (idempotent: a stamp holds the hash of the requirements installed).
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -f "$venv/.lowbit-requirements.sha256" ] || [ "$(cat "$venv/.lowbit-requirements.sha256")" != "$want" ]; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  "$venv/bin/python" -m pip check
  echo "$want" > "$venv/.lowbit-requirements.sha256"
fi

# 2. The task (50 passages, 4 candidate next sentences each).
mkdir -p "$work"
python3 "$root/bench/lm_eval/make_task.py" "$work/task" --items "$limit" >/dev/null

# 3. The server, on a free loopback port, stopped on exit.
log="$work/serve.log"
"$lowbit" serve "$model" --port "${PORT:-0}" --served-model-name "$name" 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  port="$(sed -n 's/.* on http:\/\/[^:]*:\([0-9]*\) (OpenAI API under \/v1)$/\1/p' "$log")"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "lowbit serve did not start:" >&2; cat "$log" >&2; exit 1; }
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done

# 4. lm-eval. Offline: the dataset is a local JSON file and the tokenizer the model directory.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$work/hf-home"
set -x
"$venv/bin/lm_eval" --model local-completions \
  --model_args "model=$name,base_url=http://127.0.0.1:$port/v1/completions,tokenizer_backend=huggingface,tokenizer=$model,num_concurrent=$concurrent,max_retries=1,tokenized_requests=True" \
  --include_path "$work/task" --tasks lowbit_heldout_next_sentence --limit "$limit" \
  --output_path "$work/results" --log_samples
