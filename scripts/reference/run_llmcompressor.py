#!/usr/bin/env python3
"""Reference checkpoints from the real llm-compressor, for comparison with lowbit's quantizer.

For each configuration below, runs llm-compressor's `oneshot` on the bf16 model (CPU) with the exact
calibration samples of tests/golden/llmcompressor/calibration_128x512.json (made by
make_calibration_ids.py), saves it with save_pretrained(save_compressed=True) into a scratch
directory outside the repository, and records into the golden directory:
  <name>/config.json, <name>/recipe.yaml   copied byte for byte from the saved checkpoint
  <name>/tensors.json                     name, dtype, shape, sha256 of the raw bytes of every tensor
  <name>/layer0.safetensors               every model.layers.0.* tensor, as saved
  SUMMARY.json                            versions, oneshot times, sizes on disk, heldout perplexities

Calibration data: a torch DataLoader (batch 1, file order, no shuffling) over a pre-tokenized
datasets.Dataset with input_ids and attention_mask (all ones), i.e. exactly the 128 samples in the
order of the JSON file. A plain Dataset would go through llm-compressor's samplers, whose order is not
reproducible (RandomSampler), or arbitrary for equal lengths (LengthAwareSampler's unstable argsort);
the sample order changes only floating-point summation order (Hessians, activation statistics).
Everything else is llm-compressor's default (pipeline "independent" -> sequential for calibrated
modifiers, datafree for RTN; batch_size 1; GPTQ block 128, dampening 0.01, actorder static; AWQ
duo_scaling True, n_grid 20; default mappings). ignore = ["lm_head"] everywhere.

Perplexity protocol = tests/golden/ref-llama-19m/reference.json "ppl_protocol": heldout.txt tokenized
without special tokens, non-overlapping 512-token windows (remainder dropped), each window scored alone
without BOS, NLL of tokens 2..512, PPL = exp(total NLL / scored tokens); fp32 compute. The checkpoint is
loaded by transformers' compressed-tensors integration with dequantize=True (weights decompressed
in fp32 from the stored values). Schemes with input activation quantization (W8A8, FP8_DYNAMIC, FP8_BLOCK)
run compressed-tensors' forward, which fake-quantizes the Linear inputs dynamically (per token, or per
group of 128 for FP8_BLOCK): "ppl_heldout" includes that; "ppl_heldout_weight_only" is the same model with
activation quantization disabled (quantization_enabled = False on every quantized module).
--ppl-windows N limits the evaluation to the first N windows.

Reference environment: /work/venv-llmc (or a venv made by scripts/reference/setup-llmcompressor-venv.sh)
(llmcompressor 0.14.0.1, compressed-tensors 0.19.0, torch 2.11.0, transformers 5.17.0; pins in
requirements-llmcompressor.txt). CPU only.

Usage (from the repository root):
  CUDA_VISIBLE_DEVICES= /work/venv-llmc/bin/python scripts/reference/run_llmcompressor.py \
      [--configs NAME...] [--scratch /work/scratch-llmc] [--ppl-windows N] [--skip-oneshot]
  --skip-oneshot re-records files and perplexities from checkpoints already in --scratch.
The committed data was made with:
  CUDA_VISIBLE_DEVICES= /work/venv-llmc/bin/python scripts/reference/run_llmcompressor.py \
      --ppl-windows 128 --bf16-all-windows
then re-recorded (same checkpoints) with --skip-oneshot --skip-ppl.
"""
import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(REPO, "models", "ref-llama-19m")
GOLDEN = os.path.join(REPO, "tests", "golden", "llmcompressor")
CALIB = os.path.join(GOLDEN, "calibration_128x512.json")
HELDOUT = os.path.join(REPO, "data", "text", "heldout.txt")
REFERENCE = os.path.join(REPO, "tests", "golden", "ref-llama-19m", "reference.json")
IGNORE = ["lm_head"]


def recipe_for(name):
    """The llm-compressor recipe (list of modifiers) of one named configuration."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

    rtn = {"rtn_w4a16": "W4A16", "rtn_w4a16_asym": "W4A16_ASYM", "rtn_w8a8": "W8A8",
           "rtn_fp8_dynamic": "FP8_DYNAMIC", "rtn_fp8_block": "FP8_BLOCK"}
    if name in rtn:
        return [QuantizationModifier(targets="Linear", scheme=rtn[name], ignore=IGNORE)]
    if name == "gptq_w4a16_g128":
        return [GPTQModifier(targets="Linear", scheme="W4A16", ignore=IGNORE)]
    if name == "gptq_w4a16_channel":
        weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="channel")
        group = QuantizationScheme(targets=["Linear"], weights=weights)
        return [GPTQModifier(config_groups={"group_0": group}, ignore=IGNORE)]
    if name == "awq_w4a16_asym":
        return [AWQModifier(),
                QuantizationModifier(targets="Linear", scheme="W4A16_ASYM", ignore=IGNORE)]
    if name == "sq_gptq_w8a8":
        return [SmoothQuantModifier(smoothing_strength=0.8),
                GPTQModifier(targets="Linear", scheme="W8A8", ignore=IGNORE)]
    raise SystemExit(f"unknown configuration {name}")


NOTES = [
    "CPU only (CUDA_VISIBLE_DEVICES=''), torch threads as listed; oneshot_seconds is wall time on a 2-core "
    "machine shared with other jobs, oneshot_cpu_seconds the process CPU time: compare orders of magnitude only.",
    "Calibration: DataLoader(batch 1, file order) over a datasets.Dataset with input_ids + attention_mask (all ones).",
    "AWQ on CPU: llm-compressor 0.14.0.1 pins its activation cache unconditionally (IntermediatesCache.pin_memory), "
    "which fails without CUDA; run_llmcompressor.py turns pinning into a no-op (no numerical effect).",
    "AWQ default Llama mappings: the v_proj -> o_proj mapping is skipped in all 8 layers (GQA: v_proj has 128 "
    "outputs, o_proj 384 inputs; llm-compressor logs '8 mappings were skipped due to incompatible shapes').",
    "Sizes: safetensors_bytes = all *.safetensors of the checkpoint; dir_bytes adds config, recipe, tokenizer files.",
]

CONFIGS = ["rtn_w4a16", "rtn_w4a16_asym", "rtn_w8a8", "rtn_fp8_dynamic", "rtn_fp8_block",
           "gptq_w4a16_g128", "gptq_w4a16_channel", "awq_w4a16_asym", "sq_gptq_w8a8"]


def calibration_loader():
    from datasets import Dataset
    from torch.utils.data import DataLoader
    from transformers import default_data_collator

    with open(CALIB, encoding="utf-8") as f:
        calib = json.load(f)
    samples = calib["samples"]
    ds = Dataset.from_dict({"input_ids": samples,
                            "attention_mask": [[1] * len(s) for s in samples]})
    loader = DataLoader(ds, batch_size=1, shuffle=False, collate_fn=default_data_collator)
    return loader, calib


def patch_cpu_only():
    """llm-compressor 0.14.0.1 AWQ pins its activation cache unconditionally (awq/base.py
    _apply_smoothing -> IntermediatesCache.pin_memory), which raises "Found no NVIDIA driver" on a
    CPU-only machine. Pinning only makes a page-locked copy for faster host-to-device transfers, so
    skipping it changes no value."""
    if torch.cuda.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache
    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None


def run_oneshot(name, out_dir):
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    patch_cpu_only()

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    loader, calib = calibration_loader()
    t0, c0 = time.time(), time.process_time()
    oneshot(model=model, dataset=loader, recipe=recipe_for(name),
            num_calibration_samples=calib["num_samples"], max_seq_length=calib["seq_len"])
    seconds, cpu_seconds = time.time() - t0, time.process_time() - c0
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, save_compressed=True)
    tokenizer.save_pretrained(out_dir)
    return seconds, cpu_seconds


def sha256_of(tensor):
    t = tensor.contiguous()
    raw = t.view(torch.uint8) if t.element_size() == 1 else t.flatten().view(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def safetensors_files(ckpt):
    return sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))


def record_checkpoint(name, ckpt):
    """Copies config.json/recipe.yaml and writes tensors.json + layer0.safetensors."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    dst = os.path.join(GOLDEN, name)
    os.makedirs(dst, exist_ok=True)
    for f in ("config.json", "recipe.yaml"):
        shutil.copyfile(os.path.join(ckpt, f), os.path.join(dst, f))
    tensors, layer0 = [], {}
    for fname in safetensors_files(ckpt):
        with safe_open(os.path.join(ckpt, fname), framework="pt") as f:
            for key in sorted(f.keys()):
                t = f.get_tensor(key)
                tensors.append({"name": key, "file": fname, "dtype": str(t.dtype).replace("torch.", ""),
                                "shape": list(t.shape), "sha256": sha256_of(t)})
                if key.startswith("model.layers.0."):
                    layer0[key] = t.contiguous()
    tensors.sort(key=lambda e: e["name"])
    with open(os.path.join(dst, "tensors.json"), "w", encoding="utf-8") as f:
        # One tensor per line: small and diffable.
        f.write('{\n "checkpoint": %s,\n "tensors": [\n' % json.dumps(name))
        f.write(",\n".join("  " + json.dumps(t) for t in tensors))
        f.write("\n ]\n}\n")
    layer0_path = os.path.join(dst, "layer0.safetensors")
    save_file(layer0, layer0_path, metadata={"source": f"llmcompressor {name}"})
    os.chmod(layer0_path, 0o644)  # safetensors creates it 0600
    st_bytes = sum(os.path.getsize(os.path.join(ckpt, f)) for f in safetensors_files(ckpt))
    dir_bytes = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
    return {"safetensors_bytes": st_bytes, "dir_bytes": dir_bytes, "num_tensors": len(tensors)}


def load_decompressed(ckpt):
    """fp32 model from a checkpoint; compressed-tensors checkpoints are decompressed on load."""
    from transformers import AutoModelForCausalLM

    with open(os.path.join(ckpt, "config.json"), encoding="utf-8") as f:
        quantized = "quantization_config" in json.load(f)
    kwargs = {}
    if quantized:
        from transformers import CompressedTensorsConfig
        kwargs["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, **kwargs)
    return model.float().eval()


def has_activation_quant(model):
    return any(getattr(m, "quantization_scheme", None) is not None
               and m.quantization_scheme.input_activations is not None for m in model.modules())


def set_quantization_enabled(model, enabled):
    """compressed-tensors' forward fake-quantizes activations unless quantization_enabled is False."""
    for m in model.modules():
        if hasattr(m, "quantization_scheme"):
            m.quantization_enabled = enabled


def heldout_perplexity(model, ids, n_ctx, max_windows):
    n = len(ids) // n_ctx
    if max_windows:
        n = min(n, max_windows)
    nll, count = 0.0, 0
    with torch.no_grad():
        for c in range(n):
            x = torch.tensor([ids[c * n_ctx:(c + 1) * n_ctx]])
            logits = model(x).logits[0, :-1].float()
            nll += torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum").item()
            count += n_ctx - 1
    return math.exp(nll / count), count, n


def heldout_ids():
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    with open(HELDOUT, encoding="utf-8") as f:
        return tok.encode(f.read(), add_special_tokens=False).ids


def versions():
    import compressed_tensors
    import llmcompressor
    import transformers
    return {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine()}


def load_summary(path):
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=CONFIGS)
    ap.add_argument("--scratch", default="/work/scratch-llmc")
    ap.add_argument("--ppl-windows", type=int, default=0, help="first N heldout windows (0 = all)")
    ap.add_argument("--skip-oneshot", action="store_true")
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--bf16-all-windows", action="store_true",
                    help="also score the bf16 model on all windows, to check reference.json's ppl_heldout")
    a = ap.parse_args()
    if os.path.abspath(a.scratch).startswith(REPO + os.sep):
        raise SystemExit("--scratch must be outside the repository")

    summary_path = os.path.join(GOLDEN, "SUMMARY.json")
    summary = load_summary(summary_path)
    summary["versions"] = versions()
    summary["calibration"] = {"file": os.path.relpath(CALIB, REPO), "order": "file order, batch 1",
                              "num_samples": 128, "seq_len": 512}
    ids = None if a.skip_ppl else heldout_ids()
    with open(REFERENCE, encoding="utf-8") as f:
        ref = json.load(f)
    if not a.skip_ppl:
        summary["ppl_protocol"] = ref["ppl_protocol"] + "; fp32 compute on the decompressed weights"
        summary["ppl_windows"] = a.ppl_windows or "all"
    summary["notes"] = NOTES
    results = summary.setdefault("results", {})
    results.setdefault("bf16", {})["safetensors_bytes"] = sum(
        os.path.getsize(os.path.join(MODEL, f)) for f in safetensors_files(MODEL))

    if not a.skip_ppl:
        t0 = time.time()
        ppl, scored, n = heldout_perplexity(load_decompressed(MODEL), ids, 512, a.ppl_windows)
        results["bf16"].update({"ppl_heldout": ppl, "ppl_scored_tokens": scored, "ppl_windows": n,
                           "ppl_seconds": round(time.time() - t0, 1),
                           "reference_json_ppl_heldout": ref["ppl_heldout"]})
        print(f"bf16: heldout ppl {ppl:.6f} over {n} windows", flush=True)
        if a.bf16_all_windows:
            ppl, scored, n = heldout_perplexity(load_decompressed(MODEL), ids, 512, 0)
            results["bf16"].update({"ppl_heldout_all_windows": ppl, "ppl_all_windows_scored_tokens": scored})
            print(f"bf16: heldout ppl {ppl:.6f} over all {n} windows, {scored} scored tokens "
                  f"(reference.json {ref['ppl_heldout']:.6f}, {ref['ppl_heldout_scored_tokens']})", flush=True)

    for name in a.configs:
        ckpt = os.path.join(a.scratch, name)
        entry = results.setdefault(name, {})
        if not a.skip_oneshot:
            seconds, cpu_seconds = run_oneshot(name, ckpt)
            entry["oneshot_seconds"] = round(seconds, 1)
            entry["oneshot_cpu_seconds"] = round(cpu_seconds, 1)
            print(f"{name}: oneshot {entry['oneshot_seconds']} s (cpu {entry['oneshot_cpu_seconds']} s)",
                  flush=True)
        entry.update(record_checkpoint(name, ckpt))
        with open(os.path.join(ckpt, "config.json"), encoding="utf-8") as f:
            entry["format"] = json.load(f)["quantization_config"]["format"]
        if not a.skip_ppl:
            t0 = time.time()
            model = load_decompressed(ckpt)
            ppl, scored, n = heldout_perplexity(model, ids, 512, a.ppl_windows)
            entry.update({"ppl_heldout": ppl, "ppl_scored_tokens": scored, "ppl_windows": n,
                          "ppl_seconds": round(time.time() - t0, 1)})
            print(f"{name}: heldout ppl {ppl:.6f} over {n} windows", flush=True)
            if has_activation_quant(model):
                set_quantization_enabled(model, False)
                entry["ppl_heldout_weight_only"] = heldout_perplexity(model, ids, 512, a.ppl_windows)[0]
                print(f"{name}: heldout ppl without activation quantization "
                      f"{entry['ppl_heldout_weight_only']:.6f}", flush=True)
            else:
                entry.pop("ppl_heldout_weight_only", None)
        with open(summary_path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
