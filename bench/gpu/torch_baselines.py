#!/usr/bin/env python3
"""The peer baselines of issue 5, measured on the GPU machine in the same call as lowbit's benches.

Runs with the device image's own python3 (PyTorch 2.11 + transformers 5.17 are installed there;
nothing is installed by this script):
    python3 bench/gpu/torch_baselines.py gemm          # torch bf16 matmul, 8B shapes, m = 1..128
    python3 bench/gpu/torch_baselines.py scaled-mm     # torch._scaled_mm FP8 at M = 2048
    python3 bench/gpu/torch_baselines.py generate DIR  # transformers generate(), batch 1

gemm / scaled-mm: x [m, k] @ W[n, k]^T as nn.Linear computes it, timed by CUDA-graph replay (the
median of 5 rounds of 50 replays after warm-up), so launch overhead does not count, as in lowbit's
own kernel benches. scaled-mm: e4m3 x and W with per-tensor scales and with row-wise scales (the
two layouts vLLM's FP8 linear uses on Hopper), bf16 output.

generate: the model of DIR (config.json; weights are NOT read: a `lowbit synth` directory's random
weights and any random init give the same speed) built on the GPU in bf16 with random weights,
then model.generate() with greedy decoding from an 8-token prompt, 64 new tokens (lowbit bench's
decode protocol), min_new_tokens = max_new_tokens so EOS cannot stop it early; the best of 3 after
a warm-up; static cache (the fastest generate() mode without torch.compile) and the default
dynamic cache are both reported.
"""
import json
import statistics
import sys
import time

import torch

SHAPES = {  # Llama-3-8B linear layers: name -> (n, k)
    "qkv": (6144, 4096),
    "o": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
}


def graph_time_us(fn, replays=50, rounds=5):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(replays):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / replays)
    return statistics.median(times)


def bench_gemm():
    print("torch bf16 matmul (x @ W.T), CUDA-graph replay")
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for m in (1, 2, 4, 8, 16, 32, 64, 128):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            us = graph_time_us(lambda: torch.nn.functional.linear(x, w))
            gbs = (n * k + m * k + m * n) * 2 / us / 1e3
            print(f"{name:8s} m={m:<4d} {us:9.2f} us  {gbs:7.0f} GB/s  {2*m*n*k/us/1e6:8.1f} TFLOP/s")


def bench_scaled_mm():
    print("torch._scaled_mm e4m3 -> bf16, M = 2048, CUDA-graph replay")
    m = 2048
    for name, (n, k) in SHAPES.items():
        x = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        row_x = torch.rand(m, 1, device="cuda") + 0.5
        row_w = torch.rand(1, n, device="cuda") + 0.5
        for label, sx, sw in (("per-tensor", one, one), ("row-wise", row_x, row_w)):
            fn = lambda: torch._scaled_mm(x, w.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
            us = graph_time_us(fn, replays=20)
            print(f"{name:8s} {label:10s} {us:9.2f} us  {2*m*n*k/us/1e6:8.1f} TFLOP/s")


def bench_generate(model_dir):
    import transformers

    config = transformers.AutoConfig.from_pretrained(model_dir)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    prompt = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
    new_tokens = 64
    for cache in ("static", "dynamic"):
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                      pad_token_id=0)
        if cache == "static":
            kwargs["cache_implementation"] = "static"
        best = None
        with torch.inference_mode():
            for round_index in range(4):  # round 0 warms up
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(prompt, **kwargs)
                torch.cuda.synchronize()
                seconds = time.perf_counter() - t0
                assert out.shape[1] == 8 + new_tokens, out.shape
                if round_index > 0:
                    best = seconds if best is None else min(best, seconds)
        print(json.dumps({"transformers_generate": cache, "model": model_dir,
                          "new_tokens": new_tokens, "seconds": round(best, 4),
                          "tokens_per_second": round(new_tokens / best, 1),
                          "note": "includes the 8-token prefill, as a user of generate() sees it"}))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    what = sys.argv[1]
    if what == "gemm":
        bench_gemm()
    elif what == "scaled-mm":
        bench_scaled_mm()
    elif what == "generate" and len(sys.argv) == 3:
        bench_generate(sys.argv[2])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
