#!/usr/bin/env bash
# "Does vLLM's side load what lowbit writes?", as close as a CPU machine gets: quantize the embedded
# model with lowbit in several schemes, then load each checkpoint through compressed-tensors' own
# decompressor and through transformers' compressed-tensors support (check_lowbit_checkpoint.py),
# and compare their logits with lowbit's (weights decompressed to bf16 on both sides: lowbit's
# `--linear-backend dequant`; its default kernels' logits are reported beside), and every decoder
# Linear run by compressed-tensors on lowbit's own inputs against lowbit's outputs. Writes one JSON
# record per checkpoint under OUT_DIR and fails if any check fails. The committed record is
# tests/golden/llmcompressor/lowbit_checks/; CTest runs this as lowbit_reference_checks where the
# venv exists.
#
# Usage: [CHECKS=REGEX] scripts/reference/check_lowbit_checkpoints.sh LOWBIT_BINARY OUT_DIR [PYTHON]
#   CHECKS: only the checks whose name matches this extended regex (default: all fifteen).
#   PYTHON: the reference venv's python (scripts/reference/setup-llmcompressor-venv.sh), default
#   $LOWBIT_LLMC_PYTHON, else <repo>/.venv-llmcompressor/bin/python (the setup script's default);
#   exit 77 (skipped) when there is none.
set -euo pipefail
lowbit=$(realpath "$1")
out=$(realpath -m "$2")
cd "$(dirname "$0")/../.."
python=${3:-${LOWBIT_LLMC_PYTHON:-$PWD/.venv-llmcompressor/bin/python}}
if [ ! -x "$python" ]; then  # 77: CTest's "skipped"
  echo "check_lowbit_checkpoints: no reference venv at $python (make one with" \
       "scripts/reference/setup-llmcompressor-venv.sh, or set LOWBIT_LLMC_PYTHON): skipped" >&2
  exit 77
fi
model=models/ref-llama-19m
mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=

mapfile -t prompts < <("$python" scripts/reference/check_lowbit_checkpoint.py "$model" \
  --print-prompt-ids 2>/dev/null | sed -nE 's/^prompt[0-9]+: --prompt-ids ([0-9,]+)$/\1/p')
[ ${#prompts[@]} -gt 0 ] || { echo "could not read the golden prompts" >&2; exit 1; }

status=0
check() {  # name, lowbit quantize arguments
  local name=$1
  shift
  [[ $name =~ ${CHECKS:-.} ]] || return 0
  local dir="$out/$name"
  "$lowbit" quantize "$model" -o "$dir" --overwrite --no-progress "$@" >/dev/null 2>&1
  local logits=() kernel_logits=() io=()
  for i in "${!prompts[@]}"; do
    # Every decoder Linear's input and output too: the long (last) prompt's for the per-module
    # check on lowbit's own inputs, all of them for the float64 forward that follows lowbit
    # through rounding ties.
    "$lowbit" logits "$dir" --prompt-ids "${prompts[$i]}" --linear-backend dequant \
      --dump-linear-io "$out/$name-linear-io-$i.safetensors" \
      -o "$out/$name-logits-$i.safetensors" >/dev/null 2>&1
    "$lowbit" logits "$dir" --prompt-ids "${prompts[$i]}" \
      -o "$out/$name-kernel-logits-$i.safetensors" >/dev/null 2>&1
    logits+=("$out/$name-logits-$i.safetensors")
    kernel_logits+=("$out/$name-kernel-logits-$i.safetensors")
    io+=("$out/$name-linear-io-$i.safetensors")
  done
  if "$python" scripts/reference/check_lowbit_checkpoint.py "$dir" --lowbit-logits "${logits[@]}" \
      --lowbit-kernel-logits "${kernel_logits[@]}" --lowbit-linear-io "${io[@]}" \
      --load-dtype bfloat16 --lowbit-tol 1e-3 --json "$out/$name.json" > "$out/$name.log" 2>&1; then
    echo "$name: ok"
  else
    echo "$name: FAILED (see $out/$name.log)"
    status=1
  fi
  rm -f "${io[@]}"  # 55 MB for the long prompt
}

calib=(--dataset data/text/calibration.txt --num-samples 32 --seq-len 512)
check W4A16-gptq --scheme W4A16 --algo gptq "${calib[@]}"
check W4A16_ASYM-rtn --scheme W4A16_ASYM --algo rtn
check W8A16-rtn --scheme W8A16 --algo rtn
check W8A8-sq-gptq --scheme W8A8 --algo gptq --smoothquant 0.8 "${calib[@]}"
check FP8-rtn --scheme FP8 --algo rtn "${calib[@]}"
check FP8_DYNAMIC-rtn --scheme FP8_DYNAMIC --algo rtn
check FP8_BLOCK-rtn --scheme FP8_BLOCK --algo rtn
check NVFP4A16-rtn --scheme NVFP4A16 --algo rtn
check MXFP4A16-rtn --scheme MXFP4A16 --algo rtn
check W4A8-gptq --scheme W4A8 --algo gptq "${calib[@]}"
check W4A8_CHANNEL-rtn --scheme W4A8_CHANNEL --algo rtn
check W4AFP8-rtn --scheme W4AFP8 --algo rtn
check NVFP4-rtn --scheme NVFP4 --algo rtn "${calib[@]}"
check MXFP4-rtn --scheme MXFP4 --algo rtn
# A config group no preset names: static asymmetric int8 inputs (input_zero_point), minmax observer.
check W8A8_STATIC_ASYM-rtn --recipe scripts/reference/recipes/w8a8_static_asym.yaml "${calib[@]}"
# Not checked: actorder group (weight_g_idx), which compressed-tensors 0.19 itself rejects.
exit $status
