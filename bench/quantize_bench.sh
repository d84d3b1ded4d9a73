#!/usr/bin/env bash
# GPTQ W4A16 (group 128) of a Llama-3.2-1B-shape model (lowbit synth) on this machine's CPU: wall
# time, peak RSS and the split between layer forward passes, Hessian accumulation and the GPTQ
# column loop, printed beside the FLOP count of the work (bench/NOTES.md has the arithmetic).
#
# Usage: bench/quantize_bench.sh LOWBIT [SAMPLES] [SEQ_LEN] [THREADS]   (defaults 128 512 2)
set -euo pipefail
lowbit=$1
samples=${2:-128}
seq=${3:-512}
threads=${4:-2}
model=${SYNTH_DIR:-build/synth-llama-3.2-1b}
out=${OUT_DIR:-build/bench-quantize}
[ -f "$model/config.json" ] || "$lowbit" synth --like llama-3.2-1b -o "$model"
report=$("$lowbit" quantize "$model" -o "$out" --overwrite --scheme W4A16 --algo gptq \
  --dataset data/text/calibration.txt --num-samples "$samples" --seq-len "$seq" \
  --threads "$threads" --no-progress --json 2>/dev/null | tail -1)
echo "$report"
python3 - "$report" "$samples" "$seq" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); n = int(sys.argv[2]) * int(sys.argv[3])
h, inter, layers, kv = 2048, 8192, 16, 512
linear = h * h * 2 + h * kv * 2 + 3 * h * inter          # weights per layer (q, o, k, v, gate, up, down)
fwd = 2 * 2 * n * linear * layers                       # calibrate + propagate passes, 2 FLOP/MAC
hess = 2 * n * (h * h * 2 + inter * inter) * layers     # X^T X for the q (shared k, v), o, gate (shared up), down inputs
gptq = 2 * layers * (h*h*h*2 + kv*h*h*2 + 2*inter*h*h + h*inter*inter)  # column loop ~ rows * cols^2
t = r["seconds"]; f = r["seconds_forward"] - r["seconds_hessian"]
print(f"tokens {n}: forward {fwd/1e12:.1f} TFLOP in {f:.0f} s = {fwd/f/1e9:.0f} GFLOP/s; "
      f"Hessians {hess/1e12:.1f} TFLOP in {r['seconds_hessian']:.0f} s = {hess/max(r['seconds_hessian'],1e-9)/1e9:.0f} GFLOP/s; "
      f"GPTQ loop {gptq/1e12:.1f} TFLOP in {r['seconds_algorithm']:.0f} s = {gptq/max(r['seconds_algorithm'],1e-9)/1e9:.0f} GFLOP/s; "
      f"total {t:.0f} s, peak RSS {r['peak_rss_bytes']/2**30:.2f} GiB")
PY
