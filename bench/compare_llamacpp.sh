#!/usr/bin/env bash
# Side-by-side CPU speed of lowbit and llama.cpp on the same model shape (issue 4 speed targets).
#
#   bench/compare_llamacpp.sh [WORKDIR]          (default WORKDIR: /work/llamacpp-bench)
#
# Everything it builds or writes lives in WORKDIR, outside the repository; nothing of llama.cpp is
# ever copied into the repo. Steps, each skipped when its output already exists:
#   1. llama.cpp: a source snapshot exported from the git dir $LLAMACPP_GIT (a mirror fetched
#      beforehand, e.g. github:ggerganov/llama.cpp) at $LLAMACPP_REV, built Release with
#      -DGGML_NATIVE=ON, targets llama-bench and llama-quantize only.
#   2. `lowbit synth --like llama-3.2-1b` (random bf16 weights, tied embedding).
#   3. GGUF: convert_hf_to_gguf.py --outtype bf16, then llama-quantize to Q8_0 and Q4_0.
#   4. lowbit RTN checkpoints: W4A16 (group 128), W8A8 (int8 per channel, dynamic per-token int8
#      inputs), FP8_DYNAMIC (e4m3 per channel; CPUs have no fp8 arithmetic, so lowbit runs it
#      with the fp8 weight-only kernel and emulates the input rounding in fp32).
#   5. Timing, $ROUNDS rounds; in each round lowbit and llama.cpp runs alternate (odd rounds in
#      one order, even rounds reversed) so that load from other jobs hits both alike:
#      llama-bench -t T -p PP -n TG -r R   and   lowbit bench -t T --prompt-tokens PP
#      --decode-tokens TG --repeats R. The table gives, per format, the best rate over all
#      repetitions of all rounds (llama-bench: best of its per-repetition samples; lowbit bench:
#      its best repetition), the ratios lowbit / llama.cpp, the decode ratio of each round and
#      their median (the machine's bandwidth moves between rounds), and the STREAM triad bandwidth that
#      lowbit bench measures in each of its runs. GGUF-Q8_0 / GGUF-Q4_0: lowbit on the very files
#      llama.cpp runs (issue 9; Q4_0 / Q8_0 / Q6_K matrices on the int kernels; --dtype bfloat16
#      for the tensors lowbit decodes at load, the embedding among them).
#   W4A16-HEAD / W8A8-HEAD: the same schemes with lm_head quantized too (`--ignore ""`: lowbit
#      unties it from the embedding, as llm-compressor does when lm_head is targeted), the
#      counterpart of llama.cpp's quantized output tensor (Q6_K in its Q4_0 / Q8_0 files).
#   FORMATS="GGUF-Q4_0 Q4_0 ..." runs only those steps (format names as in the table).
#
# Environment: LOWBIT (default build/bin/lowbit of this repo), LLAMACPP_GIT (default
# /work/.mirror/ggerganov+llama.cpp/repo), LLAMACPP_REV (default HEAD of that git dir),
# GGUF_PYTHON (a python with torch, transformers >= 5, safetensors, numpy, pyyaml; default
# /work/venv-gguf/bin/python if present, else /work/venv-llmc/bin/python), THREADS (2), PP (512),
# TG (128), REPEATS (3), ROUNDS (2), JOBS (build parallelism, default nproc).
#
# Notes on the comparison:
# - Weight GB/s = bytes a decode step reads (every weight once; the tied embedding is the lm_head)
#   x decode tok/s. lowbit bench computes it from the checkpoint; for llama.cpp it is the model
#   size llama-bench reports.
# - llama.cpp's Q4_0 keeps the tied token embedding / output in Q6_K; lowbit's W4A16 leaves lm_head
#   (= the tied embedding, 0.53 GB) in bf16, as llm-compressor's presets do. So W4A16 reads more
#   bytes per token than Q4_0 (about 1.0 vs 0.77 GB on this shape).
# - llama-bench's tg starts from an empty context; lowbit bench decodes after an 8-token prompt.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/work/llamacpp-bench}
LOWBIT=${LOWBIT:-$REPO/build/bin/lowbit}
LLAMACPP_GIT=${LLAMACPP_GIT:-/work/.mirror/ggerganov+llama.cpp/repo}
LLAMACPP_REV=${LLAMACPP_REV:-HEAD}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPEATS=${REPEATS:-3}
ROUNDS=${ROUNDS:-2}
JOBS=${JOBS:-$(nproc)}
if [[ -z ${GGUF_PYTHON:-} ]]; then
  if [[ -x /work/venv-gguf/bin/python ]]; then GGUF_PYTHON=/work/venv-gguf/bin/python
  else GGUF_PYTHON=/work/venv-llmc/bin/python; fi
fi

case $WORK in "$REPO"|"$REPO"/*) echo "WORKDIR must be outside the repository ($REPO)" >&2; exit 2;; esac
[[ -x $LOWBIT ]] || { echo "no lowbit binary at $LOWBIT (make build)" >&2; exit 2; }
mkdir -p "$WORK"
LLAMA=$WORK/llama.cpp
LLAMA_BIN=$LLAMA/build/bin
SYNTH=$WORK/synth-llama-3.2-1b
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# 1. llama.cpp ---------------------------------------------------------------------------------
build_llamacpp() {
  if [[ -x $LLAMA_BIN/llama-bench && -x $LLAMA_BIN/llama-quantize ]]; then return; fi
  [[ -d $LLAMACPP_GIT ]] || { echo "LLAMACPP_GIT=$LLAMACPP_GIT is not a git dir (fetch github:ggerganov/llama.cpp first)" >&2; exit 2; }
  local rev excludes=()
  rev=$(git --git-dir="$LLAMACPP_GIT" rev-parse "$LLAMACPP_REV^{commit}")
  # A mirror may lack its largest blobs (vocab GGUFs used only by tests); git archive stops at
  # the first missing object, so leave out every blob the mirror does not hold.
  while read -r path; do excludes+=(":(exclude,literal)$path"); done < <(
    git --git-dir="$LLAMACPP_GIT" ls-tree -r "$rev" --format='%(objecttype) %(objectname) %(path)' |
      awk '$1 == "blob" {print $2, $3}' |
      git --git-dir="$LLAMACPP_GIT" cat-file --batch-check='%(objectname) %(rest)' 2>/dev/null |
      awk 'NF == 2 && $2 == "missing"' |
      while read -r oid _; do
        git --git-dir="$LLAMACPP_GIT" ls-tree -r "$rev" --format='%(objectname) %(path)' | awk -v o="$oid" '$1 == o {print $2}'
      done)
  log "llama.cpp: exporting $rev (${#excludes[@]} absent blobs left out) to $LLAMA"
  rm -rf "$LLAMA" && mkdir -p "$LLAMA"
  git --git-dir="$LLAMACPP_GIT" archive "$rev" -- . "${excludes[@]}" | tar -x -C "$LLAMA"
  echo "$rev" > "$LLAMA/REVISION"
  cmake -S "$LLAMA" -B "$LLAMA/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF >"$WORK/llamacpp-cmake.log"
  log "llama.cpp: building llama-bench and llama-quantize (-j $JOBS)"
  cmake --build "$LLAMA/build" -j "$JOBS" --target llama-bench llama-quantize >"$WORK/llamacpp-build.log"
}

# 2.-4. models ---------------------------------------------------------------------------------
make_models() {
  if [[ ! -f $SYNTH/config.json ]]; then
    log "lowbit synth --like llama-3.2-1b -> $SYNTH"
    "$LOWBIT" synth --like llama-3.2-1b -o "$SYNTH"
  fi
  if [[ ! -f $WORK/gguf/bf16.gguf ]]; then
    mkdir -p "$WORK/gguf"
    log "convert_hf_to_gguf.py --outtype bf16 ($GGUF_PYTHON)"
    # The synth checkpoint carries a small test tokenizer (8192 tokens, Llama-3 pre-tokenizer
    # regex) in a 128256-token embedding, and a transformers-5 config (rope_parameters). Three
    # adjustments, made here in memory, let this converter take it: the Llama-3 BPE vocab path
    # (ids past 8192 become [PAD] tokens, as the converter does for any short vocab), the
    # pre-tokenizer named "llama-bpe" (its hash check only knows released tokenizers), and
    # rope_theta / rope_scaling copied from rope_parameters.
    PYTHONPATH="$LLAMA/gguf-py:$LLAMA" "$GGUF_PYTHON" - "$SYNTH" "$WORK/gguf/bf16.gguf" \
      >"$WORK/gguf/convert-bf16.log" 2>&1 <<'EOF' || { tail -n 20 "$WORK/gguf/convert-bf16.log" >&2; exit 1; }
import sys, types
try:
    import sentencepiece  # noqa: F401
    import convert_hf_to_gguf as conv
except ImportError:
    # gguf-py imports sentencepiece at load, but only SentencePiece vocabs (not this one) use it:
    # a stub while gguf-py loads, removed again so that transformers sees it absent.
    stub = types.ModuleType("sentencepiece")
    stub.SentencePieceProcessor = None
    sys.modules["sentencepiece"] = stub
    import convert_hf_to_gguf as conv
    del sys.modules["sentencepiece"]

load_hparams = conv.Model.load_hparams
def patched_load_hparams(dir_model):
    hparams = load_hparams(dir_model)
    rope = hparams.get("rope_parameters")
    if rope and "rope_scaling" not in hparams:
        hparams["rope_scaling"] = dict(rope)
        hparams.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
        hparams.setdefault("original_max_position_embeddings", rope.get("original_max_position_embeddings", 8192))
    return hparams
conv.Model.load_hparams = staticmethod(patched_load_hparams)
conv.LlamaModel.set_vocab = lambda self: self._set_vocab_gpt2()
conv.Model.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
sys.argv = ["convert_hf_to_gguf.py", sys.argv[1], "--outtype", "bf16", "--outfile", sys.argv[2]]
conv.main()
EOF
  fi
  local q
  for q in Q8_0 Q4_0; do
    if [[ ! -f $WORK/gguf/${q,,}.gguf ]]; then
      log "llama-quantize $q"
      "$LLAMA_BIN/llama-quantize" "$WORK/gguf/bf16.gguf" "$WORK/gguf/${q,,}.gguf.tmp" "$q" "$JOBS" \
        >"$WORK/gguf/quantize-${q,,}.log" 2>&1
      mv "$WORK/gguf/${q,,}.gguf.tmp" "$WORK/gguf/${q,,}.gguf"
    fi
  done
  local format scheme head
  for format in W4A16 W8A8 FP8_DYNAMIC W4A16-HEAD W8A8-HEAD; do
    if [[ -n ${FORMATS:-} && " $FORMATS " != *" ${format%_DYNAMIC} "* ]]; then continue; fi
    scheme=${format%-HEAD}
    head=()  # -HEAD: lm_head quantized too (--ignore ""), untied from the embedding
    [[ $format == *-HEAD ]] && head=(--ignore "")
    if [[ ! -f $WORK/lowbit-${format,,}/config.json ]]; then
      log "lowbit quantize --scheme $scheme --algo rtn ${head[*]}"
      "$LOWBIT" quantize "$SYNTH" -o "$WORK/lowbit-${format,,}" --scheme "$scheme" --algo rtn \
        "${head[@]}" --no-progress --overwrite -t "$THREADS" >"$WORK/quantize-${format,,}.log" 2>&1
    fi
  done
}

# 5. timing ------------------------------------------------------------------------------------
RESULTS=$WORK/results.jsonl

run_lowbit() {  # FORMAT DIR-or-GGUF [lowbit flags]
  log "round $ROUND: lowbit bench $1"
  local out
  out=$("$LOWBIT" bench "$2" "${@:3}" -t "$THREADS" --prompt-tokens "$PP" --decode-tokens "$TG" --repeats "$REPEATS" --json | tail -n 1)
  printf '{"round": %d, "tool": "lowbit", "format": "%s", "result": %s}\n' "$ROUND" "$1" "$out" >>"$RESULTS"
}

run_llamacpp() {  # FORMAT GGUF
  log "round $ROUND: llama-bench $1"
  local out
  out=$("$LLAMA_BIN/llama-bench" -m "$2" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPEATS" -o json 2>/dev/null |
    tr -d '\n')
  printf '{"round": %d, "tool": "llama.cpp", "format": "%s", "result": %s}\n' "$ROUND" "$1" "$out" >>"$RESULTS"
}

run_round() {
  local steps=(
    "run_lowbit BF16 $SYNTH"
    "run_llamacpp BF16 $WORK/gguf/bf16.gguf"
    "run_lowbit W8A8 $WORK/lowbit-w8a8"
    "run_llamacpp Q8_0 $WORK/gguf/q8_0.gguf"
    "run_lowbit W4A16 $WORK/lowbit-w4a16"
    "run_lowbit W4A16-HEAD $WORK/lowbit-w4a16-head"
    "run_lowbit W8A8-HEAD $WORK/lowbit-w8a8-head"
    "run_llamacpp Q4_0 $WORK/gguf/q4_0.gguf"
    "run_lowbit FP8 $WORK/lowbit-fp8_dynamic"
    "run_lowbit GGUF-Q8_0 $WORK/gguf/q8_0.gguf --dtype bfloat16"
    "run_lowbit GGUF-Q4_0 $WORK/gguf/q4_0.gguf --dtype bfloat16"
  )
  if [[ -n ${FORMATS:-} ]]; then  # keep the steps whose format (second word) FORMATS names
    local kept=() step
    for step in "${steps[@]}"; do
      read -r _ format _ <<<"$step"
      [[ " $FORMATS " == *" $format "* ]] && kept+=("$step")
    done
    steps=("${kept[@]}")
  fi
  local i n=${#steps[@]}
  for ((i = 0; i < n; ++i)); do
    if ((ROUND % 2)); then ${steps[i]}; else ${steps[n - 1 - i]}; fi
  done
}

summarize() {
  python3 - "$RESULTS" "$PP" "$TG" <<'EOF'
import json, sys
path, pp, tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
best = {}   # (tool, format) -> dict
round_tg = {}  # (tool, format, round) -> best tg of that round
bw = []
for line in open(path):
    rec = json.loads(line)
    key = (rec["tool"], rec["format"])
    b = best.setdefault(key, {"pp": 0.0, "tg": 0.0, "gbps": 0.0})
    res = rec["result"]
    rkey = (rec["tool"], rec["format"], rec["round"])
    if rec["tool"] == "lowbit":
        b["pp"] = max(b["pp"], res["prefill_tps"])
        b["tg"] = max(b["tg"], res["decode_tps"])
        round_tg[rkey] = max(round_tg.get(rkey, 0.0), res["decode_tps"])
        b["gbps"] = max(b["gbps"], res["decode_weight_gbps"])
        bw.append(res["memory_bandwidth_gbps"])
    else:
        for test in res:
            rate = max(test["samples_ts"])
            if test["n_prompt"] == pp and test["n_gen"] == 0:
                b["pp"] = max(b["pp"], rate)
            elif test["n_gen"] == tg and test["n_prompt"] == 0:
                b["tg"] = max(b["tg"], rate)
                round_tg[rkey] = max(round_tg.get(rkey, 0.0), rate)
                b["gbps"] = max(b["gbps"], test["model_size"] * rate / 1e9)
pairs = [("BF16", "BF16"), ("W8A8", "Q8_0"), ("W8A8-HEAD", "Q8_0"), ("W4A16", "Q4_0"),
         ("W4A16-HEAD", "Q4_0"), ("FP8", "Q8_0"),
         ("GGUF-Q8_0", "Q8_0"), ("GGUF-Q4_0", "Q4_0")]
print(f"| format (lowbit / llama.cpp) | lowbit pp{pp} tok/s | lowbit tg{tg} tok/s | lowbit weight GB/s "
      f"| llama.cpp pp{pp} | llama.cpp tg{tg} | llama.cpp weight GB/s | pp ratio | tg ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for lb, lc in pairs:
    a, c = best.get(("lowbit", lb)), best.get(("llama.cpp", lc))
    if a is None or c is None:
        continue
    print(f"| {lb} / {lc} | {a['pp']:.1f} | {a['tg']:.2f} | {a['gbps']:.1f} | {c['pp']:.1f} | {c['tg']:.2f} "
          f"| {c['gbps']:.1f} | {a['pp'] / c['pp']:.2f}x | {a['tg'] / c['tg']:.2f}x |")
# The machine's bandwidth moves between runs: the decode ratio of each round (its two tools ran
# back to back) and their median say more than the best-of-all ratio above.
rounds = sorted({k[2] for k in round_tg})
for lb, lc in pairs:
    ratios = [round_tg[("lowbit", lb, r)] / round_tg[("llama.cpp", lc, r)] for r in rounds
              if ("lowbit", lb, r) in round_tg and ("llama.cpp", lc, r) in round_tg]
    if ratios:
        mid = sorted(ratios)[len(ratios) // 2] if len(ratios) % 2 else \
            sum(sorted(ratios)[len(ratios) // 2 - 1:len(ratios) // 2 + 1]) / 2
        print(f"\n{lb} / {lc} tg ratio per round: " + ", ".join(f"{x:.2f}x" for x in ratios) +
              f" (median {mid:.2f}x)", end="")
print()
if bw:
    print(f"\nSTREAM triad (lowbit bench, {len(bw)} runs): {min(bw):.1f}-{max(bw):.1f} GB/s")
EOF
}

build_llamacpp
make_models
: >"$RESULTS"
for ((ROUND = 1; ROUND <= ROUNDS; ++ROUND)); do run_round; done
log "raw results: $RESULTS"
summarize
