#!/usr/bin/env python3
"""Calibration samples from a text file, by the protocol lowbit uses for text calibration data.

Protocol (tests/golden/llmcompressor/README.md states the same; lowbit's C++ must match it bit for bit):
  1. Tokenize the whole file as ONE string with the model's tokenizer.json (HF `tokenizers`),
     no special tokens (add_special_tokens=False).
  2. Cut the ids into consecutive, non-overlapping windows of (seq_len - 1) tokens; window w covers
     ids[w*(seq_len-1) : (w+1)*(seq_len-1)]. A last window shorter than seq_len - 1 is dropped.
  3. Prepend the BOS id (config.json bos_token_id; 0 for ref-llama-19m) to every window, giving
     samples of exactly seq_len tokens.
  4. Shuffle the window indices 0..n-1 with a Fisher-Yates shuffle driven by SplitMix64 seeded with
     `seed` (default 42): for i = n-1 down to 1: j = next() % (i + 1); swap(idx[i], idx[j]).
     SplitMix64 (all arithmetic mod 2^64):
         state += 0x9E3779B97F4A7C15; z = state;
         z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
         z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
         return z ^ (z >> 31);
     The first call returns the value for state = seed + 0x9E3779B97F4A7C15.
  5. Keep the first num_samples shuffled windows, in shuffled order (error if fewer exist).

Reference environment: /work/venv-llmc (tokenizers 0.23.3; see requirements-llmcompressor.txt).
Usage:
  python scripts/reference/make_calibration_ids.py [--model models/ref-llama-19m]
      [--text data/text/calibration.txt] [--seq-len 512] [--num-samples 128] [--seed 42]
      [-o tests/golden/llmcompressor/calibration_128x512.json]
"""
import argparse
import json
import os

from tokenizers import Tokenizer

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def shuffled_indices(n, seed):
    rng = SplitMix64(seed)
    idx = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.next() % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx


def calibration_samples(model_dir, text_path, seq_len, num_samples, seed):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        bos = json.load(f)["bos_token_id"]
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    ids = tok.encode(text, add_special_tokens=False).ids
    width = seq_len - 1
    n_windows = len(ids) // width
    if n_windows < num_samples:
        raise SystemExit(f"{text_path}: only {n_windows} windows of {width} tokens, need {num_samples}")
    order = shuffled_indices(n_windows, seed)[:num_samples]
    samples = [[bos] + ids[w * width:(w + 1) * width] for w in order]
    info = {"text_tokens": len(ids), "windows": n_windows, "window_order": order, "bos_id": bos}
    return samples, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/ref-llama-19m")
    ap.add_argument("--text", default="data/text/calibration.txt")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--num-samples", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("-o", "--output", default="tests/golden/llmcompressor/calibration_128x512.json")
    a = ap.parse_args()
    samples, info = calibration_samples(a.model, a.text, a.seq_len, a.num_samples, a.seed)
    # First 8 raw SplitMix64(seed) outputs, so a C++ port can check its generator alone.
    rng = SplitMix64(a.seed)
    first = [str(rng.next()) for _ in range(8)]
    out = {"seq_len": a.seq_len, "num_samples": a.num_samples, "seed": a.seed,
           "bos_id": info["bos_id"], "text_tokens": info["text_tokens"], "windows": info["windows"],
           "window_order": info["window_order"], "splitmix64_first_outputs": first,
           "samples": samples}
    with open(a.output, "w", encoding="utf-8") as f:
        # One sample per line keeps the file diffable.
        f.write("{\n")
        for k, v in out.items():
            if k != "samples":
                f.write(f" {json.dumps(k)}: {json.dumps(v)},\n")
        f.write(' "samples": [\n')
        f.write(",\n".join("  " + json.dumps(s, separators=(",", ":")) for s in samples))
        f.write("\n ]\n}\n")
    print(f"{a.output}: {a.num_samples} x {a.seq_len} from {info['windows']} windows "
          f"({info['text_tokens']} tokens); first windows {info['window_order'][:8]}")


if __name__ == "__main__":
    main()
