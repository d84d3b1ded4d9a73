#!/usr/bin/env python3
"""Golden vectors for lowbit's calibration algorithms (src/quant/algos), from the real llm-compressor.

Pinned reference environment (/work/venv-llmc, CPU only, run with CUDA_VISIBLE_DEVICES=""):
  llmcompressor==0.14.0.1  compressed-tensors==0.19.0  torch==2.11.0  safetensors==0.8.0

  CUDA_VISIBLE_DEVICES="" /work/venv-llmc/bin/python scripts/reference/make_algo_vectors.py

Every expected value below is produced by llm-compressor's / compressed-tensors' own functions:
  gptq.safetensors       accumulate_hessian (two batches, sequence counting) and quantize_weight on a
                         random bf16 W [32, 256] for several schemes, with qparams from the library's
                         weight observers (memoryless_minmax / memoryless_mse), exactly as
                         GPTQModifier.compress_module_list calls it. actorder="group" was removed from
                         compressed-tensors 0.19 (its validator rejects it); the case `w4a16_actg` emulates
                         what llm-compressor <= 0.9 did for it (permute W and H by descending diag(H),
                         observe the *permuted* W, run quantize_weight without actorder, un-permute,
                         g_idx = (arange // group)[invperm]) with the library's quantize_weight.
  observers.safetensors  MemorylessMSEObserver / StaticMinMaxObserver / MinMaxObserver statistics.
  smoothquant.safetensors SmoothQuantModifier's hook statistics and the scales its _apply_smoothing uses.
  awq.safetensors        AWQModifier: activation statistics, _compute_layer_means, and for its grid search
                         (run by _apply_smoothing on a small attention block) every candidate's ratio,
                         duo flag, scales and loss, plus Q(W*s)/s of some candidates.
Candidate scales are read from the library's own frames (inspect) while it runs; nothing is recomputed
here. Output: tests/unit/quant_algos/data/*.safetensors (metadata: JSON describing the cases).
"""
import inspect
import json
import os
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs,
    QuantizationScheme,
    preset_name_to_scheme,
)
from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight  # noqa: E402
from llmcompressor.modifiers.gptq.helpers import accumulate_hessian  # noqa: E402
from llmcompressor.observers.base import Observer  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "unit",
                   "quant_algos", "data")
ROWS, COLS = 32, 256
DEAD = [5, 77]  # input channels that never fire in the h_b cases


def args_json(args: QuantizationArgs) -> str:
    return args.model_dump_json()


def weights_args(preset: str, **update) -> QuantizationArgs:
    args = preset_name_to_scheme(preset, ["Linear"]).weights
    return args.model_copy(update=update) if update else args


def observe_weight(w: torch.Tensor, args: QuantizationArgs):
    name = args.observer or "memoryless_minmax"
    obs = Observer.load_from_registry(name, base_name="weight", args=args.model_copy(deep=True))
    obs(w)
    return obs.get_qparams()


def make_inputs(gen: torch.Generator):
    # Correlated inputs with uneven channel magnitudes, as real activations have.
    z = torch.randn(4, 64, COLS, generator=gen)
    mix = torch.eye(COLS) + 0.6 * torch.randn(COLS, COLS, generator=gen) / COLS**0.5
    chan = torch.exp(0.7 * torch.randn(COLS, generator=gen))
    x = (z @ mix * chan).to(torch.bfloat16)
    w = 0.02 * torch.randn(ROWS, COLS, generator=gen)
    w[3, 10] = 0.25  # outliers
    w[17, 200] = -0.3
    return x, w.to(torch.bfloat16)


def hessian_of(x: torch.Tensor) -> torch.Tensor:
    module = torch.nn.Linear(COLS, ROWS, bias=False)
    h = torch.zeros(COLS, COLS)
    n = torch.zeros(())
    for batch in (x[:2], x[2:]):  # two batches of two sequences: n counts sequences
        h, n = accumulate_hessian(batch, module, h, n)
    assert n.item() == 4
    return h / n


GPTQ_CASES = [
    # name, preset / args, actorder, hessian, block_size, dampening, weight dtype
    ("w4a16", weights_args("W4A16"), None, "h_a", 128, 0.01, "bf16"),
    ("w4a16_asym", weights_args("W4A16_ASYM"), None, "h_a", 128, 0.01, "bf16"),
    ("w8_channel", weights_args("W8A8"), None, "h_a", 128, 0.01, "bf16"),
    ("w4a16_actw", weights_args("W4A16"), "weight", "h_b", 128, 0.01, "bf16"),
    ("w4a16_actg", weights_args("W4A16"), "group", "h_b", 128, 0.01, "bf16"),
    ("w4a16_asym_actw_bs96", weights_args("W4A16_ASYM"), "weight", "h_b", 96, 0.01, "bf16"),
    ("nvfp4", weights_args("NVFP4A16"), "weight", "h_a", 128, 0.01, "bf16"),
    ("fp8_block", weights_args("FP8_BLOCK"), "weight", "h_a", 128, 0.01, "bf16"),
    ("w4a16_mse", weights_args("W4A16", observer="memoryless_mse"), "weight", "h_a", 128, 0.01,
     "bf16"),
    ("w4_g32_f32", QuantizationArgs(num_bits=4, symmetric=True, strategy="group", group_size=32),
     None, "h_a", 128, 0.05, "f32"),
]


def gptq_case(name, args, actorder, hname, w, block, damp, tensors):
    h = tensors[hname]
    run_args = args.model_copy(update={"actorder": actorder if actorder != "group" else None})
    if actorder == "group":
        perm = torch.argsort(torch.diag(h), descending=True)
        w_in, h_in = w[:, perm], h[perm][:, perm]
    else:
        w_in, h_in = w, h
    qp = observe_weight(w_in, run_args)
    gs = qp["global_scale"]
    q, loss, fallback = quantize_weight(
        weights=w_in.unsqueeze(0).to(torch.float32).clone(),
        hessians=h_in.unsqueeze(0).clone(),
        scale=qp["scale"].unsqueeze(0),
        zero_point=qp["zero_point"].unsqueeze(0),
        global_scale=None if gs is None else gs.reshape(-1)[0].reshape(1),
        quant_args=run_args,
        blocksize=block,
        percdamp=damp,
    )
    assert not fallback.any(), name
    q = q[0]
    if actorder == "group":
        invperm = torch.argsort(perm)
        q = q[:, invperm]
        tensors[f"{name}.g_idx"] = (torch.arange(COLS, dtype=torch.int32) //
                                    args.group_size)[invperm].contiguous()
    tensors[f"{name}.q"] = q.contiguous()
    tensors[f"{name}.scale"] = qp["scale"].to(torch.float32).contiguous()
    tensors[f"{name}.zero_point"] = qp["zero_point"].to(torch.float32).contiguous()
    if gs is not None:
        tensors[f"{name}.global_scale"] = gs.to(torch.float32).reshape(1)
    tensors[f"{name}.loss"] = loss.to(torch.float64).reshape(1)
    print(f"gptq {name}: loss {loss.item():.6g}", file=sys.stderr)
    return {"name": name, "args": json.loads(args_json(args)), "actorder": actorder,
            "hessian": hname, "block_size": block, "dampening_frac": damp}


def make_gptq():
    gen = torch.Generator().manual_seed(1234)
    x, w = make_inputs(gen)
    x_dead = x.clone()
    x_dead[..., DEAD] = 0  # dead input channels: diag(H) == 0
    tensors = {"x": x, "w": w, "w_f32": w.to(torch.float32) +
               1e-4 * torch.randn(ROWS, COLS, generator=gen)}
    tensors["h_a"] = hessian_of(x)
    tensors["h_b"] = hessian_of(x_dead)
    # h_b is h_a with the dead rows / columns zeroed, bit for bit (checked here), so only h_a is
    # stored and the test derives h_b; this keeps the fixture small.
    derived = tensors["h_a"].clone()
    derived[DEAD, :] = 0
    derived[:, DEAD] = 0
    assert torch.equal(derived, tensors["h_b"])
    cases = []
    for name, args, actorder, hname, block, damp, wdtype in GPTQ_CASES:
        wt = tensors["w"] if wdtype == "bf16" else tensors["w_f32"]
        meta = gptq_case(name, args, actorder, hname, wt, block, damp, tensors)
        meta["weight"] = "w" if wdtype == "bf16" else "w_f32"
        cases.append(meta)
        q = tensors[f"{name}.q"]
        if torch.equal(q.to(torch.bfloat16).to(torch.float32), q):  # lossless: store as bf16
            tensors[f"{name}.q"] = q.to(torch.bfloat16)
    del tensors["h_b"]
    save(tensors, "gptq.safetensors", {"cases": json.dumps(cases), "dead_columns": json.dumps(DEAD)})


def save(tensors, file, meta):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, file)
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=meta)
    os.chmod(path, 0o644)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    torch.manual_seed(0)
    make_gptq()
    if "--gptq-only" in sys.argv:
        sys.exit(0)
    from make_algo_vectors_smoothing import make_awq, make_observers, make_smoothquant

    make_observers(save, observe_weight)
    make_smoothquant(save)
    make_awq(save)
