"""Greedy decoding through the server equals `lowbit generate`, alone and under concurrency.

The reference is the CLI's one-request path (runtime::Generator, no batching, no paged cache): the
server's batched engine must pick the same token at every step. `lowbit generate --output-ids`
gives the ids; the expected text is their decoding with special tokens skipped (the server's
default, skip_special_tokens=true), by `lowbit detokenize`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import MODEL_NAME, detokenize, generate_ids, heldout_prompts

MAX_TOKENS = 32
IGNORE_EOS = {"ignore_eos": True}
CLI_PROMPTS = [
    "The old castle stood on the hill above the river, and",
    "Once upon a time",
    "She opened the letter and read",
    heldout_prompts(1, words=40, seed=123)[0],  # a longer prompt: a few prefill blocks
]


@pytest.fixture(scope="module")
def cli_reference():
    """prompt → (ids, text) from `lowbit generate` (two at a time: the machine has two cores)."""
    def one(prompt: str, chat: bool):
        ids = generate_ids(prompt, MAX_TOKENS, chat=chat)
        return ids, detokenize(ids)
    jobs = [(p, False) for p in CLI_PROMPTS] + [(p, True) for p in CLI_PROMPTS[:2]]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: one(*job), jobs))
    return dict(zip(jobs, results))


@pytest.mark.parametrize("index", range(len(CLI_PROMPTS)))
def test_completion_equals_cli(client, cli_reference, index):
    prompt = CLI_PROMPTS[index]
    ids, text = cli_reference[(prompt, False)]
    assert len(ids) == MAX_TOKENS
    result = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                       temperature=0, logprobs=0, extra_body=IGNORE_EOS)
    choice = result.choices[0]
    assert result.usage.completion_tokens == MAX_TOKENS
    assert len(choice.logprobs.tokens) == MAX_TOKENS
    assert choice.text == text, f"server {choice.text!r} != lowbit generate {text!r} (ids {ids})"


@pytest.mark.parametrize("index", range(2))
def test_chat_equals_cli_chat(client, cli_reference, index):
    prompt = CLI_PROMPTS[index]
    ids, text = cli_reference[(prompt, True)]
    result = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
        temperature=0, extra_body=IGNORE_EOS)
    assert result.usage.completion_tokens == MAX_TOKENS
    assert result.choices[0].message.content == text, f"ids {ids}"


def test_32_concurrent_streams_equal_their_one_at_a_time_outputs(server, client):
    prompts = heldout_prompts(32, words=10)
    lengths = [16 + (i * 7) % 33 for i in range(32)]  # 16..48 tokens: requests end at different steps
    alone = []
    for prompt, n in zip(prompts, lengths):
        result = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n,
                                           temperature=0, extra_body=IGNORE_EOS)
        assert result.usage.completion_tokens == n
        alone.append(result.choices[0].text)

    async def stream_one(aclient, prompt, n):
        text = []
        reasons = []
        stream = await aclient.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n,
                                                  temperature=0, stream=True,
                                                  extra_body=IGNORE_EOS)
        async for chunk in stream:
            for c in chunk.choices:
                text.append(c.text)
                reasons.append(c.finish_reason)
        return "".join(text), reasons[-1]

    async def run_all():
        async with server.async_client() as aclient:
            return await asyncio.gather(*(stream_one(aclient, p, n) for p, n in zip(prompts, lengths)))

    together = asyncio.run(run_all())
    mismatches = [(i, prompts[i], alone[i], text) for i, (text, _) in enumerate(together)
                  if text != alone[i]]
    assert not mismatches, f"{len(mismatches)} of 32 differ; first: {mismatches[0]}"
    assert all(reason == "length" for _, reason in together)
    assert server.wait_idle() == (0, 0)
