"""A bounded soak on loopback: 16 concurrent greedy streams of varied prompts for
$LOWBIT_SOAK_SECONDS (default 120), every output checked against the prompt's output alone.

Expected outputs are computed first, one request at a time through the same server; then a warm-up
at concurrency 16, each prompt twice (it allocates whatever the batched path allocates: activation
buffers for a 16-sequence step, malloc arenas of the worker threads, the KV blocks 16 sequences
touch) before the RSS baseline is read. The soak itself is bounded in time and in requests and
stops by itself; it only talks to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from conftest import MODEL_NAME, heldout_prompts, start_server

CONCURRENCY = 16
PROMPTS = 24
MAX_REQUESTS = 100_000  # a bound on the loop besides the time
# RSS may grow after the warm-up by at most this much. The KV pool is allocated up front and capped
# at 32 MiB here (--kv-cache-memory 32M), so even if the soak touched pool pages the warm-up had not,
# that is <= 32 MiB; the rest is room for glibc allocator noise (per-thread arenas keep freed chunks;
# the handler threads' arenas already grew in the warm-up). Measured on the 2-core dev machine:
# +1.7 MiB over 384 requests (20 s), +1.0 MiB over 2688 requests (120 s). What it catches: a leak of
# >= ~65 KiB per request over the ~1000 requests of a 45 s CI soak (>= ~25 KiB over the ~2700 of the
# 120 s default), e.g. a request's logits rows or a thread per request; a leak of KV blocks shows up
# sooner, as requests that no longer fit the 32 MiB pool and never finish.
RSS_GROWTH_BOUND_KIB = 64 * 1024


def soak_seconds() -> float:
    return float(os.environ.get("LOWBIT_SOAK_SECONDS", "120"))


@pytest.fixture(scope="module")
def soak_server():
    # --kv-cache-memory 32M holds 16 sequences of <= 96 tokens with room to spare at any KV dtype up
    # to fp32 (8 layers x 2 x 2 heads x 64 x 4 B = 8 KiB per token: 4096 tokens).
    s = start_server("--max-num-seqs", str(CONCURRENCY), "--kv-cache-memory", "32M", name="soak")
    yield s
    s.stop()


async def stream_text(aclient, prompt: str, max_tokens: int) -> tuple[str, str | None, int]:
    stream = await aclient.completions.create(
        model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    text, reason, completion_tokens = [], None, -1
    async for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.text)
            reason = choice.finish_reason or reason
        if chunk.usage is not None:
            completion_tokens = chunk.usage.completion_tokens
    return "".join(text), reason, completion_tokens


def test_soak(soak_server):
    server = soak_server
    prompts = heldout_prompts(PROMPTS, words=8, seed=11)
    lengths = [16 + (i * 5) % 33 for i in range(PROMPTS)]  # 16..48 tokens
    jobs = list(zip(prompts, lengths))
    failures: list[str] = []

    async def run_round(aclient, selection, expected):
        semaphore = asyncio.Semaphore(CONCURRENCY)

        async def one(i):
            async with semaphore:
                prompt, n = jobs[i]
                try:
                    text, reason, count = await stream_text(aclient, prompt, n)
                except Exception as error:  # noqa: BLE001 - every error is a failure to report
                    failures.append(f"job {i}: {type(error).__name__}: {error}")
                    return
                if expected is not None and text != expected[i]:
                    failures.append(f"job {i} ({prompt!r}): {text!r} != alone {expected[i]!r}")
                if reason != "length" or count != n:
                    failures.append(f"job {i}: finish {reason}, {count} tokens (wanted length, {n})")
                return text

        return await asyncio.gather(*(one(i) for i in selection))

    async def main():
        async with server.async_client() as aclient:
            # 1. Each prompt alone (concurrency 1): the expected outputs.
            expected = []
            for i in range(PROMPTS):
                text, reason, count = await stream_text(aclient, *jobs[i])
                assert reason == "length" and count == jobs[i][1]
                expected.append(text)
            # 2. Warm-up at full concurrency, checked too.
            await run_round(aclient, list(range(PROMPTS)) * 2, expected)
            assert not failures, failures[:5]
            assert await asyncio.to_thread(server.wait_idle) == (0, 0)
            rss_warm = server.rss_kib()
            # 3. The soak: keep 16 requests in flight until the deadline.
            deadline = time.monotonic() + soak_seconds()
            done = 0
            while time.monotonic() < deadline and done < MAX_REQUESTS:
                batch = [(done + k) % PROMPTS for k in range(CONCURRENCY * 4)]
                await run_round(aclient, batch, expected)
                done += len(batch)
                if failures:
                    break
            return rss_warm, done

    rss_warm, done = asyncio.run(main())
    assert not failures, f"{len(failures)} failures in {done} soak requests; first: {failures[:5]}"
    assert done > 0
    running, waiting = server.wait_idle()
    assert (running, waiting) == (0, 0), f"after the soak: running {running}, waiting {waiting}"
    rss_end = server.rss_kib()
    growth = rss_end - rss_warm
    print(f"soak: {done} requests in {soak_seconds():.0f} s; RSS {rss_warm} KiB after warm-up, "
          f"{rss_end} KiB after the soak ({growth:+d} KiB)")
    assert growth <= RSS_GROWTH_BOUND_KIB, (
        f"RSS grew by {growth} KiB over {done} requests (bound {RSS_GROWTH_BOUND_KIB} KiB)")
    assert server.metric("lowbit:num_requests_running") == 0
    assert server.metric("lowbit:num_requests_waiting") == 0
    assert server.get("/health").status_code == 200
