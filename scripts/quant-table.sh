#!/usr/bin/env bash
# The quality table of docs/quantization.md: the embedded model quantized with every preset, by
# round-to-nearest and GPTQ (plus AWQ for W4A16 / W4A16_ASYM and SmoothQuant + GPTQ for W8A8), with
# 128 samples × 512 tokens of data/text/calibration.txt; for each: heldout perplexity (the
# reference.json protocol: all 512-token windows of data/text/heldout.txt, no BOS), size of the
# weight files and quantize time. Writes one JSON line per run to OUT.jsonl and a Markdown table.
#
# Usage: scripts/quant-table.sh LOWBIT_BINARY OUT_DIR [MAX_WINDOWS]   (MAX_WINDOWS 0 = all)
set -euo pipefail
lowbit=$1
out=$2
windows=${3:-0}
model=models/ref-llama-19m
mkdir -p "$out"
jsonl="$out/quant-table.jsonl"
: > "$jsonl"

ppl_of() { "$lowbit" ppl "$1" --text data/text/heldout.txt --max-windows "$windows" --json |
  sed -E 's/.*"perplexity": ([0-9.]+).*/\1/'; }

echo "{\"name\": \"BF16\", \"algo\": \"-\", \"ppl\": $(ppl_of "$model"), \"bytes\": $(du -cb "$model"/*.safetensors | tail -1 | cut -f1), \"seconds\": 0}" >> "$jsonl"

run() {  # name, then lowbit quantize arguments
  local name=$1
  shift
  local dir="$out/$name"
  local report
  report=$("$lowbit" quantize "$model" -o "$dir" --overwrite --no-progress --json \
    --dataset data/text/calibration.txt --num-samples 128 --seq-len 512 "$@" 2>/dev/null | tail -1)
  local seconds bytes
  seconds=$(echo "$report" | sed -E 's/.*"seconds": ([0-9.]+).*/\1/')
  bytes=$(echo "$report" | sed -E 's/.*"output_bytes": ([0-9]+).*/\1/')
  echo "{\"name\": \"$name\", \"args\": \"$*\", \"ppl\": $(ppl_of "$dir"), \"bytes\": $bytes, \"seconds\": $seconds}" >> "$jsonl"
  tail -1 "$jsonl"
}

for scheme in W4A16 W4A16_ASYM W8A16 W8A8 W4A8 W4A8_CHANNEL W4AFP8 FP8 FP8_DYNAMIC FP8_BLOCK \
              NVFP4A16 NVFP4 MXFP4A16 MXFP4; do
  run "$scheme-rtn" --scheme "$scheme" --algo rtn
  run "$scheme-gptq" --scheme "$scheme" --algo gptq
done
run "W4A16-awq" --scheme W4A16 --algo awq
run "W4A16_ASYM-awq" --scheme W4A16_ASYM --algo awq
run "W8A8-sq0.8-gptq" --scheme W8A8 --algo gptq --smoothquant 0.8

python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = rows[0]["ppl"]
print("| checkpoint | heldout ppl | vs BF16 | size MiB | quantize s |")
print("|---|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['name']} | {r['ppl']:.3f} | {100*(r['ppl']/base-1):+.2f}% | {r['bytes']/2**20:.2f} | {r['seconds']:.1f} |")
PY
