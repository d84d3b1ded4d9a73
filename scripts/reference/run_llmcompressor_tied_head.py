#!/usr/bin/env python3
"""Reference checkpoint for quantizing a *tied* lm_head: what llm-compressor writes when the targets
reach lm_head of a model whose config says tie_word_embeddings true.

llm-compressor 0.14 unties the embeddings first (QuantizationMixin.start_calibration ->
untie_word_embeddings: the embedding and lm_head get separate copies of the matrix and the config
says tie_word_embeddings false), then quantizes lm_head like any Linear. lowbit's quantizer must
write the same checkpoint (tests/golden/llmcompressor_rtn_test.cc, LlmCompressorRtnTest.TiedLmHead).

Model: tests/golden/arch/llama3-ropescaled-tied (a tiny random Llama, tied embeddings, bf16; made by
scripts/fixtures for the architecture tests). Recipe: QuantizationModifier(targets="Linear",
scheme="W4A16", ignore=[]) (round to nearest: no calibration data). Saved with
save_pretrained(save_compressed=True) into a scratch directory; recorded into
tests/golden/llmcompressor/rtn_w4a16_tied_head/:
  config.json     copied byte for byte
  tensors.json    name, dtype, shape, sha256 of the raw bytes of every tensor (as run_llmcompressor.py)

Usage (repository root; venv from scripts/reference/setup-llmcompressor-venv.sh):
  CUDA_VISIBLE_DEVICES= /work/venv-llmc/bin/python scripts/reference/run_llmcompressor_tied_head.py \
      [--scratch /work/scratch-llmc]
"""
import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(REPO, "tests", "golden", "arch", "llama3-ropescaled-tied")
NAME = "rtn_w4a16_tied_head"
GOLDEN = os.path.join(REPO, "tests", "golden", "llmcompressor", NAME)

sys.path.insert(0, os.path.dirname(__file__))
from run_llmcompressor import record_checkpoint  # noqa: E402  (tensors.json, same format)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", default="/work/scratch-llmc")
    args = ap.parse_args()
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16)
    assert model.config.tie_word_embeddings, "the fixture must be tied"
    oneshot(model=model, recipe=[QuantizationModifier(targets="Linear", scheme="W4A16", ignore=[])])
    out = os.path.join(args.scratch, NAME)
    if os.path.isdir(out):
        shutil.rmtree(out)
    model.save_pretrained(out, save_compressed=True)
    # record_checkpoint also copies recipe.yaml and keeps layer 0 in layer0.safetensors; this
    # golden keeps only config.json and tensors.json (the whole model is a few hundred KB, and
    # every tensor's hash is compared anyway).
    summary = record_checkpoint(NAME, out)
    for extra in ("recipe.yaml", "layer0.safetensors"):
        path = os.path.join(GOLDEN, extra)
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(GOLDEN, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    print(json.dumps({"tie_word_embeddings": config.get("tie_word_embeddings"),
                      "ignore": config["quantization_config"]["ignore"], **summary}))


if __name__ == "__main__":
    main()
