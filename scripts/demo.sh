#!/usr/bin/env bash
# make demo: the main job on the bundled model. For now: describe it, generate from it (plain and
# chat), and measure its perplexity on held-out text. Later issues add quantization to this demo.
set -euo pipefail
lowbit=$1
model=$2
heading() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

heading "lowbit inspect $model"
"$lowbit" inspect "$model"

heading "lowbit generate $model --prompt 'The history of the city' --max-tokens 48"
"$lowbit" generate "$model" --prompt "The history of the city" --max-tokens 48 --stats

heading "lowbit generate $model --chat --prompt 'Tell me about the sea.' (sampled, seed 1)"
"$lowbit" generate "$model" --chat --prompt "Tell me about the sea." --max-tokens 48 \
  --temperature 0.8 --top-p 0.95 --seed 1

heading "lowbit ppl $model --text data/text/heldout.txt --max-windows 40"
"$lowbit" ppl "$model" --text data/text/heldout.txt --max-windows 40
