#!/usr/bin/env python3
"""Check a compressed-tensors checkpoint (written by lowbit) against the reference implementations.

Loads checkpoint DIR twice, both decompressed in --load-dtype (default float32, i.e. w = q * scale in fp32;
bfloat16 = the dequantized weights rounded to bf16, as when the model is loaded in its own dtype),
then run with fp32 compute:
  (a) compressed-tensors alone: an empty model from config.json, compressed-tensors'
      apply_quantization_config + ModelCompressor.compress_model to obtain the exact compressed
      parameter layout, the safetensors loaded into it with load_state_dict(strict=True), then
      ModelCompressor.decompress_model;
  (b) transformers: AutoModelForCausalLM.from_pretrained(DIR, dtype=<load dtype>,
      quantization_config=CompressedTensorsConfig(dequantize=True)).
Before (a) it checks the tensor set: every tensor name, dtype and shape in DIR's safetensors must be
exactly what compressed-tensors itself writes for that quantization_config (with the model dtype of
config.json), with no tensor missing or extra.

Then it runs the prompts of the golden reference (tests/golden/ref-llama-19m/reference_logits.safetensors:
prompt{i}.input_ids, BOS included), and a longer one (BOS + the first 255 tokens of
data/text/heldout.txt by the checkpoint's own tokenizer through transformers, printed as the last
prompt), through (a) and (b) and reports max |logit difference| between
(a) and (b), each of them and the optional lowbit logits files, and (for information) the bf16 model's
golden logits. Schemes with input activation quantization (W8A8, FP8_DYNAMIC, FP8_BLOCK...) are run twice:
"act" = compressed-tensors' forward with dynamic activation fake-quantization (what transformers does,
and what SUMMARY.json's perplexities use) and "weight_only" = activation quantization disabled; lowbit
logits are compared with both. Also reports max |weight difference| between (a) and (b).

lowbit logits files (one per prompt, in prompt order, the longer prompt last) come from
  lowbit logits DIR --prompt-ids <ids of prompt i> -o OUT_i.safetensors
(apps/cli/cmd_logits.cc: tensors "logits" [T, vocab] fp32 and "input_ids" [T] int64); the script
prints the --prompt-ids lists with --print-prompt-ids.

Exit status 1 if the tensor set differs, if max|a - b| > --ab-tol (default 0: both paths run the same
compressed-tensors decompression, so any difference is a bug), or, when --lowbit-tol is given, if the
lowbit logits differ from both reference variants by more than it. For schemes with activation
quantization a fixed logit tolerance says nothing: one Linear input that lands within float32
rounding of a rounding boundary (FP8 static, measured: x/scale = -34.0000038 in lowbit's float32,
-33.99999 in float64, between the e4m3 codes -32 and -36) moves one code and every logit after
it, and compressed-tensors' own float32 forward differs from its float64 forward by 0.3-0.7 in
single logits over the long prompt. Two checks replace it there:
  - end to end ("float64"): with --lowbit-linear-io (lowbit's inputs of every decoder Linear, one
    file per prompt), (a) runs in float64 but follows lowbit through rounding ties: wherever its
    quantized input value differs from compressed-tensors' float32 quantization of lowbit's input
    while the two inputs agree to float32 noise (--tie-noise), lowbit's value is taken
    (tie_following_float64). Its logits must then match lowbit's within --lowbit-tol, as a
    weight-only checkpoint's do, and no quantized value may differ where the inputs do not agree
    ("values_unexplained"). Measured: 11 (static asymmetric W8A8) to 5,767 (FP8_DYNAMIC: dynamic
    scales, which float32 computes slightly differently) values followed, lowbit within 2.2e-5 of
    it on every scheme. The plain
    float64 forward is reported beside it (mean |difference| against lowbit and against (a)'s own
    float32 forward); without --lowbit-linear-io it is the criterion, loosely (mean and argmax
    changes at most twice float32's, 8-bit activations only), because one tie early in the model
    moves the rest (static asymmetric W8A8, measured: one int8 code of layer 2's q_proj at token 128,
    x/scale 3.4e-6 from the boundary, gives lowbit 0.047 mean from float64 against float32's 0.0068);
  - per module ("linear_io", with --lowbit-linear-io, for every scheme): each decoder Linear of
    (a) run on lowbit's own inputs of the long prompt (lowbit logits --dump-linear-io) must give
    lowbit's outputs in all but 1 row in 1000 (see linear_io_check). That is where a wrong
    quantizer shows: without input quantization every row is off, by 3-4 % of the module's
    largest output (measured on FP8 and W8A8); lowbit's rows agree to 1.4e-6.
--lowbit-logits should come from the path that holds the same weights as the reference:
`lowbit logits --linear-backend dequant` (q x scale rounded to bf16, as compressed-tensors decompresses
with bf16 scales) with --load-dtype bfloat16; --lowbit-kernel-logits (lowbit's default kernels,
q x scale exact in fp32 as vLLM's kernels compute) are reported beside, for information.

Reference environment: scripts/reference/setup-llmcompressor-venv.sh (llmcompressor 0.14.0.1,
compressed-tensors 0.19.0, torch 2.11.0, transformers 5.17.0; requirements-llmcompressor.txt). CPU only.

Usage (from the repository root):
  CUDA_VISIBLE_DEVICES= /work/venv-llmc/bin/python scripts/reference/check_lowbit_checkpoint.py DIR \
      [--lowbit-logits P0.safetensors ... P3.safetensors] [--lowbit-tol X] \
      [--golden tests/golden/ref-llama-19m] [--json OUT.json] [--print-prompt-ids] \
      [--compare-tensors tests/golden/llmcompressor/<name>/tensors.json] [--load-dtype bfloat16]
--compare-tensors lists the tensors that are (not) byte-identical to llm-compressor's for the same recipe
(RTN has no data dependence, so an exact reimplementation matches it byte for byte; calibrated
algorithms may differ in floating-point summation order).
Tested on llm-compressor's own checkpoints: /work/scratch-llmc/<name> from run_llmcompressor.py.
"""
import argparse
import copy
import json
import os
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read_checkpoint(ckpt):
    """All tensors of DIR's *.safetensors, as stored."""
    tensors = {}
    for fname in sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors")):
        with safe_open(os.path.join(ckpt, fname), framework="pt") as f:
            for key in f.keys():
                if key in tensors:
                    raise SystemExit(f"{ckpt}: tensor {key} appears in two files")
                tensors[key] = f.get_tensor(key)
    return tensors


def compressed_skeleton(ckpt, dtype):
    """Empty model of DIR's architecture holding compressed-tensors' compressed parameter layout."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(ckpt, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)["quantization_config"]
    qconfig = QuantizationConfig.model_validate(raw)
    config = AutoConfig.from_pretrained(ckpt)
    del config.quantization_config  # build the plain model; compressed-tensors is applied by hand
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    apply_quantization_config(model, qconfig, run_compressed=False, show_progress=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_scale"):
                p.fill_(1.0)  # any finite scale; the real ones are loaded after compression
    compressor = ModelCompressor(quantization_config=qconfig)
    compressor.compress_model(model)
    return model, compressor, qconfig


def check_tensor_set(ckpt, stored):
    """Differences between DIR's tensors and the layout compressed-tensors writes."""
    from transformers import AutoConfig
    dtype = AutoConfig.from_pretrained(ckpt).dtype or torch.bfloat16
    model, _, _ = compressed_skeleton(ckpt, dtype)
    expected = {k: (v.dtype, tuple(v.shape)) for k, v in model.state_dict().items()}
    problems = []
    for k in sorted(set(expected) - set(stored)):
        problems.append(f"missing {k} ({expected[k][0]}, {list(expected[k][1])})")
    for k in sorted(set(stored) - set(expected)):
        problems.append(f"unexpected {k} ({stored[k].dtype}, {list(stored[k].shape)})")
    for k in sorted(set(stored) & set(expected)):
        got = (stored[k].dtype, tuple(stored[k].shape))
        if got != expected[k]:
            problems.append(f"{k}: {got[0]} {list(got[1])}, compressed-tensors writes "
                            f"{expected[k][0]} {list(expected[k][1])}")
    return problems


def compare_with_tensors_json(stored, path):
    """Which tensors are byte-identical to a golden tensors.json (run_llmcompressor.py output)."""
    import hashlib
    with open(path, encoding="utf-8") as f:
        golden = {t["name"]: t for t in json.load(f)["tensors"]}
    same, differ = [], []
    for k in sorted(set(golden) & set(stored)):
        t = stored[k].contiguous().flatten().view(torch.uint8)
        digest = hashlib.sha256(t.numpy().tobytes()).hexdigest()
        (same if digest == golden[k]["sha256"] else differ).append(k)
    return {"golden": path, "identical": len(same), "different": differ,
            "only_in_golden": sorted(set(golden) - set(stored)),
            "only_in_checkpoint": sorted(set(stored) - set(golden))}


def load_via_model_compressor(ckpt, stored, load_dtype):
    model, compressor, qconfig = compressed_skeleton(ckpt, load_dtype)
    model.load_state_dict(stored, strict=True)
    compressor.decompress_model(model)
    return model.float().eval(), qconfig


def load_via_transformers(ckpt, load_dtype):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    model = AutoModelForCausalLM.from_pretrained(
        ckpt, dtype=load_dtype, quantization_config=CompressedTensorsConfig(dequantize=True))
    return model.float().eval()


def has_activation_quant(qconfig):
    return any(s.input_activations is not None or s.output_activations is not None
               for s in qconfig.config_groups.values())


def set_quantization_enabled(model, enabled):
    for m in model.modules():
        if hasattr(m, "quantization_scheme"):
            m.quantization_enabled = enabled


def run_prompts(model, prompts):
    with torch.no_grad():
        return [model(ids[None]).logits[0].float() for ids in prompts]


def max_diff(xs, ys):
    return max(float((x - y).abs().max()) for x, y in zip(xs, ys))


def argmax_agreement(xs, ys):
    pairs = list(zip(xs, ys))
    same = sum(int((x.argmax(-1) == y.argmax(-1)).sum()) for x, y in pairs)
    return same / sum(x.shape[0] for x, _ in pairs)


def max_weight_diff(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    worst, where = 0.0, None
    for k, v in sa.items():
        if k not in sb or not v.is_floating_point():
            continue
        d = float((v.float() - sb[k].float()).abs().max()) if v.numel() else 0.0
        if d > worst or where is None:
            worst, where = d, k
    missing = sorted(set(k for k, v in sa.items() if v.is_floating_point()) ^
                     set(k for k, v in sb.items() if v.is_floating_point()))
    return worst, where, missing


def mean_diff(xs, ys):
    pairs = list(zip(xs, ys))
    return sum(float((x - y).abs().sum()) for x, y in pairs) / sum(x.numel() for x, _ in pairs)


def long_prompt_ids(model_dir, tokens=255):
    """BOS + the first `tokens` tokens of data/text/heldout.txt, by the reference tokenizer."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with open(os.path.join(REPO, "data", "text", "heldout.txt"), encoding="utf-8") as f:
        text = f.read(64 * tokens)  # bytes enough for `tokens` tokens of English text
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
    if len(ids) < tokens:
        raise SystemExit(f"data/text/heldout.txt: {len(ids)} tokens in its first {64 * tokens} "
                         f"characters, fewer than {tokens}")
    return torch.tensor([tokenizer.bos_token_id] + ids, dtype=torch.int64)


def float64_check(model, prompts, reference_f32, lowbit):
    """(a)'s forward with activation quantization in float64, against (a) in float32 and lowbit."""
    set_quantization_enabled(model, True)
    model.double()
    f64 = [x.float() for x in run_prompts(model, prompts)]
    model.float()
    return {"reference_f32_vs_f64_max": max_diff(reference_f32, f64),
            "reference_f32_vs_f64_mean": mean_diff(reference_f32, f64),
            "argmax_agreement_reference_f32_vs_f64": argmax_agreement(reference_f32, f64),
            "lowbit_vs_f64_max": max_diff(lowbit, f64),
            "lowbit_vs_f64_mean": mean_diff(lowbit, f64),
            "argmax_agreement_lowbit_vs_f64": argmax_agreement(lowbit, f64)}


def tie_following_float64(model, model_f32, prompts, io_files, noise):
    """(a)'s float64 forward that follows lowbit through rounding ties, against lowbit.

    A quantized input that sits within float32 rounding of a boundary between two codes gets one
    code in float32 and may get the other in float64; from there the two forwards part (one int8
    code of layer 2 moves every logit after its token by up to 1, measured on a static asymmetric
    W8A8 checkpoint), so the plain float64 forward says little about correctness. This one runs (a)
    in float64 but, at every quantized Linear input, compares compressed-tensors' float64 quantization
    of its own input with compressed-tensors' float32 quantization (on `model_f32`, (a) before it
    went to float64) of lowbit's input of that module (`io_files`: lowbit logits --dump-linear-io,
    one per prompt). Where the dequantized values differ (by more than 1e-6 of the token's largest:
    a dynamic scale computed in float32 instead of float64 moves every value by ~1e-7 of it, one
    code step is 4e-6 of it or more) and the two inputs agree to `noise` of the token's largest
    magnitude, the value is a tie and lowbit's value is used; a differing value whose inputs do not
    agree is counted as unexplained (an upstream error) and the float64 value is kept. The result
    must agree with lowbit's logits to float32 accumulation noise."""
    saved_schemes = {}
    stats = {"values_followed": 0, "values_unexplained": 0, "first_tie": None}
    state = {}

    def pre_hook(module, args, name):
        io = state["io"]
        key = name + ".input"
        if key not in io:
            raise SystemExit(f"{state['path']}: no {key} (lowbit logits --dump-linear-io output?)")
        act = saved_schemes[name].input_activations
        x64 = args[0]
        xl = io[key].float()[None]
        if tuple(xl.shape) != tuple(x64.shape):
            raise SystemExit(f"{state['path']}: {key} has shape {list(xl.shape[1:])}, the "
                             f"reference input {list(x64.shape[1:])}")
        q64 = ct_forward.forward_quantize(module, x64, "input", act)
        ql = ct_forward.forward_quantize(model_f32.get_submodule(name), xl, "input", act).double()
        differs = (q64 - ql).abs() > 1e-6 * q64.abs().amax(-1, keepdim=True)
        near = (xl.double() - x64).abs() <= noise * x64.abs().amax(-1, keepdim=True)
        follow = differs & near
        stats["values_followed"] += int(follow.sum())
        stats["values_unexplained"] += int((differs & ~near).sum())
        if stats["first_tie"] is None and bool(follow.any()):
            _, row, col = (int(v) for v in follow.nonzero()[0])
            stats["first_tie"] = {
                "prompt": state["prompt"], "module": name, "token": row,
                "x_lowbit": float(xl[0, row, col]), "x_float64": float(x64[0, row, col]),
                "dequantized_lowbit": float(ql[0, row, col]),
                "dequantized_float64": float(q64[0, row, col])}
        return (torch.where(follow, ql, q64),)

    import compressed_tensors.quantization.lifecycle.forward as ct_forward
    hooks = []
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is not None and scheme.input_activations is not None:
            # The hook hands the module an input it has quantized already: switch compressed-tensors'
            # own input quantization of this module off (weights stay as they are).
            saved_schemes[name] = scheme
            module.quantization_scheme = scheme.model_copy(update={"input_activations": None})
            hooks.append(module.register_forward_pre_hook(
                lambda m, args, name=name: pre_hook(m, args, name)))
    set_quantization_enabled(model, True)
    model.double()
    logits = []
    try:
        with torch.no_grad():
            for i, (ids, path) in enumerate(zip(prompts, io_files)):
                state.update(io=load_file(path), path=path, prompt=i)
                logits.append(model(ids[None]).logits[0].float())
    finally:
        for h in hooks:
            h.remove()
        for name, scheme in saved_schemes.items():
            model.get_submodule(name).quantization_scheme = scheme
        model.float()
    return logits, stats


def linear_io_check(model, path, tol):
    """(a)'s decoder Linears, each run on lowbit's own inputs, against lowbit's outputs.

    `path`: `lowbit logits --dump-linear-io` of the long prompt (<module>.input, <module>.output).
    compressed-tensors quantizes lowbit's float32 input in float32 (its forward_quantize, the same
    operations lowbit mirrors, so the codes should be identical), then the product with the
    decompressed weight is taken in float64. A row counts as different when its largest |Δ| is
    above `tol` times the module's largest |output| (float32 accumulation over <= 1024 inputs stays
    near 1e-6 of it; one input code moved by one step, or an unquantized input, is 1e-3 or more).
    """
    import compressed_tensors.quantization.lifecycle.forward as ct_forward
    io = load_file(path)
    names = sorted({k.rsplit(".", 1)[0] for k in io})
    rows = rows_off = 0
    worst, worst_module, modules_off = 0.0, None, []
    with torch.no_grad():
        for name in names:
            module = model.get_submodule(name)
            x, y = io[name + ".input"].float(), io[name + ".output"].double()
            scheme = getattr(module, "quantization_scheme", None)
            act = scheme.input_activations if scheme is not None else None
            qx = ct_forward.forward_quantize(module, x[None], "input", act)[0] if act else x
            bias = None if module.bias is None else module.bias.double()
            ref = torch.nn.functional.linear(qx.double(), module.weight.double(), bias)
            rel = (y - ref).abs().max(-1).values / ref.abs().max().clamp_min(1e-30)
            off = int((rel > tol).sum())
            rows, rows_off = rows + rel.numel(), rows_off + off
            if off:
                modules_off.append(f"{name}: {off} of {rel.numel()} rows")
            if float(rel.max()) > worst or worst_module is None:
                worst, worst_module = float(rel.max()), name
    return {"modules": len(names), "rows": rows, "rows_off": rows_off, "tol": tol,
            "worst_relative_diff": worst, "worst_module": worst_module,
            "modules_off": modules_off[:20]}


def load_lowbit_logits(files, prompts):
    out = []
    for i, (path, ids) in enumerate(zip(files, prompts)):
        t = load_file(path)
        if "logits" not in t or "input_ids" not in t:
            raise SystemExit(f"{path}: needs tensors 'logits' and 'input_ids' (lowbit logits output)")
        if t["input_ids"].tolist() != ids.tolist():
            raise SystemExit(f"{path}: input_ids {t['input_ids'].tolist()} are not prompt {i}'s {ids.tolist()}")
        if tuple(t["logits"].shape) != (ids.numel(), t["logits"].shape[-1]):
            raise SystemExit(f"{path}: logits shape {list(t['logits'].shape)} for {ids.numel()} tokens")
        out.append(t["logits"].float())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "golden", "ref-llama-19m"))
    ap.add_argument("--lowbit-logits", nargs="*", default=[])
    ap.add_argument("--lowbit-tol", type=float, default=None)
    ap.add_argument("--lowbit-kernel-logits", nargs="*", default=[],
                    help="logits of lowbit's default kernels (exact code x scale in fp32, as vLLM's "
                         "kernels compute), reported beside (a) for information only")
    ap.add_argument("--lowbit-linear-io", nargs="*", default=[], metavar="FILE",
                    help="`lowbit logits --dump-linear-io` of every prompt (in prompt order), with "
                         "--linear-backend dequant: every decoder Linear of the last (long) prompt "
                         "checked on lowbit's own inputs (report key linear_io), and the float64 "
                         "forward that follows lowbit through rounding ties (float64.tie_following)")
    ap.add_argument("--tie-noise", type=float, default=1e-5,
                    help="how far (relative to the token's largest input) lowbit's input may be from "
                         "the float64 one for a differing code to count as a rounding tie (measured "
                         "float32 noise: <= 1e-6)")
    ap.add_argument("--linear-io-tol", type=float, default=1e-4)
    ap.add_argument("--ab-tol", type=float, default=0.0)
    ap.add_argument("--load-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="dtype the checkpoint is loaded and decompressed in, before the fp32 forward")
    ap.add_argument("--json", default=None)
    ap.add_argument("--print-prompt-ids", action="store_true")
    ap.add_argument("--compare-tensors", default=None, metavar="TENSORS_JSON",
                    help="also report which tensors are byte-identical to this golden tensors.json "
                         "(informational; does not change the exit status)")
    a = ap.parse_args()

    gold = load_file(os.path.join(a.golden, "reference_logits.safetensors"))
    n_prompts = len([k for k in gold if k.endswith(".input_ids")])
    # golden_logits has one entry fewer: the comparisons with it (zip) leave the long prompt out.
    golden_logits = [gold[f"prompt{i}.logits"].float() for i in range(n_prompts)]
    prompts = [gold[f"prompt{i}.input_ids"] for i in range(n_prompts)] + [long_prompt_ids(a.dir)]
    n_prompts += 1
    if a.print_prompt_ids:
        for i, ids in enumerate(prompts):
            print(f"prompt{i}: --prompt-ids {','.join(map(str, ids.tolist()))}")
        return 0
    for flag, files in (("--lowbit-logits", a.lowbit_logits),
                        ("--lowbit-kernel-logits", a.lowbit_kernel_logits),
                        ("--lowbit-linear-io", a.lowbit_linear_io)):
        if files and len(files) != n_prompts:
            raise SystemExit(f"{flag} needs {n_prompts} files (one per prompt of "
                             f"--print-prompt-ids), got {len(files)}")

    stored = read_checkpoint(a.dir)
    report = {"checkpoint": os.path.abspath(a.dir), "num_tensors": len(stored)}
    problems = check_tensor_set(a.dir, stored)
    report["tensor_set_problems"] = problems
    if a.compare_tensors:
        report["compare_tensors"] = compare_with_tensors_json(stored, a.compare_tensors)
    ok = not problems
    if problems:
        print(f"{a.dir}: {len(problems)} tensor(s) differ from the compressed-tensors layout:")
        for p in problems[:50]:
            print("  " + p)
        report["ok"] = False
        if a.json:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
        return 1

    load_dtype = getattr(torch, a.load_dtype)
    report["load_dtype"] = a.load_dtype
    model_a, qconfig = load_via_model_compressor(a.dir, stored, load_dtype)
    # (a) stays in float32 here while the float64 checks convert model_a back and forth.
    model_f32 = copy.deepcopy(model_a) if a.lowbit_linear_io else None
    model_b = load_via_transformers(a.dir, load_dtype)
    wdiff, wkey, wmissing = max_weight_diff(model_a, model_b)
    report["weights_a_vs_b"] = {"max_abs_diff": wdiff, "worst_tensor": wkey, "not_in_both": wmissing}

    variants = ["act", "weight_only"] if has_activation_quant(qconfig) else ["act"]
    lowbit = load_lowbit_logits(a.lowbit_logits, prompts) if a.lowbit_logits else None
    lowbit_kernels = (load_lowbit_logits(a.lowbit_kernel_logits, prompts)
                      if a.lowbit_kernel_logits else None)
    report["variants"] = {}
    reference_logits = {}  # (a)'s logits per variant, for the checks after the loop
    lowbit_best = None
    for v in variants:
        set_quantization_enabled(model_a, v == "act")
        set_quantization_enabled(model_b, v == "act")
        la, lb = run_prompts(model_a, prompts), run_prompts(model_b, prompts)
        r = {"max_abs_logit_diff_a_vs_b": max_diff(la, lb),
             "max_abs_logit_diff_a_vs_bf16_golden": max_diff(la, golden_logits),
             "argmax_agreement_a_vs_bf16_golden": argmax_agreement(la, golden_logits)}
        ok = ok and r["max_abs_logit_diff_a_vs_b"] <= a.ab_tol
        if lowbit is not None:
            r["max_abs_logit_diff_lowbit_vs_a"] = max_diff(lowbit, la)
            r["max_abs_logit_diff_lowbit_vs_b"] = max_diff(lowbit, lb)
            r["argmax_agreement_lowbit_vs_a"] = argmax_agreement(lowbit, la)
            d = r["max_abs_logit_diff_lowbit_vs_a"]
            lowbit_best = d if lowbit_best is None else min(lowbit_best, d)
        reference_logits[v] = la
        report["variants"][v] = r
    if lowbit is not None and a.lowbit_tol is not None:
        report["lowbit_tol"] = a.lowbit_tol
        if has_activation_quant(qconfig):
            # The end-to-end criterion of the module docstring ("float64"). The plain float64
            # forward is always reported (how far float32 rounding ties move the logits).
            r64 = float64_check(model_a, prompts, reference_logits["act"], lowbit)
            if a.lowbit_linear_io:
                # The decisive end-to-end check: the float64 forward that follows lowbit through
                # rounding ties must match lowbit's logits as closely as a weight-only checkpoint's
                # float32 forward does (--lowbit-tol), and no quantized value may differ where the
                # inputs do not agree to float32 noise.
                tf, stats = tie_following_float64(model_a, model_f32, prompts, a.lowbit_linear_io,
                                                  a.tie_noise)
                r64["tie_following"] = dict(stats, **{
                    "lowbit_vs_f64_max": max_diff(lowbit, tf),
                    "lowbit_vs_f64_mean": mean_diff(lowbit, tf),
                    "argmax_agreement_lowbit_vs_f64": argmax_agreement(lowbit, tf),
                    "criterion": "max <= lowbit_tol, values_unexplained == 0"})
                ok = ok and stats["values_unexplained"] == 0 and \
                    r64["tie_following"]["lowbit_vs_f64_max"] <= a.lowbit_tol
            else:
                # Without lowbit's inputs only the plain float64 forward is there: lowbit must be
                # as close to it as compressed-tensors' own float32 forward, within a factor 2.
                # Ties make this a loose statistic (it only catches gross errors), and with 4-bit
                # activations one tie early in the model decides it, so there it is reported only.
                act_bits = min(s.input_activations.num_bits for s in qconfig.config_groups.values()
                               if s.input_activations is not None)
                r64["criterion"] = "reported only (4-bit activations)" if act_bits < 8 else \
                    "mean <= 2x float32's, argmax changes <= 2x float32's"
                if act_bits >= 8:
                    ok = ok and r64["lowbit_vs_f64_mean"] <= 2 * r64["reference_f32_vs_f64_mean"] \
                        and 1 - r64["argmax_agreement_lowbit_vs_f64"] <= \
                        2 * (1 - r64["argmax_agreement_reference_f32_vs_f64"]) + 1e-9
            report["float64"] = r64
        else:
            ok = ok and lowbit_best <= a.lowbit_tol
    if a.lowbit_linear_io:
        set_quantization_enabled(model_a, True)
        r = linear_io_check(model_a, a.lowbit_linear_io[-1], a.linear_io_tol)
        report["linear_io"] = r
        # Float32 cannot put a value exactly on a rounding boundary where float32 also computes
        # lowbit's: the codes should agree everywhere; 1 row in 1000 leaves room for a tie.
        ok = ok and r["rows_off"] <= r["rows"] // 1000
    if lowbit_kernels is not None:
        la = reference_logits["act"]
        report["lowbit_kernels_vs_a"] = {"max_abs_logit_diff": max_diff(lowbit_kernels, la),
                                         "mean_abs_logit_diff": mean_diff(lowbit_kernels, la),
                                         "argmax_agreement": argmax_agreement(lowbit_kernels, la)}
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
