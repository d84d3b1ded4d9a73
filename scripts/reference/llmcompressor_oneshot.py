#!/usr/bin/env python3
"""One llm-compressor oneshot of the embedded model, for experiments beside run_llmcompressor.py
(which records the committed goldens): a named configuration of run_llmcompressor.py, a chosen
calibration-ids file and model dtype, the checkpoint saved compressed to OUT.

Usage (the reference venv, scripts/reference/setup-llmcompressor-venv.sh):
  python scripts/reference/llmcompressor_oneshot.py CONFIG OUT [--calibration IDS.json]
      [--dtype bfloat16|float32]
CONFIG: a name of run_llmcompressor.py's recipe_for (gptq_w4a16_g128, gptq_w4a16_channel, ...).
IDS.json: the format of tests/golden/llmcompressor/calibration_128x512.json
(scripts/reference/make_calibration_ids.py --seed N writes other draws of the same text).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_llmcompressor as reference  # noqa: E402  (sets CUDA_VISIBLE_DEVICES, imports torch)
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--calibration", default=reference.CALIB)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    a = ap.parse_args()
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference.patch_cpu_only()
    reference.CALIB = a.calibration
    model = AutoModelForCausalLM.from_pretrained(reference.MODEL, dtype=getattr(torch, a.dtype))
    tokenizer = AutoTokenizer.from_pretrained(reference.MODEL)
    loader, calib = reference.calibration_loader()
    t0 = time.time()
    oneshot(model=model, dataset=loader, recipe=reference.recipe_for(a.config),
            num_calibration_samples=calib["num_samples"], max_seq_length=calib["seq_len"])
    print(f"{a.config}: oneshot {time.time() - t0:.1f} s", flush=True)
    model.save_pretrained(a.out, save_compressed=True)
    tokenizer.save_pretrained(a.out)


if __name__ == "__main__":
    main()
