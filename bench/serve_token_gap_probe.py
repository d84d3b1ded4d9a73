#!/usr/bin/env python3
"""Per-token latency of one streaming request against `lowbit serve` (standard library only).

    bench/serve_token_gap_probe.py PORT

Sends a 60-token prompt (token ids) three times, 32 output tokens each, and prints the time to the
first chunk and the mean gap between chunks (bench/NOTES.md, "Serving").
"""
import json
import sys
import time
import urllib.request

port = sys.argv[1] if len(sys.argv) > 1 else "8000"
body = json.dumps({"prompt": [11, 12, 13, 14, 15, 16, 17, 18, 19, 20] * 6, "max_tokens": 32,
                   "temperature": 0, "stream": True, "ignore_eos": True}).encode()
for _ in range(3):
    start = time.time()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(request) as response:
        for line in response:
            if line.startswith(b"data:"):
                times.append(time.time() - start)
    gaps = [(b - a) * 1000 for a, b in zip(times, times[1:-1])]  # the last is [DONE]
    print(f"ttft {times[0] * 1000:.1f} ms, mean gap {sum(gaps) / len(gaps):.1f} ms")
