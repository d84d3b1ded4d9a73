// Request parsing, validation, defaults and the context-length check of the protocol layer.
// Bodies come from the official openai client where the golden file has them
// (scripts/fixtures/make_openai_protocol_goldens.py); the expected errors are vLLM's (messages
// quoted from vllm/sampling_params.py and vllm/entrypoints/openai/*/protocol.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "serve/protocol.h"

namespace lowbit::serve {
namespace {

using Json = nlohmann::ordered_json;

const ProtocolLimits kLimits{.max_model_len = 2048};

std::string golden_request(const std::string& name) {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/serve/data/openai_protocol_golden.json");
  std::stringstream text;
  text << in.rdbuf();
  const Json golden = Json::parse(text.str());
  for (const Json& c : golden["requests"]) {
    if (c["name"] == name) return c["raw"].get<std::string>();
  }
  throw std::runtime_error("no golden request " + name);
}

ApiRequest completion(const std::string& body, const ProtocolLimits& limits = kLimits) {
  return parse_completion_request(body, limits);
}
ApiRequest chat(const std::string& body, const ProtocolLimits& limits = kLimits) {
  return parse_chat_request(body, limits);
}

// Runs `parse`, expecting an ApiError; returns it (a default one after a test failure).
ApiError error_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an ApiError: " << e.what();
    return ApiError(0, "");
  }
  ADD_FAILURE() << "no error";
  return ApiError(0, "");
}

// 400 naming `param`, the message containing `words`.
void expect_refusal(const std::function<void()>& parse, const std::string& param,
                    const std::string& words) {
  const ApiError e = error_of(parse);
  EXPECT_EQ(e.status(), 400) << e.what();
  EXPECT_EQ(e.param(), param) << e.what();
  EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
}

void completion_fails(const std::string& fields, const std::string& param, const std::string& words) {
  SCOPED_TRACE(fields);
  expect_refusal([&] { completion(R"({"prompt": "Hi")" + fields + "}"); }, param, words);
}

void chat_fails(const std::string& fields, const std::string& param, const std::string& words) {
  SCOPED_TRACE(fields);
  expect_refusal([&] { chat(R"({"messages": [{"role": "user", "content": "Hi"}])" + fields + "}"); },
                 param, words);
}

TEST(ProtocolRequestTest, LmEvalLoglikelihoodRequestFromTheOpenaiClient) {
  const ApiRequest r = completion(golden_request("lm_eval_loglikelihood"));
  EXPECT_EQ(r.endpoint, Endpoint::COMPLETIONS);
  EXPECT_EQ(r.model, "ref-llama");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_FALSE(r.prompts[0].text);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(r.max_tokens, 1);
  EXPECT_EQ(r.seed, 1234);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.add_special_tokens);
}

TEST(ProtocolRequestTest, StreamedCompletionWithVllmExtensions) {
  const ApiRequest r = completion(golden_request("completion_stream_vllm_extras"));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once upon");
  EXPECT_EQ(r.max_tokens, 8);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "###"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.temperature, 0.7);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 20);
  EXPECT_EQ(r.repetition_penalty, 1.1);
  EXPECT_EQ(r.min_p, 0.05);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(r.continuous_usage_stats);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{2, 7}));  // duplicates dropped, order kept
  EXPECT_TRUE(r.include_stop_str_in_output);
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_FALSE(r.logprobs);
}

TEST(ProtocolRequestTest, ChatFromTheOpenaiClient) {
  const ApiRequest r = chat(golden_request("chat_full"));
  EXPECT_EQ(r.endpoint, Endpoint::CHAT);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0], (Json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(r.messages[1]["content"], "Capital of\nFrance?");  // text parts joined as vLLM does
  EXPECT_EQ(r.max_tokens, 32);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.presence_penalty, 0.5);
  EXPECT_EQ(r.frequency_penalty, -0.5);
  EXPECT_EQ(r.seed, 7);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.chat_template_kwargs, (Json{{"enable_thinking", false}}));
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(r.continue_final_message);
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_EQ(r.temperature, 1.0);  // OpenAI's default: no generation_config defaults given

  const ApiRequest legacy = chat(golden_request("chat_legacy_max_tokens"));
  EXPECT_EQ(legacy.max_tokens, 5);
  EXPECT_EQ(legacy.n, 3);
  EXPECT_EQ(legacy.temperature, 1.2);
  EXPECT_FALSE(legacy.logprobs);

  expect_refusal([] { chat(golden_request("chat_tools_refused")); }, "tools", "not supported");
  expect_refusal([] { completion(golden_request("completion_logit_bias_refused")); }, "logit_bias",
                 "not supported");
}

TEST(ProtocolRequestTest, Defaults) {
  const ApiRequest c = completion(R"({"prompt": "Hi", "unknown_field": [1, {"x": 2}]})");
  EXPECT_FALSE(c.model);
  EXPECT_EQ(c.max_tokens, 16);  // OpenAI's and vLLM's completion default
  EXPECT_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.top_p, 1.0);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.min_p, 0.0);
  EXPECT_EQ(c.repetition_penalty, 1.0);
  EXPECT_EQ(c.presence_penalty, 0.0);
  EXPECT_EQ(c.n, 1);
  EXPECT_FALSE(c.seed);
  EXPECT_TRUE(c.skip_special_tokens);
  EXPECT_TRUE(c.spaces_between_special_tokens);
  EXPECT_FALSE(c.echo);
  EXPECT_FALSE(c.logprobs);
  EXPECT_FALSE(c.include_usage);
  EXPECT_EQ(completion(R"({"prompt": "Hi", "max_tokens": null})").max_tokens, 16);

  const ApiRequest h = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "model": ""})");
  EXPECT_FALSE(h.max_tokens);  // chat: up to the context limit
  EXPECT_FALSE(h.model);       // empty: the server's default model, as vLLM
  EXPECT_FALSE(h.logprobs);
  EXPECT_TRUE(h.chat_template_kwargs.is_object());
}

TEST(ProtocolRequestTest, PromptForms) {
  EXPECT_EQ(completion(R"({"prompt": ["a", "b", "c"]})").prompts.size(), 3u);
  EXPECT_EQ(completion(R"({"prompt": [[1], [2, 3]]})").prompts[1].ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(completion(R"({"prompt": [5.0, 6]})").prompts[0].ids, (std::vector<int32_t>{5, 6}));
  const std::string empty = "Either prompt or prompt_embeds must be provided and non-empty.";
  for (const char* body : {R"({})", R"({"prompt": null})", R"({"prompt": ""})", R"({"prompt": []})",
                           R"({"prompt": [[]]})", R"({"prompt": ["a", ""]})"}) {
    SCOPED_TRACE(body);
    expect_refusal([&] { completion(body); }, "prompt", empty);
  }
  expect_refusal([] { completion(R"({"prompt": [1, "a"]})"); }, "prompt[1]", "expected an integer");
  expect_refusal([] { completion(R"({"prompt": ["a", 1]})"); }, "prompt", "array of strings");
  expect_refusal([] { completion(R"({"prompt": [[1], 2]})"); }, "prompt", "arrays of token ids");
  expect_refusal([] { completion(R"({"prompt": {"a": 1}})"); }, "prompt", "but got an object");
  expect_refusal([] { completion(R"({"prompt": [1, -2]})"); }, "prompt[1]", "Invalid token id");
  expect_refusal([] { completion(R"({"prompt": [[4294967296]]})"); }, "prompt[0][0]", "Invalid token id");
  expect_refusal([] { completion(R"({"prompt": [1.5]})"); }, "prompt[0]", "expected an integer");
  ProtocolLimits few = kLimits;
  few.max_prompts = 2;
  expect_refusal([&] { completion(R"({"prompt": ["a", "b", "c"]})", few); }, "prompt",
                 "prompt list length 3 exceeds the maximum allowed count of 2.");
  EXPECT_EQ(completion(R"({"prompt": [1, 2, 3, 4]})", few).prompts.size(), 1u);  // ids: no limit
}

TEST(ProtocolRequestTest, SamplingRangesWithVllmMessages) {
  completion_fails(R"(, "temperature": -0.5)", "temperature",
                   "temperature must be non-negative, got -0.5.");
  completion_fails(R"(, "temperature": 2.5)", "temperature", "temperature must be in [0, 2], got 2.5.");
  completion_fails(R"(, "temperature": "hot")", "temperature",
                   "Invalid type for 'temperature': expected a number, but got a string instead.");
  completion_fails(R"(, "top_p": 0)", "top_p", "top_p must be in (0, 1], got 0.0.");
  completion_fails(R"(, "top_p": 1.5)", "top_p", "top_p must be in (0, 1], got 1.5.");
  completion_fails(R"(, "top_k": -2)", "top_k", "top_k must be 0 (disable), or at least 1, got -2.");
  completion_fails(R"(, "top_k": 2.5)", "top_k", "expected an integer");
  completion_fails(R"(, "min_p": 1.5)", "min_p", "min_p must be in [0, 1], got 1.5.");
  completion_fails(R"(, "presence_penalty": 2.5)", "presence_penalty",
                   "presence_penalty must be in [-2, 2], got 2.5.");
  completion_fails(R"(, "frequency_penalty": -3)", "frequency_penalty",
                   "frequency_penalty must be in [-2, 2], got -3.0.");
  completion_fails(R"(, "repetition_penalty": 0)", "repetition_penalty",
                   "repetition_penalty must be greater than zero, got 0.0.");
  // Python reads 1e999 as inf (then vLLM: "must be a finite number"); nlohmann refuses the
  // number itself, which is as good a 400.
  completion_fails(R"(, "repetition_penalty": 1e999)", "", "number overflow parsing '1e999'");
  completion_fails(R"(, "n": 0)", "n", "n must be at least 1, got 0.");
  completion_fails(R"(, "n": 129, "temperature": 1)", "n", "n must be at most 128, got 129.");
  completion_fails(R"(, "n": 2, "temperature": 0)", "n", "n must be 1 when using greedy sampling, got 2.");
  completion_fails(R"(, "seed": 9223372036854775808)", "seed", "out of the 64-bit integer range");
  completion_fails(R"(, "max_tokens": 0)", "max_tokens", "max_tokens must be at least 1, got 0.");
  completion_fails(R"(, "max_tokens": -5, "echo": true)", "max_tokens", "max_tokens must be at least 1");
  completion_fails(R"(, "stream": "yes")", "stream", "expected a boolean");

  EXPECT_EQ(completion(R"({"prompt": "Hi", "top_k": -1})").top_k, 0);  // vLLM: -1 also means off
  EXPECT_EQ(completion(R"({"prompt": "Hi", "temperature": 0.001})").temperature, 0.01);  // vLLM's floor
  EXPECT_EQ(completion(R"({"prompt": "Hi", "temperature": 0})").temperature, 0.0);
  EXPECT_FALSE(completion(R"({"prompt": "Hi", "seed": -1})").seed);  // vLLM: -1 is no seed
  EXPECT_EQ(completion(R"({"prompt": "Hi", "seed": -9223372036854775808})").seed, INT64_MIN);
  EXPECT_EQ(completion(R"({"prompt": "Hi", "n": 128, "temperature": 1})").n, 128);
  EXPECT_EQ(completion(R"({"prompt": "Hi", "max_tokens": 0, "echo": true})").max_tokens, 0);
}

TEST(ProtocolRequestTest, StopsAndStreamOptions) {
  EXPECT_EQ(completion(R"({"prompt": "Hi", "stop": "\n"})").stop, (std::vector<std::string>{"\n"}));
  completion_fails(R"(, "stop": ["a", ""])", "stop", "stop cannot contain an empty string.");
  completion_fails(R"(, "stop": ["a", 3])", "stop[1]", "expected a string");
  completion_fails(R"(, "stop": 3)", "stop", "a string or an array of strings");
  ProtocolLimits one = kLimits;
  one.max_stop = 1;
  expect_refusal([&] { completion(R"({"prompt": "Hi", "stop": ["a", "b"]})", one); }, "stop",
                 "stop may hold at most 1 strings, got 2.");
  completion_fails(R"(, "stop_token_ids": [1, -1])", "stop_token_ids[1]", "Invalid token id");
  completion_fails(R"(, "stop_token_ids": 5)", "stop_token_ids", "expected an array");

  completion_fails(R"(, "stream_options": {"include_usage": true})", "stream_options",
                   "Stream options can only be defined when `stream=True`.");
  // vLLM tests the raw object's truthiness: {} without stream is fine; with stream, {} is a
  // StreamOptions whose include_usage defaults to true.
  EXPECT_FALSE(completion(R"({"prompt": "Hi", "stream_options": {}})").include_usage);
  EXPECT_TRUE(completion(R"({"prompt": "Hi", "stream": true, "stream_options": {}})").include_usage);
  const ApiRequest defaulted =
      completion(R"({"prompt": "Hi", "stream": true, "stream_options": {"continuous_usage_stats": true}})");
  EXPECT_TRUE(defaulted.include_usage);  // StreamOptions.include_usage defaults to true in vLLM
  EXPECT_TRUE(defaulted.continuous_usage_stats);
  EXPECT_FALSE(completion(R"({"prompt": "Hi", "stream": true, "stream_options": {"include_usage": false}})")
                   .include_usage);
}

TEST(ProtocolRequestTest, Logprobs) {
  EXPECT_EQ(completion(R"({"prompt": "Hi", "logprobs": 0})").logprobs, 0);
  EXPECT_EQ(completion(R"({"prompt": "Hi", "logprobs": 20})").logprobs, 20);
  EXPECT_EQ(completion(R"({"prompt": "Hi", "logprobs": true})").logprobs, 1);  // pydantic: bool → int
  completion_fails(R"(, "logprobs": 21)", "logprobs",
                   "Requested sample logprobs of 21, which is greater than max allowed: 20");
  completion_fails(R"(, "logprobs": -2)", "logprobs", "`logprobs` must be a positive value or -1.");
  completion_fails(R"(, "logprobs": -1)", "logprobs", "the whole vocabulary");
  completion_fails(R"(, "logprobs": "5")", "logprobs", "expected an integer");

  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true})").logprobs, 0);
  chat_fails(R"(, "top_logprobs": 2)", "top_logprobs",
             "when using `top_logprobs`, `logprobs` must be set to true.");
  chat_fails(R"(, "logprobs": true, "top_logprobs": -3)", "top_logprobs",
             "`top_logprobs` must be a positive value or -1.");
  chat_fails(R"(, "logprobs": true, "top_logprobs": 25)", "top_logprobs",
             "Requested sample logprobs of 25, which is greater than max allowed: 20");
  chat_fails(R"(, "logprobs": 1)", "logprobs", "expected a boolean");
}

TEST(ProtocolRequestTest, ChatMessages) {
  expect_refusal([] { chat(R"({})"); }, "messages", "Missing required parameter: 'messages'.");
  expect_refusal([] { chat(R"({"messages": []})"); }, "messages", "empty array");
  expect_refusal([] { chat(R"({"messages": "hi"})"); }, "messages", "expected an array");
  expect_refusal([] { chat(R"({"messages": ["hi"]})"); }, "messages[0]", "expected an object");
  expect_refusal([] { chat(R"({"messages": [{"content": "x"}]})"); }, "messages[0].role", "Missing");
  expect_refusal([] { chat(R"({"messages": [{"role": "robot", "content": "x"}]})"); },
                 "messages[0].role", "Invalid value: 'robot'");
  expect_refusal([] { chat(R"({"messages": [{"role": "user"}]})"); }, "messages[0].content", "Missing");
  expect_refusal([] { chat(R"({"messages": [{"role": "user", "content": 5}]})"); },
                 "messages[0].content", "a string or an array of text parts");
  expect_refusal([] { chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
                      "image_url": {"url": "x"}}]}]})"); },
                 "messages[0].content[0].type", "only accepts text parts");
  expect_refusal([] { chat(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"); },
                 "messages[0].content[0].text", "Missing");

  const ApiRequest r = chat(R"({"messages": [{"role": "developer", "content": "d"},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "c1"}]})");
  EXPECT_EQ(r.messages[1]["content"], "");  // an assistant turn may come without content
  EXPECT_TRUE(r.messages[1].contains("tool_calls"));  // other keys pass through to the template
  EXPECT_EQ(r.messages[2]["tool_call_id"], "c1");
  // Key order is kept (chat templates' tojson depends on it).
  const ApiRequest ordered = chat(R"({"messages": [{"content": "x", "role": "user", "name": "n"}]})");
  EXPECT_EQ(ordered.messages[0].begin().key(), "content");
}

TEST(ProtocolRequestTest, ChatOptions) {
  const std::string messages = R"({"messages": [{"role": "user", "content": "Hi"}])";
  const ApiRequest cont = chat(messages + R"(, "continue_final_message": true})");
  EXPECT_TRUE(cont.continue_final_message);
  EXPECT_FALSE(cont.add_generation_prompt);
  chat_fails(R"(, "continue_final_message": true, "add_generation_prompt": true)",
             "continue_final_message",
             "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  EXPECT_FALSE(chat(messages + R"(, "add_generation_prompt": false})").add_generation_prompt);
  EXPECT_EQ(chat(messages + R"(, "max_tokens": 3, "max_completion_tokens": 9})").max_tokens, 9);
  chat_fails(R"(, "max_completion_tokens": 0)", "max_completion_tokens", "max_tokens must be at least 1");
  chat_fails(R"(, "chat_template_kwargs": [1])", "chat_template_kwargs", "expected an object");
  chat_fails(R"(, "chat_template_kwargs": {"chat_template": "x"})", "chat_template_kwargs",
             "--trust-request-chat-template");
  chat_fails(R"(, "chat_template": "{{ x }}")", "chat_template", "untrusted chat template");
  chat_fails(R"(, "tools": [])", "tools", "`tools` must not be an empty array.");
  chat_fails(R"(, "tool_choice": "auto")", "tool_choice", "When using `tool_choice`, `tools` must be set.");
  EXPECT_NO_THROW(chat(messages + R"(, "tool_choice": "none"})"));
  chat_fails(R"(, "response_format": {"type": "json_object"})", "response_format", "not supported");
  chat_fails(R"(, "response_format": {"type": "yaml"})", "response_format.type", "Invalid value");
  chat_fails(R"(, "echo": true)", "echo", "not supported");

  EXPECT_EQ(response_role(chat(messages + "}")), "assistant");
  const std::string prefill = R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Sure"}], "add_generation_prompt": false})";
  EXPECT_EQ(response_role(chat(prefill)), "assistant");
  const std::string system_last = R"({"messages": [{"role": "system", "content": "s"}],
      "add_generation_prompt": false})";
  EXPECT_EQ(response_role(chat(system_last)), "system");  // vLLM: the last message's role
}

TEST(ProtocolRequestTest, UnsupportedFeaturesAreRefusedNotIgnored) {
  for (const char* field : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                            "structured_outputs", "prompt_logprobs", "allowed_token_ids",
                            "logits_processors", "truncate_prompt_tokens", "prompt_embeds"}) {
    completion_fails(std::string(", \"") + field + "\": 1", field, "not supported");
  }
  completion_fails(R"(, "use_beam_search": true)", "use_beam_search", "not supported");
  completion_fails(R"(, "min_tokens": 3)", "min_tokens", "not supported");
  completion_fails(R"(, "min_tokens": -1)", "min_tokens", "greater than or equal to 0");
  completion_fails(R"(, "bad_words": ["x"])", "bad_words", "not supported");
  completion_fails(R"(, "suffix": "x")", "suffix", "suffix is not currently supported");
  // Empty or neutral values of those fields are fine.
  EXPECT_NO_THROW(completion(R"({"prompt": "Hi", "logit_bias": {}, "use_beam_search": false,
      "min_tokens": 0, "bad_words": [], "response_format": {"type": "text"}, "best_of": 3})"));
}

TEST(ProtocolRequestTest, MalformedBodies) {
  const ApiError syntax = error_of([] { completion(R"({"prompt": "Hi",})"); });
  EXPECT_EQ(syntax.status(), 400);
  EXPECT_NE(std::string(syntax.what()).find("not valid JSON (at byte"), std::string::npos) << syntax.what();
  EXPECT_EQ(syntax.param(), "");
  const ApiError utf8 = error_of([] { completion("{\"prompt\": \"caf\xe9\"}"); });
  EXPECT_NE(std::string(utf8.what()).find("not valid UTF-8"), std::string::npos) << utf8.what();
  // The error body must itself be valid JSON even though the input was not UTF-8.
  EXPECT_TRUE(Json::accept(error_body(utf8)));
  expect_refusal([] { completion("[1, 2]"); }, "", "must be a JSON object, but got an array");
  expect_refusal([] { completion(R"({"prompt": "\ud800"})"); }, "", "surrogate");
  expect_refusal([] { chat(""); }, "", "not valid JSON");
  expect_refusal([] { completion(R"({"prompt": "Hi", "model": 3})"); }, "model", "expected a string");
}

TEST(ProtocolRequestTest, GenerationConfigDefaults) {
  const SamplingDefaults d = parse_sampling_defaults(
      R"({"temperature": 0.6, "top_p": 0.9, "top_k": 50, "min_p": null, "repetition_penalty": 1.05,
          "max_new_tokens": 100, "do_sample": true, "eos_token_id": [1, 2]})",
      "generation_config.json");
  EXPECT_EQ(d.temperature, 0.6);
  EXPECT_EQ(d.top_p, 0.9);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_FALSE(d.min_p);
  EXPECT_EQ(d.repetition_penalty, 1.05);
  EXPECT_EQ(d.max_tokens, 100);
  EXPECT_THROW(parse_sampling_defaults(R"({"top_k": "x"})", "g.json"), InvalidArgument);
  EXPECT_THROW(parse_sampling_defaults("{", "g.json"), InvalidArgument);

  ProtocolLimits limits = kLimits;
  limits.defaults = d;
  const ApiRequest defaulted = completion(R"({"prompt": "Hi"})", limits);
  EXPECT_EQ(defaulted.temperature, 0.6);
  EXPECT_EQ(defaulted.top_p, 0.9);
  EXPECT_EQ(defaulted.top_k, 50);
  EXPECT_EQ(defaulted.min_p, 0.0);
  EXPECT_EQ(defaulted.repetition_penalty, 1.05);
  const ApiRequest own = completion(R"({"prompt": "Hi", "temperature": 0, "top_k": 0})", limits);
  EXPECT_EQ(own.temperature, 0.0);  // the request wins over the model's default
  EXPECT_EQ(own.top_k, 0);

  // The reference model's generation_config.json has no sampling fields.
  const SamplingDefaults ref =
      sampling_defaults_from_dir(std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m");
  EXPECT_FALSE(ref.temperature || ref.top_p || ref.top_k || ref.min_p || ref.repetition_penalty);
  EXPECT_FALSE(sampling_defaults_from_dir("/nonexistent-dir").temperature);
}

TEST(ProtocolRequestTest, ContextLengthCheck) {
  ProtocolLimits limits{.max_model_len = 100};
  const ApiRequest c = completion(R"({"prompt": "Hi", "max_tokens": 30})", limits);
  EXPECT_NO_THROW(check_length(c, 70, limits));
  EXPECT_EQ(effective_max_tokens(c, 70, limits), 30);
  const ApiError e = error_of([&] { check_length(c, 71, limits); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "max_tokens");
  EXPECT_EQ(std::string(e.what()),
            "This model's maximum context length is 100 tokens. However, you requested 101 tokens "
            "(71 in the messages, 30 in the completion). Please reduce the length of the messages "
            "or completion.");

  const ApiRequest h = chat(R"({"messages": [{"role": "user", "content": "Hi"}]})", limits);
  EXPECT_EQ(effective_max_tokens(h, 60, limits), 40);  // chat default: what the context leaves
  const ApiError full = error_of([&] { check_length(h, 100, limits); });
  EXPECT_EQ(full.param(), "messages");
  EXPECT_EQ(std::string(full.what()),
            "This model's maximum context length is 100 tokens. However, you requested 100 tokens "
            "in the messages, Please reduce the length of the messages.");

  limits.defaults.max_tokens = 25;  // generation_config's max_new_tokens caps every request
  EXPECT_EQ(effective_max_tokens(c, 10, limits), 25);
  EXPECT_EQ(effective_max_tokens(h, 10, limits), 25);
  const ApiRequest echo = completion(R"({"prompt": "Hi", "max_tokens": 0, "echo": true})", limits);
  EXPECT_EQ(effective_max_tokens(echo, 99, limits), 0);
  EXPECT_THROW(check_length(echo, 100, limits), ApiError);
  EXPECT_THROW(check_length(c, 1, ProtocolLimits{}), Internal);  // max_model_len unset: a bug
}

TEST(ProtocolRequestTest, ToSamplingParams) {
  const ApiRequest r = completion(R"({"prompt": "Hi", "temperature": 0.5, "top_p": 0.8, "top_k": 7,
      "min_p": 0.1, "repetition_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": -0.4,
      "seed": 100, "n": 3})");
  const runtime::SamplingParams p = to_sampling_params(r, 2, 999);
  EXPECT_EQ(p.temperature, 0.5f);
  EXPECT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_EQ(p.min_p, 0.1f);
  EXPECT_EQ(p.repetition_penalty, 1.2f);
  EXPECT_EQ(p.presence_penalty, 0.3f);
  EXPECT_EQ(p.frequency_penalty, -0.4f);
  EXPECT_EQ(p.seed, 102u);  // seed + choice index
  EXPECT_NO_THROW(p.validate());
  const ApiRequest unseeded = completion(R"({"prompt": "Hi"})");
  EXPECT_EQ(to_sampling_params(unseeded, 0, 999).seed, 999u);
  EXPECT_TRUE(to_sampling_params(completion(R"({"prompt": "Hi", "temperature": 0})"), 0, 1).greedy());
}

}  // namespace
}  // namespace lowbit::serve
