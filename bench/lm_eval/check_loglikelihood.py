#!/usr/bin/env python3
"""Recomputes lm-eval's log-likelihoods with transformers, to check what `lowbit serve` returned.

    python check_loglikelihood.py MODEL_DIR SAMPLES.jsonl [--docs 10]

SAMPLES.jsonl is lm-eval's --log_samples output of bench/lm_eval_serve.sh. For each of the first
--docs documents and each choice, the context and continuation are tokenized as lm-eval's API models
do (TemplateAPI._encode_pair: trailing spaces of the context move to the continuation; no BOS), the
model runs in transformers (fp32 on the CPU), and the continuation's summed log-probability is
compared with the server's. Needs torch and transformers (e.g. torch 2.11.0, transformers 5.17.0).
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    return ctx, whole[len(ctx):]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("samples")
    parser.add_argument("--docs", type=int, default=10)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32).eval()
    worst = 0.0
    agree = 0
    with open(args.samples, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][: args.docs]
    for doc in docs:
        server, reference = [], []
        for i, response in enumerate(doc["resps"]):
            gen = doc["arguments"][f"gen_args_{i}"]
            ctx, cont = encode_pair(tokenizer, gen["arg_0"], gen["arg_1"])
            ids = torch.tensor([ctx + cont])
            with torch.no_grad():
                logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            total = sum(logprobs[len(ctx) + j - 1, t].item() for j, t in enumerate(cont))
            server.append(float(response[0][0]))
            reference.append(total)
            worst = max(worst, abs(total - server[-1]))
        agree += max(range(4), key=server.__getitem__) == max(range(4), key=reference.__getitem__)
        print(f"doc {doc['doc_id']}: server {[round(x, 3) for x in server]} "
              f"transformers {[round(x, 3) for x in reference]}")
    print(f"max |server - transformers| = {worst:.4f} nats over {len(docs) * 4} continuations; "
          f"argmax choice agrees on {agree}/{len(docs)} documents")


if __name__ == "__main__":
    main()
