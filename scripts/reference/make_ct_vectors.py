#!/usr/bin/env python3
"""Golden data for lowbit's compressed-tensors scheme (src/quant/scheme), from the real library.

Pinned versions (the venv /work/venv-llmc):
    compressed-tensors==0.19.0, llmcompressor==0.14.0.1, torch==2.11.0 (CPU), transformers==5.17.0,
    safetensors (as installed with them)

Run from the repository root:
    CUDA_VISIBLE_DEVICES="" HF_HUB_OFFLINE=1 /work/venv-llmc/bin/python scripts/reference/make_ct_vectors.py

Writes into tests/unit/quant/data/:
  ct_presets.json      every PRESET_SCHEMES entry, preset_name_to_scheme(name, ["Linear"]).model_dump()
  ct_args_cases.json   QuantizationArgs inputs with CT's model_dump() or its validation error
  ct_configs.json      `quantization_config` blocks of config.json written by llm-compressor's oneshot
                       (tiny random Llama, datafree) for a few recipes
  ct_vectors.json      the weight cases: scheme (model_dump), format, shape, dtype
  ct_act_vectors.json  dynamic activation cases: args (model_dump), the global scale used
  ct_vectors.safetensors  per case "<case>.input" (the weight), "<case>.qp_scale" /
                       ".qp_zero_point" / ".qp_global_scale" (qparams from llm-compressor's weight
                       observer + CT calculate_qparams), "<case>.fake_quant" (CT fake_quantize),
                       "<case>.<tensor>" for each tensor CT's compressor writes, "<case>.decompressed";
                       "act_<name>.input" / ".output": compute_dynamic_scales_and_zp + fake_quantize
The qparams path is llm-compressor's own (initialize_module_for_quantization, initialize_observer,
observe, update_qparams), then compressed_tensors.compressors.base.compress_module.
"""
import copy
import json
import os
import sys
import tempfile

import torch
from safetensors.torch import save_file

import compressed_tensors
from compressed_tensors.compressors.base import compress_module, decompress_module
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.lifecycle.initialize import initialize_module_for_quantization
from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES, preset_name_to_scheme
from llmcompressor.modifiers.quantization.calibration import (
    initialize_observer,
    observe,
    update_qparams,
)

assert compressed_tensors.__version__ == "0.19.0", compressed_tensors.__version__
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "unit", "quant", "data")
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def dump(model) -> dict:
    # What ModelCompressor.update_config serializes (it json.dumps model_dump()).
    return json.loads(json.dumps(model.model_dump()))


def write_presets():
    presets = {n: dump(preset_name_to_scheme(n, ["Linear"])) for n in PRESET_SCHEMES}
    with open(os.path.join(OUT, "ct_presets.json"), "w") as f:
        json.dump(presets, f, indent=1)


ARGS_CASES = [
    {},
    {"num_bits": 4, "group_size": 128},
    {"num_bits": 4, "group_size": -1},
    {"num_bits": 4, "group_size": 128, "symmetric": False},
    {"num_bits": 8, "type": "FLOAT", "strategy": "CHANNEL"},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x64"},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 32]},
    {"num_bits": 8, "strategy": "token", "dynamic": True},
    {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "LOCAL"},
    {"num_bits": 4, "type": "float", "group_size": 32, "scale_dtype": "uint8"},
    {"num_bits": 4, "type": "float", "group_size": 16, "scale_dtype": "torch.float8_e4m3fn",
     "zp_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group"},
    {"num_bits": 4, "group_size": 128, "actorder": "weight", "observer": "mse",
     "observer_kwargs": {"maxshrink": 0.5}},
    {"num_bits": 4, "group_size": 128, "actorder": False},
    {"num_bits": 3, "symmetric": False, "strategy": "channel", "zp_dtype": "int16"},
    {"num_bits": 16, "symmetric": False},
    {"num_bits": 8.0, "group_size": 64.0},
    # rejected by CT:
    {"num_bits": 8, "strategy": "token"},
    {"num_bits": 4, "strategy": "group"},
    {"num_bits": 4, "group_size": 128, "strategy": "channel"},
    {"num_bits": 4, "group_size": -2},
    {"num_bits": 8, "strategy": "block"},
    {"num_bits": 8, "block_structure": [128, 128]},
    {"num_bits": 8, "strategy": "channel", "dynamic": True},
    {"num_bits": 8, "strategy": "tensor", "dynamic": "local"},
    {"num_bits": 8, "block_structure": "128", "strategy": "block"},
    {"num_bits": 8, "block_structure": [0, 128], "strategy": "block"},
    {"num_bits": 8, "bits": 4},
    {"num_bits": 8, "type": "fp"},
    {"num_bits": 8, "strategy": "rows"},
    {"num_bits": 8, "scale_dtype": "torch.nope"},
    {"num_bits": 6, "type": "float"},
]


def write_args_cases():
    cases = []
    for inp in ARGS_CASES:
        try:
            cases.append({"input": inp, "dump": dump(QuantizationArgs.model_validate(inp))})
        except Exception as e:  # pydantic ValidationError or the validators' own errors
            cases.append({"input": inp, "error": str(e).splitlines()[0]})
    with open(os.path.join(OUT, "ct_args_cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def oneshot_config(recipe) -> dict:
    from llmcompressor import oneshot
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, vocab_size=128)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    src, dst = tempfile.mkdtemp(), tempfile.mkdtemp()
    model.save_pretrained(src)
    oneshot(model=src, recipe=recipe, output_dir=dst)
    with open(os.path.join(dst, "config.json")) as f:
        return json.load(f)["quantization_config"]


def write_configs():
    from llmcompressor.modifiers.quantization import QuantizationModifier

    mixed = {
        "group_0": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 4, "group_size": 128}},
        "group_1": {"targets": ["re:.*self_attn.*"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                          "dynamic": True}},
    }
    recipes = {
        "W4A16": QuantizationModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"]),
        "W4A16_ASYM": QuantizationModifier(targets="Linear", scheme="W4A16_ASYM",
                                           ignore=["lm_head"]),
        "FP8_DYNAMIC": QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC",
                                            ignore=["lm_head"]),
        "NVFP4A16": QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=["lm_head"]),
        "MIXED": QuantizationModifier(config_groups=mixed, ignore=["lm_head"]),
    }
    configs = {name: oneshot_config(r) for name, r in recipes.items()}
    with open(os.path.join(OUT, "ct_configs.json"), "w") as f:
        json.dump(configs, f, indent=1, sort_keys=True)


def custom(weights: dict, inputs: dict | None = None) -> QuantizationScheme:
    return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**weights),
                              input_activations=QuantizationArgs(**inputs) if inputs else None)


INT8_TOKEN = {"num_bits": 8, "strategy": "token", "dynamic": True}
# name -> (scheme, [(rows, cols, dtype)])
CASES = {
    "w4a16": ("W4A16", [(16, 256, "bf16"), (13, 384, "bf16"), (16, 256, "f16"), (16, 256, "f32")]),
    "w4a16_asym": ("W4A16_ASYM", [(16, 256, "bf16"), (13, 384, "bf16"), (16, 256, "f16")]),
    "w2a16": ("W2A16", [(16, 256, "bf16")]),
    "w3a16": ("W3A16", [(16, 256, "bf16"), (13, 384, "bf16")]),
    "w5a16": ("W5A16", [(16, 256, "bf16")]),
    "w6a16": ("W6A16", [(16, 256, "bf16")]),
    "w7a16": ("W7A16", [(16, 256, "bf16")]),
    "w8a16": ("W8A16", [(16, 256, "bf16")]),
    "w3_asym_channel": (custom({"num_bits": 3, "strategy": "channel", "symmetric": False}),
                        [(16, 200, "bf16"), (13, 200, "bf16")]),
    "w8_asym_tensor": (custom({"num_bits": 8, "strategy": "tensor", "symmetric": False}),
                       [(16, 200, "bf16")]),
    "w8a8": ("W8A8", [(16, 256, "bf16"), (13, 200, "bf16")]),
    "w4a8": ("W4A8", [(16, 256, "bf16")]),
    "w4a8_channel": (custom({"num_bits": 4, "strategy": "channel"}, INT8_TOKEN),
                     [(16, 256, "bf16"), (13, 200, "bf16")]),
    "fp8": ("FP8", [(16, 256, "bf16"), (13, 200, "bf16"), (16, 256, "f16")]),
    "fp8_dynamic": ("FP8_DYNAMIC", [(16, 256, "bf16"), (13, 200, "f32")]),
    "fp8_block": ("FP8_BLOCK", [(16, 256, "bf16"), (130, 200, "bf16")]),
    "nvfp4a16": ("NVFP4A16", [(16, 256, "bf16"), (13, 48, "bf16"), (16, 256, "f16"),
                              (16, 64, "f32")]),
    "mxfp4a16": ("MXFP4A16", [(16, 256, "bf16"), (13, 96, "bf16"), (16, 64, "f32")]),
    "mxfp8a16": ("MXFP8A16", [(16, 256, "bf16"), (13, 96, "bf16")]),
}


def make_weight(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    w *= torch.exp(torch.randn(rows, 1, generator=g) * 0.7)  # rows of different magnitude
    w[3] = 0.0  # all-zero row: zero scales are replaced by eps
    w[5] = w[5].abs() + 0.001  # positive row: the range is widened to include 0
    w[7, 11] = 0.9  # an outlier
    return w.to(dtype)


def run_case(key: str, scheme, rows: int, cols: int, dtype: str, seed: int, tensors: dict) -> dict:
    scheme = copy.deepcopy(preset_name_to_scheme(scheme, ["Linear"]) if isinstance(scheme, str)
                           else scheme)
    lin = torch.nn.Linear(cols, rows, bias=False, dtype=DTYPES[dtype])
    lin.weight.data = make_weight(rows, cols, DTYPES[dtype], seed)
    tensors[f"{key}.input"] = lin.weight.data.clone()
    initialize_module_for_quantization(lin, scheme)
    initialize_observer(lin, "weight")
    observe(lin, "weight")
    update_qparams(lin, "weight")
    del lin.weight_observer
    zp = getattr(lin, "weight_zero_point", None)
    gs = getattr(lin, "weight_global_scale", None)
    tensors[f"{key}.qp_scale"] = lin.weight_scale.data.clone()
    if zp is not None and not scheme.weights.symmetric:
        tensors[f"{key}.qp_zero_point"] = zp.data.clone()
    if gs is not None:
        tensors[f"{key}.qp_global_scale"] = gs.data.clone()
    tensors[f"{key}.fake_quant"] = fake_quantize(lin.weight.data, lin.weight_scale.data,
                                                 zp, scheme.weights, global_scale=gs).contiguous()
    compress_module(lin)
    for name, t in lin.state_dict().items():
        if name.startswith("weight"):
            tensors[f"{key}.{name}"] = t.detach().clone().contiguous()
    decompress_module(lin)
    tensors[f"{key}.decompressed"] = lin.weight.data.clone().contiguous()
    return {"scheme": dump(lin.quantization_scheme), "format": lin.quantization_scheme.format.value
            if hasattr(lin.quantization_scheme.format, "value") else lin.quantization_scheme.format,
            "rows": rows, "cols": cols, "dtype": dtype}


# Dynamic activation quantization (emulated W8A8 / FP8 / FP4 inference), fp32 [1, tokens, hidden].
ACT_CASES = {
    "int8_token": ("W8A8", None),
    "int4_token": ("W4A4", None),
    "fp8_token": ("FP8_DYNAMIC", None),
    "fp8_group128": ("FP8_BLOCK", None),
    "fp8_tensor": (None, {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": True}),
    "nvfp4_local": ("NVFP4", None),
    "mxfp4_group32": ("MXFP4", None),
    "mxfp8_group32": ("MXFP8", None),
}


def run_act_case(key: str, preset, args, seed: int, tensors: dict) -> dict:
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp, generate_gparam

    if preset is not None:
        args = preset_name_to_scheme(preset, ["Linear"]).input_activations
    else:
        args = QuantizationArgs(**args)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, 256, generator=g) * torch.exp(torch.randn(1, 4, 1, generator=g))
    x[0, 2, 7] = 9.0  # an outlier token
    gs = None
    if args.strategy == "tensor_group":  # the static input_global_scale, here from x itself
        gs = generate_gparam(x.amin().reshape(1), x.amax().reshape(1))
    scale, zp = compute_dynamic_scales_and_zp(x, args, module=None, global_scale=gs)
    tensors[f"{key}.input"] = x.clone()
    tensors[f"{key}.output"] = fake_quantize(x, scale, zp, args, global_scale=gs).contiguous()
    return {"args": dump(args), "global_scale": None if gs is None else gs.item()}


def write_act_vectors(tensors: dict) -> dict:
    cases = {}
    for seed, (name, (preset, args)) in enumerate(ACT_CASES.items(), start=1000):
        cases[f"act_{name}"] = run_act_case(f"act_{name}", preset, args, seed, tensors)
    return cases


def write_vectors():
    tensors, cases, seed = {}, {}, 1
    act_cases = write_act_vectors(tensors)
    with open(os.path.join(OUT, "ct_act_vectors.json"), "w") as f:
        json.dump(act_cases, f, indent=1)
    for name, (scheme, shapes) in CASES.items():
        for rows, cols, dtype in shapes:
            key = f"{name}_{rows}x{cols}_{dtype}"
            cases[key] = run_case(key, scheme, rows, cols, dtype, seed, tensors)
            seed += 1
    save_file(tensors, os.path.join(OUT, "ct_vectors.safetensors"))
    with open(os.path.join(OUT, "ct_vectors.json"), "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write_presets()
    write_args_cases()
    write_vectors()
    if "--no-configs" not in sys.argv:
        write_configs()
