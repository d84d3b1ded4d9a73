"""The official openai SDK against `lowbit serve`: completions and chat, streamed and not.

The SDK builds its response objects without validating them, so each response (and each streamed
chunk) is also validated strictly with the SDK's own pydantic types (`model_validate`): a missing
required field or a wrong type fails there. That is the shape check.
"""

from __future__ import annotations

import json

import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from conftest import MODEL_NAME, detokenize, generate_ids, render_chat, tokenize

PROMPT = "The old castle stood on the hill above the river, and"
CHAT = [{"role": "user", "content": "Tell me about the old castle on the hill."}]
IGNORE_EOS = {"ignore_eos": True}


def strict(cls, obj):
    """Validates what the server sent against the SDK type `cls` (raises on a bad shape)."""
    raw = obj if isinstance(obj, dict) else obj.to_dict(mode="json", exclude_unset=True)
    return cls.model_validate(raw)


def strict_completion_chunk(chunk):
    """A streamed legacy completion chunk against the SDK's Completion type. The SDK reuses the
    non-streaming type for chunks, whose finish_reason is required, while the API (OpenAI's and
    vLLM's) sends `null` until the last chunk; so only that field may be null here."""
    raw = chunk.to_dict(mode="json", exclude_unset=True)
    for choice in raw.get("choices", []):
        assert "finish_reason" in choice
        if choice["finish_reason"] is None:
            choice["finish_reason"] = "length"
    return Completion.model_validate(raw)


def counts(usage):
    return (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def chat_prompt_tokens(messages) -> int:
    # The template writes BOS itself, so the rendered text is encoded without added specials (as
    # transformers' apply_chat_template(tokenize=True) and vLLM do).
    return len(tokenize(render_chat(messages), special=False))


# -- completions -------------------------------------------------------------------------------

def test_completion_non_stream_shape_and_usage(server, client):
    raw = client.completions.with_raw_response.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0, extra_body=IGNORE_EOS)
    assert raw.http_response.status_code == 200
    assert raw.http_response.headers["content-type"].startswith("application/json")
    body = json.loads(raw.http_response.text)
    completion = strict(Completion, body)
    assert isinstance(raw.parse(), Completion)
    assert completion.object == "text_completion"
    assert completion.model == MODEL_NAME
    assert completion.id
    assert [c.index for c in completion.choices] == [0]
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    assert choice.text
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == len(tokenize(PROMPT)), "prompt_tokens must count BOS + prompt ids"
    assert usage.completion_tokens == 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_completion_stream_with_usage(client):
    kwargs = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0,
                  extra_body=IGNORE_EOS)
    whole = client.completions.create(**kwargs)
    chunks = list(client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    assert len(chunks) >= 2
    for chunk in chunks:
        strict_completion_chunk(chunk)
        assert chunk.model == MODEL_NAME
    ids = {c.id for c in chunks}
    assert len(ids) == 1, f"one stream, one id: {ids}"
    *body, last = chunks
    assert last.choices == [], "the include_usage chunk has no choices"
    assert last.usage is not None
    assert counts(last.usage) == counts(whole.usage)
    for chunk in body:
        assert chunk.usage is None, "usage only in the final chunk"
        assert [c.index for c in chunk.choices] == [0]
    text = "".join(c.choices[0].text for c in body)
    assert text == whole.choices[0].text
    reasons = [c.choices[0].finish_reason for c in body]
    assert reasons[-1] == "length"
    assert all(r is None for r in reasons[:-1]), f"finish_reason before the end: {reasons}"


def test_completion_stream_without_usage_has_no_usage_chunk(client):
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4,
                                            temperature=0, stream=True, extra_body=IGNORE_EOS))
    assert chunks and all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_completion_n3_seeded(client):
    kwargs = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=1234, n=3,
                  extra_body=IGNORE_EOS)
    first = strict(Completion, client.completions.create(**kwargs))
    assert sorted(c.index for c in first.choices) == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in first.choices)
    assert first.usage.prompt_tokens == len(tokenize(PROMPT))
    assert first.usage.completion_tokens == 3 * 8
    again = client.completions.create(**kwargs)
    by_index = lambda r: {c.index: c.text for c in r.choices}  # noqa: E731
    assert by_index(again) == by_index(first), "a seeded request must repeat its samples"

    streamed: dict[int, str] = {}
    for chunk in client.completions.create(**kwargs, stream=True):
        strict_completion_chunk(chunk)
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == by_index(first)


def test_completion_logprobs(client):
    result = strict(Completion, client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=10, temperature=0, logprobs=2,
        extra_body=IGNORE_EOS))
    choice = result.choices[0]
    lp = choice.logprobs
    assert lp is not None
    n = result.usage.completion_tokens
    assert n == 10
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == choice.text
    for i in range(n - 1):
        assert lp.text_offset[i + 1] - lp.text_offset[i] == len(lp.tokens[i])
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0.0
        assert 2 <= len(top) <= 3, "the top 2, plus the sampled token when it is not among them"
        values = list(top.values())
        assert all(v <= 0.0 for v in values)
        assert values == sorted(values, reverse=True), f"top_logprobs not sorted: {top}"
        # Greedy: the sampled token is the most likely one.
        assert token in top
        assert top[token] == pytest.approx(max(values), abs=1e-6)
        assert logprob == pytest.approx(max(values), abs=1e-6)


def test_completion_echo(client):
    result = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6,
                                       temperature=0, echo=True, extra_body=IGNORE_EOS)
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6,
                                      temperature=0, extra_body=IGNORE_EOS)
    assert result.choices[0].text == PROMPT + plain.choices[0].text
    assert counts(result.usage) == counts(plain.usage)


def test_completion_echo_with_logprobs(client):
    result = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4,
                                       temperature=0, echo=True, logprobs=1, extra_body=IGNORE_EOS)
    lp = result.choices[0].logprobs
    usage = result.usage
    assert len(lp.tokens) == len(lp.token_logprobs) == usage.prompt_tokens + usage.completion_tokens
    assert lp.token_logprobs[0] is None, "the first prompt token has no logprob"
    assert all(v is not None and v <= 0.0 for v in lp.token_logprobs[1:])


def _greedy_text(client, max_tokens=32):
    return client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=max_tokens,
                                     temperature=0, extra_body=IGNORE_EOS).choices[0].text


def _stop_word(text: str) -> str:
    """A word of `text` that first occurs well after its start (so the cut is not empty)."""
    for word in text.split():
        if len(word) >= 3 and text.index(word) >= 8:
            return word
    raise AssertionError(f"no usable stop word in {text!r}")


def test_completion_stop_string(client):
    full = _greedy_text(client)
    stop = _stop_word(full)
    expected = full[: full.index(stop)]
    result = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32,
                                       temperature=0, stop=[stop, "never-in-the-output-zzz"],
                                       extra_body=IGNORE_EOS)
    assert result.choices[0].text == expected
    assert result.choices[0].finish_reason == "stop"
    assert getattr(result.choices[0], "stop_reason", None) == stop  # vLLM's extension
    kept = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32,
                                     temperature=0, stop=[stop], extra_body={
                                         "ignore_eos": True, "include_stop_str_in_output": True})
    assert kept.choices[0].text == expected + stop
    assert kept.choices[0].finish_reason == "stop"
    streamed = []
    reasons = []
    for chunk in client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32,
                                           temperature=0, stop=stop, stream=True,
                                           extra_body=IGNORE_EOS):
        streamed.append(chunk.choices[0].text)
        reasons.append(chunk.choices[0].finish_reason)
    assert "".join(streamed) == expected
    assert reasons[-1] == "stop"


def test_completion_stop_token_ids(client):
    """vLLM's stop_token_ids: generation ends at the first stop token, which counts as an output
    token; its text is left out unless include_stop_str_in_output (vLLM v1's detokenizer)."""
    ids = generate_ids(PROMPT, 16)  # the reference greedy ids, from the CLI
    assert len(ids) == 16
    stop_id = ids[5]
    cut = ids.index(stop_id)  # its first occurrence
    for include in (False, True):
        result = client.completions.create(
            model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
            extra_body={"ignore_eos": True, "stop_token_ids": [stop_id],
                        "include_stop_str_in_output": include})
        assert result.choices[0].finish_reason == "stop"
        assert result.usage.completion_tokens == cut + 1
        assert result.choices[0].text == detokenize(ids[: cut + 1 if include else cut])
        assert getattr(result.choices[0], "stop_reason", None) == stop_id


@pytest.mark.parametrize("stream", [False, True])
def test_completion_length_with_ignore_eos(client, stream):
    kwargs = dict(model=MODEL_NAME, prompt="Once", max_tokens=40, temperature=0.8, seed=7,
                  extra_body=IGNORE_EOS)
    if not stream:
        result = client.completions.create(**kwargs)
        assert result.choices[0].finish_reason == "length"
        assert result.usage.completion_tokens == 40
        return
    chunks = list(client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 40
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "length"


def test_sampling_parameters_accepted_and_degenerate_cases_are_greedy(client):
    greedy = _greedy_text(client, 16)
    # Each of these keeps only the most likely token, so sampling at temperature 1 is greedy.
    for extra in ({"top_k": 1}, {"min_p": 1.0}):
        result = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16,
                                           temperature=1.0, seed=3,
                                           extra_body={"ignore_eos": True, **extra})
        assert result.choices[0].text == greedy, f"{extra} must equal greedy"
    result = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16,
                                       temperature=1.0, top_p=1e-6, seed=3, extra_body=IGNORE_EOS)
    assert result.choices[0].text == greedy, "top_p 1e-6 must equal greedy"
    result = strict(Completion, client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0.7, top_p=0.9,
        presence_penalty=0.5, frequency_penalty=0.5, seed=11,
        extra_body={"ignore_eos": True, "top_k": 40, "min_p": 0.05}))
    assert result.usage.completion_tokens == 16


# -- chat --------------------------------------------------------------------------------------

def test_chat_non_stream_shape_and_usage(client):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=12, temperature=0, extra_body=IGNORE_EOS)
    assert raw.http_response.status_code == 200
    result = strict(ChatCompletion, json.loads(raw.http_response.text))
    assert result.object == "chat.completion"
    assert result.model == MODEL_NAME
    assert [c.index for c in result.choices] == [0]
    message = result.choices[0].message
    assert message.role == "assistant"
    assert isinstance(message.content, str) and message.content
    assert result.choices[0].finish_reason == "length"
    assert result.usage.prompt_tokens == chat_prompt_tokens(CHAT)
    assert result.usage.completion_tokens == 12
    assert result.usage.total_tokens == result.usage.prompt_tokens + 12


def test_chat_stream_with_usage(client):
    kwargs = dict(model=MODEL_NAME, messages=CHAT, max_tokens=12, temperature=0,
                  extra_body=IGNORE_EOS)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True,
                                                 stream_options={"include_usage": True}))
    for chunk in chunks:
        strict(ChatCompletionChunk, chunk)
        assert chunk.object == "chat.completion.chunk"
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert counts(last.usage) == counts(whole.usage)
    assert all(c.usage is None for c in body)
    assert body[0].choices[0].delta.role == "assistant", "the first delta carries the role"
    content = "".join(c.choices[0].delta.content or "" for c in body)
    assert content == whole.choices[0].message.content
    reasons = [c.choices[0].finish_reason for c in body]
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])


def test_chat_n3_seeded(client):
    kwargs = dict(model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=1.0, seed=99, n=3,
                  extra_body=IGNORE_EOS)
    result = strict(ChatCompletion, client.chat.completions.create(**kwargs))
    assert sorted(c.index for c in result.choices) == [0, 1, 2]
    assert result.usage.completion_tokens == 24
    again = client.chat.completions.create(**kwargs)
    contents = lambda r: {c.index: c.message.content for c in r.choices}  # noqa: E731
    assert contents(again) == contents(result)


def test_chat_logprobs(client):
    result = strict(ChatCompletion, client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=10, temperature=0, logprobs=True,
        top_logprobs=2, extra_body=IGNORE_EOS))
    choice = result.choices[0]
    content = choice.logprobs.content
    assert len(content) == result.usage.completion_tokens == 10
    assert "".join(t.token for t in content) == choice.message.content
    for t in content:
        assert t.logprob <= 0.0
        assert len(t.top_logprobs) == 2
        tops = [x.logprob for x in t.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert all(v <= 0.0 for v in tops)
        assert t.top_logprobs[0].token == t.token, "greedy samples the most likely token"
        assert t.logprob == pytest.approx(tops[0], abs=1e-6)
        if t.bytes is not None:
            assert bytes(t.bytes) == t.token.encode("utf-8")


def test_chat_stop_string(client):
    full = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=32,
                                          temperature=0, extra_body=IGNORE_EOS)
    text = full.choices[0].message.content
    stop = _stop_word(text)
    result = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=32,
                                            temperature=0, stop=stop, extra_body=IGNORE_EOS)
    assert result.choices[0].message.content == text[: text.index(stop)]
    assert result.choices[0].finish_reason == "stop"


def test_chat_length_with_ignore_eos_stream(client):
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=30, temperature=0.9, seed=5, stream=True,
        stream_options={"include_usage": True}, extra_body=IGNORE_EOS))
    assert chunks[-1].usage.completion_tokens == 30
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "length"


def test_models_list(server, client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids[0] == MODEL_NAME
    for m in models.data:
        strict(Model, m)
        assert m.object == "model"
    body = server.get("/v1/models").json()
    assert body["object"] == "list"


def test_completion_prompt_as_token_ids_and_batches(client):
    """Prompts as token ids (what lm-eval's local-completions sends) and lists of prompts."""
    ids = tokenize(PROMPT)
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=8, temperature=0,
                                       extra_body=IGNORE_EOS)
    by_text = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8,
                                        temperature=0, extra_body=IGNORE_EOS)
    assert by_ids.usage.prompt_tokens == len(ids), "token-id prompts are taken as they are"
    assert by_ids.choices[0].text == by_text.choices[0].text
    second = "Once upon a time"
    batch = client.completions.create(model=MODEL_NAME, prompt=[PROMPT, second], max_tokens=8,
                                      temperature=0, extra_body=IGNORE_EOS)
    texts = {c.index: c.text for c in batch.choices}
    alone = client.completions.create(model=MODEL_NAME, prompt=second, max_tokens=8, temperature=0,
                                      extra_body=IGNORE_EOS)
    assert texts == {0: by_text.choices[0].text, 1: alone.choices[0].text}
    assert batch.usage.prompt_tokens == len(ids) + len(tokenize(second))
    assert batch.usage.completion_tokens == 16
    token_batch = client.completions.create(model=MODEL_NAME, prompt=[ids, tokenize(second)],
                                            max_tokens=8, temperature=0, extra_body=IGNORE_EOS)
    assert {c.index: c.text for c in token_batch.choices} == texts


def test_lm_eval_style_loglikelihood_request(client):
    """lm-eval's local-completions scores a continuation with echo, logprobs=1, max_tokens=1."""
    context, continuation = tokenize(PROMPT), tokenize(" the river", special=False)
    result = client.completions.create(model=MODEL_NAME, prompt=context + continuation,
                                       max_tokens=1, temperature=0, logprobs=1, echo=True, seed=1234)
    lp = result.choices[0].logprobs
    assert len(lp.token_logprobs) == len(context) + len(continuation) + 1
    scored = lp.token_logprobs[len(context):-1]
    assert len(scored) == len(continuation)
    assert all(v is not None and v <= 0.0 for v in scored)
    for value, top in zip(scored, lp.top_logprobs[len(context):-1]):
        assert top and max(top.values()) >= value - 1e-6
