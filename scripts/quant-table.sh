#!/usr/bin/env bash
# The quality table of docs/quantization.md: the embedded model quantized with every preset, by
# round-to-nearest and GPTQ, plus GPTQ per channel, AWQ (W4A16, W4A16_ASYM) and SmoothQuant 0.8 +
# GPTQ (W8A8), all on llm-compressor's 128 samples × 512 tokens of data/text/calibration.txt
# (tests/golden/llmcompressor/calibration_128x512.json, so the rows llm-compressor also made
# compare sample for sample; GPTQ per channel, AWQ W4A16_ASYM and SmoothQuant + GPTQ run
# llm-compressor's own saved recipes). For each checkpoint: heldout perplexity over all 512-token
# windows of data/text/heldout.txt (the reference.json protocol, no BOS) and over the first 128
# windows (the protocol of llm-compressor's numbers in tests/golden/llmcompressor/SUMMARY.json,
# printed beside), both on the bf16-dequantized weights llm-compressor evaluates
# (--linear-backend dequant: the perplexity `lowbit quantize --eval` reports); size of the
# weight files, quantize wall time and peak RSS.
#
# Usage: scripts/quant-table.sh LOWBIT_BINARY OUT_DIR [MAX_WINDOWS]   (MAX_WINDOWS 0 = all)
# Environment: JOBS (runs at once, default 1), THREADS (threads per run, default all cores),
#              ROWS (an extended regex: only rows whose name matches, for a quick check).
# Writes OUT_DIR/quant-table.jsonl (one line per checkpoint, in table order) and prints the table.
set -euo pipefail
lowbit=$(realpath "$1")
out=$2
windows=${3:-0}
jobs_max=${JOBS:-1}
threads=()
[ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")
rows_filter=${ROWS:-.}
model=models/ref-llama-19m
ids=tests/golden/llmcompressor/calibration_128x512.json
recipes=tests/golden/llmcompressor
mkdir -p "$out/rows"
rm -f "$out"/rows/*.json

ppl_of() {  # checkpoint dir, window count, extra ppl flags -> perplexity
  "$lowbit" ppl "$1" --text data/text/heldout.txt --max-windows "$2" "${@:3}" "${threads[@]}" \
    --json 2>/dev/null | sed -E 's/.*"perplexity": ([0-9.]+).*/\1/'
}

row() {  # index, name, llm-compressor SUMMARY key or -, then lowbit quantize arguments
  local index=$1 name=$2 reference=$3
  shift 3
  local dir="$out/$name" report seconds bytes rss
  report=$("$lowbit" quantize "$model" -o "$dir" --overwrite --no-progress --json \
    --calibration-ids "$ids" "${threads[@]}" "$@" 2>"$out/$name.log" | tail -1)
  seconds=$(echo "$report" | sed -E 's/.*"seconds": ([0-9.]+).*/\1/')
  bytes=$(echo "$report" | sed -E 's/.*"output_bytes": ([0-9]+).*/\1/')
  rss=$(echo "$report" | sed -E 's/.*"peak_rss_bytes": ([0-9]+).*/\1/')
  local ppl128 ppl
  ppl128=$(ppl_of "$dir" 128 --linear-backend dequant)
  ppl=$ppl128
  [ "$windows" = 128 ] || ppl=$(ppl_of "$dir" "$windows" --linear-backend dequant)
  printf '{"name": "%s", "args": "%s", "ppl": %s, "ppl128": %s, "bytes": %s, "seconds": %s, "peak_rss": %s, "reference": "%s"}\n' \
    "$name" "$*" "$ppl" "$ppl128" "$bytes" "$seconds" "$rss" \
    "$reference" > "$out/rows/$(printf %03d "$index").json"
  cat "$out/rows/$(printf %03d "$index").json"
  rm -rf "$dir"
}

schedule() {  # row arguments: run in the background once fewer than JOBS runs are going
  [[ $2 =~ $rows_filter ]] || return 0
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  row "$@" &
}

if [[ BF16 =~ $rows_filter ]]; then
  printf '{"name": "BF16", "args": "", "ppl": %s, "ppl128": %s, "bytes": %s, "seconds": 0, "peak_rss": 0, "reference": "bf16"}\n' \
    "$(ppl_of "$model" "$windows")" "$(ppl_of "$model" 128)" \
    "$(du -cb "$model"/*.safetensors | tail -1 | cut -f1)" > "$out/rows/000.json"
fi
# The slowest runs first, so that JOBS > 1 ends sooner; rows are printed in index order.
schedule 100 "W4A16-channel-gptq" gptq_w4a16_channel --recipe "$recipes/gptq_w4a16_channel/recipe.yaml"
schedule 101 "W4A16-awq" - --scheme W4A16 --algo awq
schedule 102 "W4A16_ASYM-awq" awq_w4a16_asym --recipe "$recipes/awq_w4a16_asym/recipe.yaml"
schedule 103 "W8A8-sq0.8-gptq" sq_gptq_w8a8 --recipe "$recipes/sq_gptq_w8a8/recipe.yaml"
index=1
for scheme in W4A16 W4A16_ASYM W8A16 W8A8 W4A8 W4A8_CHANNEL W4AFP8 FP8 FP8_DYNAMIC FP8_BLOCK \
              NVFP4A16 NVFP4 MXFP4A16 MXFP4; do
  lower=$(echo "$scheme" | tr 'A-Z' 'a-z')
  schedule $index "$scheme-rtn" "rtn_$lower" --scheme "$scheme" --algo rtn
  schedule $((index + 1)) "$scheme-gptq" "gptq_$lower" --scheme "$scheme" --algo gptq
  index=$((index + 2))
done
wait

cat "$out"/rows/*.json > "$out/quant-table.jsonl"
python3 - "$out/quant-table.jsonl" "$recipes/SUMMARY.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
reference = json.load(open(sys.argv[2]))["results"]
base = next((r for r in rows if r["name"] == "BF16"), None)
print("| checkpoint | heldout ppl (all windows) | vs BF16 | first 128 windows | llm-compressor, 128 windows | size MiB | quantize s | peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    vs = f"{100 * (r['ppl'] / base['ppl'] - 1):+.2f}%" if base else "-"
    ref = reference.get(r["reference"], {}).get("ppl_heldout")
    ref = f"{ref:.3f}" if ref else "-"
    print(f"| {r['name']} | {r['ppl']:.3f} | {vs} | {r['ppl128']:.3f} | {ref} | {r['bytes'] / 2**20:.2f} | "
          f"{r['seconds']:.1f} | {r['peak_rss'] / 2**20:.0f} |")
PY
