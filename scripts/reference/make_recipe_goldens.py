#!/usr/bin/env python3
"""Golden llm-compressor recipes for tests/unit/quant_recipe (lowbit::quant::parse_recipe).

Pinned reference (the venv /work/venv-llmc):
    llmcompressor==0.14.0.1  compressed-tensors==0.19.0  pydantic==2.14.4  PyYAML==6.0.4
    torch==2.11.0 (CPU)  transformers==5.17.0  datasets (whatever llmcompressor 0.14.0.1 pulled in)

Usage:
    CUDA_VISIBLE_DEVICES= /work/venv-llmc/bin/python scripts/reference/make_recipe_goldens.py
        Writes tests/unit/quant_recipe/data/llmc/<case>.yaml (the recipe.yaml llm-compressor writes)
        and <case>.json: the modifiers llm-compressor builds from that file (Recipe.from_dict on its
        values), each with its fields and resolved quantization config; the C++ tests compare
        lowbit's parse of the .yaml with these.
    ... make_recipe_goldens.py --scalars
        Only data/yaml_scalars.json: how PyYAML's safe_load types plain scalars.
    ... make_recipe_goldens.py --verify-lowbit
        Loads every tests/unit/quant_recipe/data/lowbit/*.yaml (written by lowbit's recipe_to_yaml,
        see recipe_golden_test.cc) with llm-compressor's own Recipe parser and checks that it gives
        the same modifiers (fields and resolved quantization config) as the llm-compressor recipe it
        came from. Exits non-zero on any difference.

How the YAML is made: cases marked "oneshot" run llmcompressor.oneshot on the repository's tiny
Llama (models/ref-llama-19m, 4 calibration rows of 32 tokens from data/text/calibration.txt) and
copy the recipe.yaml it saves next to the checkpoint; that file is what users have on disk, and
oneshot fills in fields while it runs (inferred SmoothQuant/AWQ mappings, `ignore: []`). The other
cases call Recipe.yaml() on the modifiers directly, which is the call oneshot's
update_and_save_recipe makes. llm-compressor 0.14 cannot run AWQ on a machine without CUDA
(IntermediatesCache.pin_memory needs a driver), so the script turns pinning into a no-op there;
pinning only speeds up host-to-GPU copies.

Quirks of the reference that the goldens keep on purpose: yaml.dump leaves Python objects in the
file (`!!python/tuple` SmoothQuant mappings, `!!python/object/apply:...Sentinel` for AWQ's default
offload_device, compressed-tensors enum members in config_groups), which PyYAML's safe loader and
hence llm-compressor itself cannot read back; appending to an existing recipe.yaml renames stages
to `<name>_stage_0`, `<name>_stage_1`, which llm-compressor's reader then skips.
"""
import argparse
import copy
import json
import os
import re
import shutil
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

from compressed_tensors.quantization import QuantizationScheme  # noqa: E402
from loguru import logger  # noqa: E402

logger.remove()

import torch  # noqa: E402
import yaml  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from llmcompressor import oneshot  # noqa: E402
from llmcompressor.modifiers.awq import AWQModifier as LegacyAWQModifier  # noqa: E402
from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier  # noqa: E402
from llmcompressor.modifiers.quantization.quantization.mixin import QuantizationMixin  # noqa: E402
from llmcompressor.modifiers.transform import AWQModifier, SmoothQuantModifier  # noqa: E402
from llmcompressor.modifiers.transform.awq import AWQMapping  # noqa: E402
from llmcompressor.pipelines.cache import IntermediatesCache  # noqa: E402
from llmcompressor.recipe import Recipe  # noqa: E402
from llmcompressor.sentinel import Sentinel  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "unit", "quant_recipe", "data")
MODEL = os.path.join(ROOT, "models", "ref-llama-19m")
BOOKKEEPING = {"index", "group", "start", "end", "update", "requires_calibration_data", "calibration_function"}

# examples/quantization_kv_cache/llama3_fp8_kv_example.py, verbatim recipe string.
KV_CACHE_EXAMPLE = """
quant_stage:
    quant_modifiers:
        QuantizationModifier:
            ignore: ["lm_head"]
            config_groups:
                group_0:
                    weights:
                        num_bits: 8
                        type: float
                        strategy: tensor
                        dynamic: false
                        symmetric: true
                    input_activations:
                        num_bits: 8
                        type: float
                        strategy: tensor
                        dynamic: false
                        symmetric: true
                    targets: ["Linear"]
            kv_cache_scheme:
                num_bits: 8
                type: float
                strategy: tensor
                dynamic: false
                symmetric: true
"""
FP8_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def w4a16_gptq():  # examples/quantization_w4a16/llama3_example.py
    return [GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])]


def w8a8_smoothquant_gptq():  # examples/quantization_w8a8_int8/llama3_example.py
    return [SmoothQuantModifier(smoothing_strength=0.8),
            GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]


def awq_w4a16_asym():  # examples/awq/llama_example.py (the compatibility AWQModifier)
    return LegacyAWQModifier(ignore=["lm_head"], scheme="W4A16_ASYM", targets=["Linear"], duo_scaling="both")


def fp8_dynamic():  # examples/quantization_w8a8_fp8/llama3_example.py
    return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])]


def fp8_kv_cache_preset():  # the FP8 preset plus the kv-cache example's kv_cache_scheme
    return [QuantizationModifier(targets="Linear", scheme="FP8", ignore=["lm_head"], kv_cache_scheme=dict(FP8_KV))]


def gptq_options():  # every GPTQ / QuantizationMixin field away from its default
    return [GPTQModifier(targets=["Linear"], scheme={"W4A16": ["re:.*mlp.*"], "W8A8": "re:.*self_attn.*"},
                         ignore=["lm_head", "re:.*mlp.gate$"], weight_observer="mse", input_observer="minmax",
                         bypass_divisibility_checks=True, block_size=64, dampening_frac=0.05, actorder="group",
                         batched_quantization=4)]


def transforms_options():  # SmoothQuant / AWQ fields and config_groups with an observer mapping
    return [
        SmoothQuantModifier(smoothing_strength=0.65, algorithm="log_equalization", ignore=["model.norm"],
                            num_calibration_steps=16,
                            mappings=[(["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"], "re:.*input_layernorm$"),
                                      [["re:.*gate_proj$", "re:.*up_proj$"], "re:.*post_attention_layernorm$"]]),
        AWQModifier(mappings=[AWQMapping("re:.*input_layernorm$", ["re:.*q_proj$", "re:.*k_proj$"]),
                              {"smooth_layer": "re:.*up_proj$", "balance_layers": ["re:.*down_proj$"],
                               "activation_hook_target": "mlp"}],
                    offload_device="cpu", duo_scaling=False, n_grid=10),
        QuantizationModifier(
            ignore=["lm_head"], observer={"weights": "mse", "input": "static_minmax"},
            config_groups={"attn": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 4, "group_size": 64,
                                                                                   "symmetric": False}},
                           "mlp": {"targets": ["re:.*mlp.*"],
                                   "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                   "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}},
            kv_cache_scheme=dict(FP8_KV)),
    ]


# name -> (how, recipe factory): "oneshot" runs the real entry point, "yaml" calls Recipe.yaml(),
# "text" keeps a hand-written recipe string as it is.
CASES = {
    "w4a16_gptq": ("oneshot", w4a16_gptq),
    "w8a8_smoothquant_gptq": ("oneshot", w8a8_smoothquant_gptq),
    "awq_w4a16_asym": ("oneshot", awq_w4a16_asym),
    "fp8_dynamic": ("oneshot", fp8_dynamic),
    "fp8_kv_cache_preset": ("oneshot", fp8_kv_cache_preset),
    "kv_cache_fp8_example": ("oneshot", lambda: KV_CACHE_EXAMPLE),
    "awq_before_oneshot": ("yaml", awq_w4a16_asym),  # not yet run: offload_device is still the Sentinel
    "kv_cache_example_text": ("text", lambda: KV_CACHE_EXAMPLE),  # observers left to the defaults
    "gptq_options": ("yaml", gptq_options),
    "transforms_options": ("yaml", transforms_options),
}
# lowbit's recipe_from_flags outputs (data/lowbit/flags_*.yaml) and the example they stand for.
FLAG_CASES = {
    "flags_gptq_w4a16": w4a16_gptq,
    "flags_gptq_w8a8_smoothquant": w8a8_smoothquant_gptq,
    "flags_awq_w4a16_asym": awq_w4a16_asym,
    "flags_rtn_fp8_dynamic": fp8_dynamic,
    "flags_rtn_fp8_kv_cache": fp8_kv_cache_preset,
}


def calibration_dataset():
    tok = AutoTokenizer.from_pretrained(MODEL)
    with open(os.path.join(ROOT, "data", "text", "calibration.txt"), encoding="utf-8") as f:
        ids = tok(f.read()[:4000], add_special_tokens=False)["input_ids"]
    rows = [ids[i * 32:(i + 1) * 32] for i in range(4)]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * 32 for _ in rows]})


def run_oneshot(recipe, model_dir):
    """Runs oneshot; returns the recipe.yaml it saved."""
    out = tempfile.mkdtemp(prefix="lowbit-recipe-")
    try:
        oneshot(model=model_dir, dataset=calibration_dataset(), recipe=recipe, output_dir=out,
                num_calibration_samples=4, max_seq_length=32)
        with open(os.path.join(out, "recipe.yaml"), encoding="utf-8") as f:
            return f.read()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def modifier_values(m):
    """The JSON the C++ tests check a parsed modifier against."""
    args = {k: v for k, v in m.model_dump(mode="json").items() if not k.endswith("_") and k not in BOOKKEEPING}
    entry = {"type": type(m).__name__, "group": m.group, "args": args}
    if isinstance(m, QuantizationMixin):
        resolved = m.resolved_config.model_dump(mode="json")
        entry["resolved"] = {k: resolved[k] for k in ("config_groups", "ignore", "kv_cache_scheme")}
    return entry


def reload(text):
    """llm-compressor's reading of a recipe.yaml: per stage, Recipe.from_dict on its values. The
    file is this script's own output, so yaml.unsafe_load may rebuild the Python objects
    llm-compressor left in it (safe_load cannot). `<name>_stage_<n>` keys, which from_dict skips,
    are read one stage at a time under their base name."""
    doc = yaml.unsafe_load(text)
    stages = []
    for key, value in doc.items():
        # A Sentinel in the file is a default that was never replaced; pydantic refuses the object
        # itself, so it stands for the argument not being given.
        for group in value.values():
            for args in group.values():
                for name in [k for k, v in args.items() if isinstance(v, Sentinel)]:
                    del args[name]
        raw = [args for group in value.values() for args in group.values()]
        recipe = Recipe.from_dict({re.sub(r"_stage_\d+$", "_stage", key): copy.deepcopy(value)})
        modifiers = [modifier_values(m) for m in recipe.modifiers]
        for entry, args in zip(modifiers, raw):
            # The mixin writes resolved observers into its config_groups objects while validating;
            # the file's own values are those groups validated on their own.
            if args.get("config_groups"):
                entry["args"]["config_groups"] = {
                    name: QuantizationScheme.model_validate(group).model_dump(mode="json")
                    for name, group in args["config_groups"].items()}
        stages.append({"key": key, "modifiers": modifiers})
    return stages


def write_case(name, text, stages, how):
    os.makedirs(os.path.join(DATA, "llmc"), exist_ok=True)
    with open(os.path.join(DATA, "llmc", name + ".yaml"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(DATA, "llmc", name + ".json"), "w", encoding="utf-8") as f:
        json.dump({"how": how, "stages": stages}, f, indent=1)
        f.write("\n")
    print(f"wrote {name} ({how})")


# Plain scalars whose PyYAML (YAML 1.1) reading lowbit must reproduce: booleans beyond true/false,
# octal / hex / binary / sexagesimal integers, floats that need a dot, and look-alike strings.
SCALARS = ["1", "-1", "+0", "0", "00", "09", "010", "0x1f", "0b101", "1_000", "1:30", "-1:30", "190:20:30",
           "1e-5", "1E+5", "1.0e-5", "1.0e5", "1.0E+05", "1.", ".5", "+1.5", "-0.0", "1_0.2_5", "1:30.5",
           ".inf", "-.Inf", "+.INF", ".nan", ".NaN", "yes", "No", "ON", "off", "Off", "y", "n", "true", "False",
           "TRUE", "tRue", "null", "Null", "NULL", "~", "nULL", "W4A16", "re:.*q_proj$", "1.2.3", "0x", "0o17",
           "12e3", "3.14abc", "+"]


def write_scalars():
    """data/yaml_scalars.json: [text, type, value] as yaml.safe_load reads `v: <text>`."""
    rows = []
    for text in SCALARS:
        v = yaml.safe_load("v: " + text)["v"]
        kind = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}[type(v)]
        if kind == "float" and (v != v or v in (float("inf"), float("-inf"))):
            v = repr(v)  # JSON has no inf / nan: keep Python's spelling
        rows.append([text, kind, v])
    os.makedirs(DATA, exist_ok=True)
    with open(os.path.join(DATA, "yaml_scalars.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=0)
        f.write("\n")
    print(f"wrote yaml_scalars.json ({len(rows)} scalars)")


def make_goldens(only):
    write_scalars()
    if not torch.cuda.is_available():
        IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    made = {}
    for name, (how, factory) in CASES.items():
        if only and name not in only:
            continue
        recipe = factory()
        if how == "oneshot":
            text = run_oneshot(recipe, MODEL)
        elif how == "text":  # a recipe as a user writes it, before llm-compressor fills anything in
            text = recipe.lstrip("\n")
        else:
            text = Recipe.create_instance(recipe).yaml()
        write_case(name, text, reload(text), how)
        made[name] = text
    if only and "appended_fp8_dynamic" not in only:
        return
    if "w4a16_gptq" not in made:
        with open(os.path.join(DATA, "llmc", "w4a16_gptq.yaml"), encoding="utf-8") as f:
            made["w4a16_gptq"] = f.read()
    # A model that already carries a recipe.yaml: oneshot appends the new recipe to it.
    base = tempfile.mkdtemp(prefix="lowbit-model-")
    try:
        model_dir = os.path.join(base, "model")
        shutil.copytree(MODEL, model_dir)
        with open(os.path.join(model_dir, "recipe.yaml"), "w", encoding="utf-8") as f:
            f.write(made["w4a16_gptq"])
        text = run_oneshot(fp8_dynamic(), model_dir)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    write_case("appended_fp8_dynamic", text, reload(text), "oneshot")


def verify_lowbit():
    lowbit_dir = os.path.join(DATA, "lowbit")
    names = sorted(f[:-5] for f in os.listdir(lowbit_dir) if f.endswith(".yaml"))
    failures = 0
    for name in names:
        with open(os.path.join(lowbit_dir, name + ".yaml"), encoding="utf-8") as f:
            text = f.read()
        # llm-compressor's real loader (JSON, then yaml.safe_load, then Recipe.from_dict) must take
        # the file and see every modifier; the values are then read as for the goldens. It runs all
        # stages as one list, so the modifiers are compared in order, stages flattened.
        real = Recipe.create_instance(text).modifiers
        loaded = [m for stage in reload(text) for m in stage["modifiers"]]
        if [m["type"] for m in loaded] != [type(m).__name__ for m in real]:
            loaded = ["llm-compressor's loader sees " + str([type(m).__name__ for m in real])]
        if name in FLAG_CASES:
            stages = reload(Recipe.create_instance(FLAG_CASES[name]()).yaml())
        else:
            with open(os.path.join(DATA, "llmc", name + ".json"), encoding="utf-8") as f:
                stages = json.load(f)["stages"]
        expected = [m for stage in stages for m in stage["modifiers"]]
        if loaded == expected:
            print(f"ok   {name}: llm-compressor reads lowbit's YAML as the original recipe")
        else:
            failures += 1
            print(f"FAIL {name}:\n  lowbit  -> {json.dumps(loaded)}\n  expected {json.dumps(expected)}")
    print(f"{len(names) - failures}/{len(names)} lowbit recipes verified")
    return failures == 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify-lowbit", action="store_true", help="check data/lowbit/*.yaml")
    parser.add_argument("--scalars", action="store_true", help="only rewrite data/yaml_scalars.json")
    parser.add_argument("--only", nargs="*", default=[], help="regenerate only these cases")
    args = parser.parse_args()
    if args.verify_lowbit:
        sys.exit(0 if verify_lowbit() else 1)
    if args.scalars:
        sys.exit(write_scalars())
    make_goldens(set(args.only))
