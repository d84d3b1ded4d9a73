"""curl against the server: SSE framing byte for byte, /health, /v1/models, /metrics.

The /metrics exposition is parsed by prometheus_client's parser (what a Prometheus-compatible scraper
reads), and its counters are checked against the usage the same requests reported.
"""

from __future__ import annotations

import json
import re
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from conftest import MODEL_NAME, metric_value, tokenize


def curl(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(["curl", "-sS", "--max-time", "120", *args], capture_output=True,
                            timeout=150)
    assert result.returncode == 0, f"curl {args}: {result.stderr.decode()}"
    return result


def split_headers(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, body


def test_streaming_completion_sse_framing(server):
    request = {"model": MODEL_NAME, "prompt": "The old castle stood on the hill", "max_tokens": 8,
               "temperature": 0, "stream": True, "ignore_eos": True,
               "stream_options": {"include_usage": True}}
    raw = curl("-N", "-i", "-X", "POST", server.url("/v1/completions"),
               "-H", "Content-Type: application/json", "--data-binary", json.dumps(request)).stdout
    status, headers, body = split_headers(raw)
    assert status == 200, raw[:2000]
    assert headers["content-type"].startswith("text/event-stream"), headers
    # (curl has already removed any chunked transfer framing from the body it prints.)
    # Every event is exactly one `data: ` line followed by a blank line; nothing before or after.
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    events = body.split(b"\n\n")
    assert events[-1] == b"", "the body ends right after the last event's blank line"
    events = events[:-1]
    assert events[-1] == b"data: [DONE]"
    assert b"\r" not in body
    payloads = []
    for event in events[:-1]:
        assert re.fullmatch(rb"data: \{[^\n]*\}", event), f"bad SSE event {event!r}"
        payloads.append(json.loads(event[len(b"data: "):].decode("utf-8")))
    assert len(payloads) >= 2
    *chunks, usage_chunk = payloads
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 8
    assert usage_chunk["usage"]["prompt_tokens"] == len(tokenize(request["prompt"]))
    for chunk in chunks:
        assert chunk["object"] == "text_completion"
        assert chunk.get("usage") is None
    text = "".join(c["choices"][0]["text"] for c in chunks)

    plain = curl("-X", "POST", server.url("/v1/completions"), "-H",
                 "Content-Type: application/json", "--data-binary",
                 json.dumps({k: v for k, v in request.items()
                             if k not in ("stream", "stream_options")})).stdout
    whole = json.loads(plain)
    assert whole["choices"][0]["text"] == text
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert whole["usage"][key] == usage_chunk["usage"][key]


def test_chat_streaming_sse_framing(server):
    request = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello there"}],
               "max_tokens": 5, "temperature": 0, "stream": True, "ignore_eos": True}
    body = curl("-N", "-X", "POST", server.url("/v1/chat/completions"), "-H",
                "Content-Type: application/json", "--data-binary", json.dumps(request)).stdout
    events = body.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]", body[-200:]
    for event in events[:-2]:
        assert re.fullmatch(rb"data: \{[^\n]*\}", event), f"bad SSE event {event!r}"
        assert json.loads(event[6:])["object"] == "chat.completion.chunk"


def test_health_and_models(server):
    result = curl("-o", "/dev/null", "-w", "%{http_code}", server.url("/health"))
    assert result.stdout == b"200"
    models = json.loads(curl(server.url("/v1/models")).stdout)
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]][0] == MODEL_NAME
    assert all(m["object"] == "model" for m in models["data"])


def test_metrics_prometheus_and_counters(server):
    before_text = curl(server.url("/metrics")).stdout.decode()
    families = {f.name: f for f in text_string_to_metric_families(before_text)}
    # prometheus_client strips the _total suffix of counters from the family name.
    for name in ("lowbit:num_requests_running", "lowbit:num_requests_waiting",
                 "lowbit:kv_cache_usage_perc", "lowbit:prompt_tokens", "lowbit:generation_tokens",
                 "lowbit:e2e_request_latency_seconds", "lowbit:time_to_first_token_seconds"):
        assert name in families, f"{name} missing from /metrics: {sorted(families)}"
    assert families["lowbit:num_requests_running"].type == "gauge"
    assert families["lowbit:prompt_tokens"].type == "counter"
    assert families["lowbit:e2e_request_latency_seconds"].type == "histogram"

    prompt = "A counter that counts the prompt tokens of this request"
    response = json.loads(curl("-X", "POST", server.url("/v1/completions"), "-H",
                               "Content-Type: application/json", "--data-binary",
                               json.dumps({"model": MODEL_NAME, "prompt": prompt,
                                           "max_tokens": 7, "ignore_eos": True,
                                           "temperature": 0})).stdout)
    assert response["usage"]["prompt_tokens"] == len(tokenize(prompt))
    after_text = curl(server.url("/metrics")).stdout.decode()
    list(text_string_to_metric_families(after_text))  # still parses
    delta = lambda name, **labels: (metric_value(after_text, name, **labels)  # noqa: E731
                                    - metric_value(before_text, name, **labels))
    # Nothing else talks to this server during the test, so the deltas are this request's.
    assert delta("lowbit:prompt_tokens_total") == response["usage"]["prompt_tokens"]
    assert delta("lowbit:generation_tokens_total") == 7
    assert delta("lowbit:request_success_total", finished_reason="length") == 1
    assert delta("lowbit:e2e_request_latency_seconds_count") == 1
    assert metric_value(after_text, "lowbit:num_requests_running") == 0
    assert 'model_name="' in after_text
