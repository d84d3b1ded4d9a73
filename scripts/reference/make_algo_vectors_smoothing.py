"""Observer, SmoothQuant and AWQ golden vectors; imported by make_algo_vectors.py (same pins:
llmcompressor==0.14.0.1, compressed-tensors==0.19.0, torch==2.11.0, safetensors==0.8.0; CPU only).

The modifiers run their own hooks and their own _apply_smoothing on a tiny block
(input_layernorm -> self_attn{q,k,v}_proj), inside DisableQuantization and
calibration_forward_context as the sequential pipeline runs them. Values the library keeps only in
local variables (SmoothQuant's final scales, AWQ's candidate scales) are read from its frames."""
import copy
import inspect
import json
import sys

import torch

from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.lifecycle.initialize import (
    initialize_module_for_quantization,
)
from llmcompressor.core import active_session
from llmcompressor.modifiers.transform.awq import AWQModifier
from llmcompressor.modifiers.transform.awq.mappings import AWQMapping
from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
from llmcompressor.observers.base import Observer
from llmcompressor.pipelines.cache import IntermediatesCache
from llmcompressor.utils.helpers import DisableQuantization, calibration_forward_context

HIDDEN = 128
OUT_DIMS = {"q_proj": 64, "k_proj": 32, "v_proj": 32}  # GQA-like: unequal row counts


class Norm(torch.nn.Module):
    """Stands in for an RMSNorm: a per-channel weight (ndim 1) the smoothing divides."""

    def __init__(self, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(HIDDEN, dtype=dtype))

    def forward(self, x):
        return x * self.weight


class Attn(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        for name, rows in OUT_DIMS.items():
            setattr(self, name, torch.nn.Linear(HIDDEN, rows, bias=False, dtype=dtype))

    def forward(self, hidden_states):
        return torch.cat([self.q_proj(hidden_states), self.k_proj(hidden_states),
                          self.v_proj(hidden_states)], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.input_layernorm = Norm(dtype)
        self.self_attn = Attn(dtype)

    def forward(self, x):
        return self.self_attn(self.input_layernorm(x))


def make_block(gen, dtype):
    block = Block(dtype)
    with torch.no_grad():
        block.input_layernorm.weight.copy_(1 + 0.2 * torch.randn(HIDDEN, generator=gen))
        for name in OUT_DIMS:
            lin = getattr(block.self_attn, name)
            w = 0.05 * torch.randn(lin.weight.shape, generator=gen)
            w[:, 7] *= 4  # a channel with large weights
            lin.weight.copy_(w)
    chan = torch.exp(0.8 * torch.randn(HIDDEN, generator=gen))
    chan[[3, 40, 99]] *= 12  # activation outlier channels, what smoothing is for
    batches = [(torch.randn(2, 16, HIDDEN, generator=gen) * chan + 0.1).to(dtype) for _ in range(3)]
    return block, batches


def norm_outputs(block, batches):
    return torch.cat([block.input_layernorm(b).detach().reshape(-1, HIDDEN) for b in batches])


def balance_tensors(block, prefix, tensors):
    for name in OUT_DIMS:
        tensors[f"{prefix}.{name}"] = getattr(block.self_attn, name).weight.detach().clone()


# ------------------------------------------------------------------------------------- observers
def make_observers(save, observe_weight):
    gen = torch.Generator().manual_seed(7)
    w = 0.03 * torch.randn(16, 256, generator=gen)
    w[2, 5], w[9, 130] = 0.4, -0.5
    tensors = {"w": w.to(torch.bfloat16), "w_f32": w}
    cases = []
    mse_cases = [
        ("mse_w4_g128", QuantizationArgs(num_bits=4, strategy="group", group_size=128), "w"),
        ("mse_w4_asym_g32", QuantizationArgs(num_bits=4, symmetric=False, strategy="group",
                                             group_size=32), "w"),
        ("mse_w8_channel", QuantizationArgs(num_bits=8, strategy="channel"), "w"),
        ("mse_w4_g64_f32", QuantizationArgs(num_bits=4, strategy="group", group_size=64), "w_f32"),
        ("mse_kwargs", QuantizationArgs(num_bits=4, symmetric=False, strategy="channel",
                                        observer_kwargs={"grid": 50, "maxshrink": 0.5,
                                                         "patience": 2, "norm": 2.0}), "w"),
    ]
    for name, args, wname in mse_cases:
        args = args.model_copy(update={"observer": "memoryless_mse"})
        obs = Observer.load_from_registry("memoryless_mse", base_name="weight",
                                          args=args.model_copy(deep=True))
        obs(tensors[wname])
        tensors[f"{name}.min"] = obs.min_vals.to(torch.float32).clone()
        tensors[f"{name}.max"] = obs.max_vals.to(torch.float32).clone()
        qp = obs.get_qparams()
        tensors[f"{name}.scale"] = qp["scale"].to(torch.float32)
        tensors[f"{name}.zero_point"] = qp["zero_point"].to(torch.float32)
        cases.append({"name": name, "args": json.loads(args.model_dump_json()), "weight": wname})

    # Activation observers over three batches: the statistics after each batch.
    acts = [(torch.randn(2, 8, 64, generator=gen) * (1 + i)).to(torch.bfloat16) for i in range(3)]
    tensors["acts"] = torch.stack(acts)
    act_cases = [
        ("static_tensor", "static_minmax", QuantizationArgs(num_bits=8, type="float")),
        ("ema_tensor", "minmax", QuantizationArgs(num_bits=8, type="float")),
        ("static_tgroup", "static_minmax",
         QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                          dynamic="local")),
        ("ema_tgroup", "minmax",
         QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                          dynamic="local")),
    ]
    for name, obs_name, args in act_cases:
        obs = Observer.load_from_registry(obs_name, base_name="input", args=args)
        mins, maxs = [], []
        for a in acts:
            obs(a)
            mins.append(obs.min_vals.to(torch.float32).clone())
            maxs.append(obs.max_vals.to(torch.float32).clone())
        tensors[f"{name}.min"] = torch.stack(mins)
        tensors[f"{name}.max"] = torch.stack(maxs)
        cases.append({"name": name, "observer": obs_name, "args": json.loads(args.model_dump_json())})
    save(tensors, "observers.safetensors", {"cases": json.dumps(cases)})


# ----------------------------------------------------------------------------------- SmoothQuant
def _capture_local(func_name, var):
    """A profiler hook that records `var` from the caller of `func_name` each time it is called."""
    seen = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == func_name:
            caller = frame.f_back
            while var not in caller.f_locals:  # skip decorator wrappers (torch.no_grad)
                caller = caller.f_back
            seen.append(caller.f_locals[var].detach().clone())

    return seen, prof


def make_smoothquant(save):
    gen = torch.Generator().manual_seed(11)
    tensors, cases = {}, []
    sq_cases = [("sq_a05", 0.5, "smoothquant", torch.bfloat16),
                ("sq_a08", 0.8, "smoothquant", torch.bfloat16),
                ("sq_log", 0.5, "log_equalization", torch.bfloat16),
                ("sq_a08_f32", 0.8, "smoothquant", torch.float32)]
    for name, alpha, algo, dtype in sq_cases:
        block, batches = make_block(gen, dtype)
        tensors[f"{name}.act"] = norm_outputs(block, batches)
        balance_tensors(block, name, tensors)
        mod = SmoothQuantModifier(
            smoothing_strength=alpha, algorithm=algo,
            mappings=[[["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"], "re:.*input_layernorm"]])
        mod.ignore = []
        mod.resolved_mappings_ = mod._resolve_mappings(block)
        mod.scales_ = {}
        with calibration_forward_context(block):
            mod._setup_scale_hooks()
            for b in batches:
                block(b)
            stats = mod.scales_["input_layernorm"]
            tensors[f"{name}.min"] = stats.min_channel_vals.to(torch.float32).clone()
            tensors[f"{name}.max"] = stats.max_channel_vals.to(torch.float32).clone()
            seen, prof = _capture_local("smooth", "scales")
            sys.setprofile(prof)
            try:
                mod._apply_smoothing(block)
            finally:
                sys.setprofile(None)
            mod.remove_hooks()
        assert len(seen) == 4 and all(torch.equal(seen[0], s) for s in seen)
        tensors[f"{name}.scales"] = seen[0].to(torch.float64)
        cases.append({"name": name, "alpha": alpha, "algorithm": algo,
                      "dtype": "bf16" if dtype == torch.bfloat16 else "f32"})
    save(tensors, "smoothquant.safetensors", {"cases": json.dumps(cases)})


# ------------------------------------------------------------------------------------------- AWQ
def _find_frame_locals(func_name):
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == func_name:
            return frame.f_locals
        frame = frame.f_back
    return None


def run_awq(block, batches, args, duo, keep_weights):
    """Runs AWQModifier's hooks and _apply_smoothing; returns what it computed."""
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    for name in OUT_DIMS:
        initialize_module_for_quantization(getattr(block.self_attn, name), scheme)
    mod = AWQModifier(mappings=[AWQMapping("re:.*input_layernorm",
                                           ["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"])],
                      duo_scaling=duo, n_grid=20, offload_device=None)
    state = active_session().state
    state.loss_masks, state.sequential_prefetch = None, False
    candidates, weights = [], {}

    def parent_hook(module, inputs, output):
        loc = _find_frame_locals("_compute_best_scale")
        if loc is None or "ratio" not in loc:
            return  # the fp reference pass, before the grid search
        key = (loc["ratio"], loc["use_duo_scaling"])
        if candidates and candidates[-1]["key"] == key:
            return  # later batches of the same candidate
        candidates.append({"key": key, "scales": loc["scales"].detach().clone()})
        if len(candidates) - 1 in keep_weights:
            weights[len(candidates) - 1] = {
                n: getattr(module, n).weight.detach().clone() for n in OUT_DIMS}

    losses = []
    orig_loss = AWQModifier._compute_loss

    def loss_spy(self, *a, **k):
        value = orig_loss(self, *a, **k)
        losses.append(value)
        return value

    AWQModifier._compute_loss = loss_spy
    # _apply_smoothing pins the cached batches (page-locked memory for faster H2D copies), which
    # needs a CUDA driver even on CPU; pinning does not change any value, so it is skipped here.
    orig_pin = IntermediatesCache.pin_memory
    IntermediatesCache.pin_memory = lambda self, *a, **k: None
    try:
        with calibration_forward_context(block), DisableQuantization(block):
            mod._set_resolved_mappings(block)
            mod._setup_activation_cache_hooks()
            for b in batches:
                block(b)
            x_sum, count = [t.clone() for t in mod._smooth_activation_stats["input_layernorm"]]
            balance = [getattr(block.self_attn, n) for n in OUT_DIMS]
            w_mean = AWQModifier._compute_layer_means(balance) if duo is not False else None
            handle = block.self_attn.register_forward_hook(parent_hook)
            best_seen, prof = _capture_local("_smooth", "best_scales")
            sys.setprofile(prof)
            try:
                mod._apply_smoothing(block)
            finally:
                sys.setprofile(None)
            handle.remove()
            mod.remove_hooks()
    finally:
        AWQModifier._compute_loss = orig_loss
        IntermediatesCache.pin_memory = orig_pin
    return x_sum, count, w_mean, candidates, losses, weights, best_seen[0]


def make_awq(save):
    gen = torch.Generator().manual_seed(23)
    tensors, cases = {}, []
    awq_cases = [
        ("awq_w4asym_g32_duo", QuantizationArgs(num_bits=4, symmetric=False, strategy="group",
                                                group_size=32), True),
        ("awq_w4_channel_both", QuantizationArgs(num_bits=4, strategy="channel"), "both"),
        ("awq_w4asym_g64_noduo", QuantizationArgs(num_bits=4, symmetric=False, strategy="group",
                                                  group_size=64), False),
    ]
    for name, args, duo in awq_cases:
        block, batches = make_block(gen, torch.bfloat16)
        tensors[f"{name}.act"] = norm_outputs(block, batches)
        balance_tensors(block, name, tensors)
        keep = [0, 7]
        x_sum, count, w_mean, cands, losses, weights, best = run_awq(
            block, batches, args, duo, keep)
        assert len(cands) == len(losses) == 20, (len(cands), len(losses))
        tensors[f"{name}.x_sum"] = x_sum
        tensors[f"{name}.count"] = count.reshape(1).to(torch.int64)
        if w_mean is not None:
            tensors[f"{name}.w_mean"] = w_mean.to(torch.float64)
        tensors[f"{name}.cand_scales"] = torch.stack([c["scales"].to(torch.float64) for c in cands])
        tensors[f"{name}.cand_ratio"] = torch.tensor([c["key"][0] for c in cands], dtype=torch.float64)
        tensors[f"{name}.cand_duo"] = torch.tensor([int(c["key"][1]) for c in cands], dtype=torch.int32)
        tensors[f"{name}.cand_loss"] = torch.tensor(losses, dtype=torch.float64)
        tensors[f"{name}.best_scales"] = best.to(torch.float64)
        for idx, ws in weights.items():
            for n, w in ws.items():
                tensors[f"{name}.cand{idx}.{n}"] = w
        best_idx = min(range(len(losses)), key=lambda i: (losses[i], i))
        assert torch.equal(best, cands[best_idx]["scales"])  # the first strict minimum wins
        print(f"awq {name}: best candidate {best_idx} ratio {cands[best_idx]['key']} "
              f"loss {losses[best_idx]:.6g}; scales dtype {cands[-1]['scales'].dtype}", file=sys.stderr)
        cases.append({"name": name, "args": json.loads(args.model_dump_json()),
                      "duo_scaling": duo, "n_grid": 20, "kept_candidates": keep})
    save(tensors, "awq.safetensors", {"cases": json.dumps(cases)})
