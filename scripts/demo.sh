#!/usr/bin/env bash
# make demo: the main job on the bundled model, end to end: look at it, generate from it, quantize
# it to W4A16 with GPTQ on the bundled calibration text, and compare size, held-out perplexity and
# generations of the BF16 and the quantized checkpoints.
set -euo pipefail
lowbit=$1
model=$2
out=${DEMO_OUT:-build/demo/ref-llama-19m-W4A16-gptq}
heading() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ppl_of() { "$lowbit" ppl "$1" --text data/text/heldout.txt --max-windows 40 --json |
  sed -E 's/.*"perplexity": ([0-9.]+).*/\1/'; }
mib_of() { du -cm "$1"/*.safetensors | tail -1 | cut -f1; }

heading "lowbit inspect $model"
"$lowbit" inspect "$model"

heading "lowbit generate $model --prompt 'The history of the city' --max-tokens 48"
"$lowbit" generate "$model" --prompt "The history of the city" --max-tokens 48 --stats

heading "lowbit generate $model --chat --prompt 'Tell me about the sea.' (sampled, seed 1)"
"$lowbit" generate "$model" --chat --prompt "Tell me about the sea." --max-tokens 48 \
  --temperature 0.8 --top-p 0.95 --seed 1

heading "lowbit quantize $model -o $out --scheme W4A16 --algo gptq --dataset data/text/calibration.txt --num-samples 128 --seq-len 512"
mkdir -p "$(dirname "$out")"
"$lowbit" quantize "$model" -o "$out" --overwrite --scheme W4A16 --algo gptq \
  --dataset data/text/calibration.txt --num-samples 128 --seq-len 512 2>&1 |
  grep -v "GPTQ error"

heading "BF16 vs W4A16 (GPTQ, group 128): size and perplexity on 40 windows of data/text/heldout.txt"
printf '%-28s %10s %12s\n' checkpoint "size MiB" perplexity
printf '%-28s %10s %12s\n' "BF16 (bundled)" "$(mib_of "$model")" "$(ppl_of "$model")"
printf '%-28s %10s %12s\n' "W4A16 GPTQ (lowbit)" "$(mib_of "$out")" "$(ppl_of "$out")"

heading "lowbit generate $out --prompt 'The history of the city' --max-tokens 48"
"$lowbit" generate "$out" --prompt "The history of the city" --max-tokens 48 --stats
