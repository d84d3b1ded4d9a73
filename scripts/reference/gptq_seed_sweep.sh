#!/usr/bin/env bash
# GPTQ W4A16 (group 128 and per channel) by llm-compressor and by lowbit on the same calibration
# samples, for several draws of those samples (make_calibration_ids.py --seed N): each pair scored
# by `lowbit ppl --linear-backend dequant` on the first 128 heldout windows. On the embedded model
# one draw's comparison moves by ±0.2 % with the last bits of the arithmetic, so the paired
# differences over several draws, not one draw, say whether one tool is ahead.
# Record: tests/golden/llmcompressor/gptq_seed_sweep.txt (docs/quantization.md).
#
# Usage: scripts/reference/gptq_seed_sweep.sh LOWBIT_BINARY OUT_DIR PYTHON [SEEDS...]
set -euo pipefail
lowbit=$(realpath "$1")
out=$(realpath -m "$2")
python=$3
shift 3
seeds=("${@:-1 2 3 4 5}")
cd "$(dirname "$0")/../.."
mkdir -p "$out"
ppl() {
  "$lowbit" ppl "$1" --text data/text/heldout.txt --max-windows 128 --linear-backend dequant \
    --json 2>/dev/null | sed -E 's/.*"perplexity": ([0-9.]+).*/\1/'
}
for seed in ${seeds[*]}; do
  ids=$out/calibration_seed$seed.json
  [ -f "$ids" ] || "$python" scripts/reference/make_calibration_ids.py --seed "$seed" -o "$ids" >/dev/null
  for cfg in gptq_w4a16_channel gptq_w4a16_g128; do
    "$python" scripts/reference/llmcompressor_oneshot.py "$cfg" "$out/llmc" --calibration "$ids" \
      > "$out/llmc_${cfg}_$seed.log" 2>&1
    reference=$(ppl "$out/llmc")
    "$lowbit" quantize models/ref-llama-19m -o "$out/lowbit" --overwrite --no-progress \
      --calibration-ids "$ids" --recipe "tests/golden/llmcompressor/$cfg/recipe.yaml" \
      > "$out/lowbit_${cfg}_$seed.log" 2>&1
    echo "seed $seed $cfg llm-compressor $reference lowbit $(ppl "$out/lowbit")"
    rm -rf "$out/llmc" "$out/lowbit"
  done
done
