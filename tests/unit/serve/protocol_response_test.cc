// Response JSON of the protocol layer against the official openai package: every field openai's
// own types serialize for the same values (tests/unit/serve/data/openai_protocol_golden.json, from
// scripts/fixtures/make_openai_protocol_goldens.py) must be in lowbit's JSON with the same value.
// Extra fields on lowbit's side are allowed (vLLM's stop_reason, nulls openai leaves unset).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "serve/protocol.h"

namespace lowbit::serve {
namespace {

using Json = nlohmann::ordered_json;

const Json& golden() {
  static const Json data = [] {
    std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/serve/data/openai_protocol_golden.json");
    std::stringstream text;
    text << in.rdbuf();
    return Json::parse(text.str());
  }();
  return data;
}

// Every member of `expected` is in `actual` with an equal value (recursively; arrays element by
// element and of the same length; numbers compared as doubles).
void expect_contains(const Json& actual, const Json& expected, const std::string& path) {
  if (expected.is_object()) {
    ASSERT_TRUE(actual.is_object()) << path << ": expected an object, got " << actual.dump();
    for (const auto& [key, value] : expected.items()) {
      ASSERT_TRUE(actual.contains(key)) << path << ": missing '" << key << "' in " << actual.dump();
      expect_contains(actual[key], value, path + "." + key);
    }
  } else if (expected.is_array()) {
    ASSERT_TRUE(actual.is_array()) << path << ": expected an array, got " << actual.dump();
    ASSERT_EQ(actual.size(), expected.size()) << path;
    for (size_t i = 0; i < expected.size(); ++i) {
      expect_contains(actual[i], expected[i], path + "[" + std::to_string(i) + "]");
    }
  } else if (expected.is_number()) {
    ASSERT_TRUE(actual.is_number()) << path << ": got " << actual.dump();
    EXPECT_EQ(actual.get<double>(), expected.get<double>()) << path;
  } else {
    EXPECT_EQ(actual, expected) << path;
  }
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

float read_logprob(const Json& value) {
  if (value.is_string()) return -std::numeric_limits<float>::infinity();  // "-inf"
  return value.get<float>();
}

std::vector<LogprobEntry> read_entries(const Json& entries) {
  std::vector<LogprobEntry> out;
  for (const Json& e : entries) {
    LogprobEntry entry;
    entry.id = e["id"].get<int32_t>();
    entry.token = unhex(e["token_hex"].get<std::string>());
    entry.logprob = read_logprob(e["logprob"]);
    for (const Json& t : e["top"]) {
      entry.top.push_back(TopLogprob{t["id"].get<int32_t>(), unhex(t["token_hex"].get<std::string>()),
                                     read_logprob(t["logprob"])});
    }
    out.push_back(std::move(entry));
  }
  return out;
}

StopReason read_stop_reason(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number()) return value.get<int64_t>();
  return std::monostate{};
}

ResponseMeta read_meta(const Json& meta) {
  return ResponseMeta{meta["id"].get<std::string>(), meta["created"].get<int64_t>(),
                      meta["model"].get<std::string>()};
}

Usage read_usage(const Json& usage) { return Usage{usage[0].get<int64_t>(), usage[1].get<int64_t>(), std::nullopt}; }

ChunkUsage read_usage_field(const Json& field) {
  return ChunkUsage{field == "null", std::nullopt};
}

CompletionChoice read_completion_choice(const Json& c) {
  CompletionChoice choice;
  choice.index = c["index"].get<int32_t>();
  choice.text = c["text"].get<std::string>();
  if (!c["logprobs"].is_null()) choice.logprobs = read_entries(c["logprobs"]);
  if (!c["finish_reason"].is_null()) choice.finish_reason = c["finish_reason"].get<std::string>();
  choice.stop_reason = read_stop_reason(c["stop_reason"]);
  return choice;
}

// Builds the golden's input with lowbit's builder named in the case.
Json build(const Json& c) {
  const Json& in = c["input"];
  const std::string builder = c["builder"];
  const LogprobOptions options{in.value("top", 0), TokenTextStyle::REPLACEMENT_CHARACTER};
  if (builder == "completion_response") {
    std::vector<CompletionChoice> choices;
    for (const Json& choice : in["choices"]) choices.push_back(read_completion_choice(choice));
    return completion_response(read_meta(in["meta"]), choices, read_usage(in["usage"]), options);
  }
  if (builder == "completion_chunk") {
    return completion_chunk(read_meta(in["meta"]), read_completion_choice(in["choice"]), options,
                            in["initial_text_offset"].get<int64_t>(), read_usage_field(in["usage_field"]));
  }
  if (builder == "chat_response") {
    std::vector<ChatChoice> choices;
    for (const Json& c2 : in["choices"]) {
      ChatChoice choice;
      choice.index = c2["index"].get<int32_t>();
      choice.content = c2["content"].get<std::string>();
      if (!c2["logprobs"].is_null()) choice.logprobs = read_entries(c2["logprobs"]);
      choice.finish_reason = c2["finish_reason"].get<std::string>();
      choice.stop_reason = read_stop_reason(c2["stop_reason"]);
      choices.push_back(std::move(choice));
    }
    return chat_response(read_meta(in["meta"]), choices, read_usage(in["usage"]), options);
  }
  if (builder == "chat_role_chunk") {
    return chat_role_chunk(read_meta(in["meta"]), in["index"].get<int32_t>(), "assistant",
                           read_usage_field(in["usage_field"]));
  }
  if (builder == "chat_content_chunk") {
    std::vector<LogprobEntry> entries;
    if (!in["logprobs"].is_null()) entries = read_entries(in["logprobs"]);
    std::optional<std::string> finish;
    if (!in["finish_reason"].is_null()) finish = in["finish_reason"].get<std::string>();
    return chat_content_chunk(read_meta(in["meta"]), in["index"].get<int32_t>(),
                              in["content"].get<std::string>(),
                              in["logprobs"].is_null() ? nullptr : &entries, finish,
                              read_stop_reason(in["stop_reason"]), options,
                              read_usage_field(in["usage_field"]));
  }
  if (builder == "usage_chunk") {
    const Endpoint endpoint = in["endpoint"] == "chat" ? Endpoint::CHAT : Endpoint::COMPLETIONS;
    return usage_chunk(read_meta(in["meta"]), endpoint, read_usage(in["usage"]));
  }
  if (builder == "models_list") {
    std::vector<ModelCard> cards;
    for (const Json& m : in["models"]) {
      cards.push_back(ModelCard{m["id"].get<std::string>(), m["root"].get<std::string>(),
                                m["created"].get<int64_t>(), m["max_model_len"].get<int64_t>()});
    }
    return models_list(cards);
  }
  if (builder == "error") {
    return error_json(ApiError::model_not_found(in["model"].get<std::string>()));
  }
  throw std::runtime_error("unknown builder " + builder);
}

TEST(ProtocolResponseTest, EveryOpenaiFieldIsThereWithTheSameValue) {
  ASSERT_GE(golden()["responses"].size(), 12u);
  for (const Json& c : golden()["responses"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Json ours = build(c);
    expect_contains(ours, c["expected"], c["name"].get<std::string>());
    // Every body must also survive the trip through text (no invalid UTF-8, no NaN).
    EXPECT_EQ(Json::parse(json_body(ours)), ours);
  }
}

// The usage chunk is vLLM's exclude_none dump: no prompt_tokens_details; non-streaming usage
// carries it as null.
TEST(ProtocolResponseTest, UsageShapes) {
  const Json chunk = usage_chunk({"id", 1, "m"}, Endpoint::CHAT, Usage{3, 4, std::nullopt});
  EXPECT_FALSE(chunk["usage"].contains("prompt_tokens_details"));
  EXPECT_EQ(chunk["usage"]["total_tokens"], 7);
  EXPECT_TRUE(usage_json(Usage{3, 4, std::nullopt})["prompt_tokens_details"].is_null());
  // With prefix caching on, the cached prompt tokens (OpenAI's and vLLM's field).
  EXPECT_EQ(usage_json(Usage{3, 4, 2})["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(usage_json(Usage{3, 4, 0})["prompt_tokens_details"]["cached_tokens"], 0);
  ApiRequest request;
  EXPECT_FALSE(chunk_usage(request).present);
  request.include_usage = true;
  EXPECT_TRUE(chunk_usage(request).present);
  EXPECT_FALSE(chunk_usage(request, Usage{1, 2, std::nullopt}).value);  // only continuous_usage_stats adds totals
  request.continuous_usage_stats = true;
  const Json running = chat_role_chunk({"id", 1, "m"}, 0, "assistant", chunk_usage(request, Usage{1, 2, std::nullopt}));
  EXPECT_EQ(running["usage"]["total_tokens"], 3);
  const Json absent = chat_role_chunk({"id", 1, "m"}, 0, "assistant", ChunkUsage{});
  EXPECT_FALSE(absent.contains("usage"));
}

// vLLM sets stop_reason on a chat chunk only when it finishes the choice; completion chunks
// always carry it.
TEST(ProtocolResponseTest, StopReasonOnlyOnFinishingChatChunks) {
  const ResponseMeta meta{"chatcmpl-1", 1, "m"};
  const Json middle = chat_content_chunk(meta, 0, "a", nullptr, std::nullopt, std::monostate{}, {}, {});
  EXPECT_FALSE(middle["choices"][0].contains("stop_reason"));
  const Json last = chat_content_chunk(meta, 0, "", nullptr, "stop", int64_t{2}, {}, {});
  EXPECT_EQ(last["choices"][0]["stop_reason"], 2);
  CompletionChoice choice{0, "a", std::nullopt, std::nullopt, std::monostate{}};
  const Json text = completion_chunk(meta, choice, {}, 0, {});
  EXPECT_TRUE(text["choices"][0]["stop_reason"].is_null());
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(text.contains("usage"));
}

// vLLM: an echoed prompt's first token has no logprob: null in token_logprobs and top_logprobs
// (openai's Logprobs type cannot express it, so it is checked here).
TEST(ProtocolResponseTest, EchoedFirstTokenHasNullLogprob) {
  LogprobEntry first{1, "<s>", std::nullopt, {}};
  LogprobEntry second{7, "Hi", -0.5f, {TopLogprob{7, "Hi", -0.5f}}};
  const std::vector<LogprobEntry> entries = {first, second};
  const Json out = completion_logprobs_json(entries, LogprobOptions{1});
  EXPECT_EQ(out["tokens"], Json({"<s>", "Hi"}));
  EXPECT_TRUE(out["token_logprobs"][0].is_null());
  EXPECT_TRUE(out["top_logprobs"][0].is_null());
  EXPECT_EQ(out["text_offset"], Json({0, 3}));
  // logprobs=0 still lists the chosen token (OpenAI's "logprobs + 1" rule as vLLM applies it).
  const Json zero = completion_logprobs_json(std::span(entries).subspan(1), LogprobOptions{0});
  EXPECT_EQ(zero["top_logprobs"][0], Json({{"Hi", -0.5}}));
  const Json chat = chat_logprobs_json(std::span(entries).subspan(1), LogprobOptions{0});
  EXPECT_EQ(chat["content"][0]["top_logprobs"], Json::array());
}

TEST(ProtocolResponseTest, TokenTextMatchesPythonsLossyDecode) {
  ASSERT_GE(golden()["token_text"].size(), 10u);
  for (const Json& c : golden()["token_text"]) {
    const std::string raw = unhex(c["hex"].get<std::string>());
    const std::string shown = logprob_token_text(raw, TokenTextStyle::REPLACEMENT_CHARACTER);
    EXPECT_EQ(shown, c["shown"].get<std::string>()) << c["hex"];
    // text_offset advances by the characters Python's len() counts.
    LogprobEntry a{0, raw, -1.0f, {}}, b{1, "x", -1.0f, {}};
    const std::vector<LogprobEntry> entries = {a, b};
    EXPECT_EQ(completion_logprobs_json(entries, {})["text_offset"][1], c["characters"]) << c["hex"];
  }
}

// OpenAI's own form for partial characters, e.g. "bytes:\xe9\x80" in its completion logprobs.
TEST(ProtocolResponseTest, BytesEscapeStyle) {
  EXPECT_EQ(logprob_token_text("\xe9\x80", TokenTextStyle::BYTES_ESCAPE), "bytes:\\xe9\\x80");
  EXPECT_EQ(logprob_token_text("ok", TokenTextStyle::BYTES_ESCAPE), "ok");
  LogprobEntry e{3, "\xe4\xbd", -1.0f, {}};
  const Json chat = chat_logprobs_json(std::vector<LogprobEntry>{e}, {1, TokenTextStyle::BYTES_ESCAPE});
  EXPECT_EQ(chat["content"][0]["token"], "bytes:\\xe4\\xbd");
  EXPECT_EQ(chat["content"][0]["bytes"], Json({228, 189}));  // the real bytes, as OpenAI lists them
}

TEST(ProtocolResponseTest, ServerSentEvents) {
  const Json payload = {{"a", 1}, {"b", "é"}};
  EXPECT_EQ(sse_event(payload), "data: {\"a\":1,\"b\":\"é\"}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 (say, text cut inside a character) is replaced, never thrown.
  EXPECT_EQ(sse_event(Json{{"t", std::string("a\xe4")}}), "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
}

TEST(ProtocolResponseTest, ErrorBodies) {
  const ApiError bad(400, "temperature must be non-negative, got -1.0.", "temperature");
  EXPECT_EQ(error_body(bad), R"({"error":{"message":"temperature must be non-negative, got -1.0.",)"
                             R"("type":"BadRequestError","param":"temperature","code":400}})");
  const ApiError overloaded(503, "The server is overloaded.");
  EXPECT_EQ(error_json(overloaded)["error"]["type"], "ServiceUnavailableError");
  EXPECT_TRUE(error_json(overloaded)["error"]["param"].is_null());
  EXPECT_EQ(error_json(ApiError::unauthorized())["error"]["code"], 401);
  EXPECT_EQ(ApiError::unauthorized().type(), "AuthenticationError");
  EXPECT_EQ(ApiError(413, "too large").type(), "RequestEntityTooLargeError");
  EXPECT_EQ(ApiError(500, "boom").type(), "InternalServerError");
  EXPECT_EQ(ApiError(400, "x", "", "custom").type(), "custom");
  const ApiError not_found = ApiError::model_not_found("gpt-4");
  EXPECT_EQ(not_found.status(), 404);
  // An ApiError is an InvalidArgument: library code that catches lowbit errors still works.
  EXPECT_THROW(throw ApiError(400, "x"), InvalidArgument);
}

TEST(ProtocolResponseTest, ModelsBodyAndIds) {
  const Json body = Json::parse(models_list_body({"a", "b"}, 4096, 17));
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][1]["id"], "b");
  EXPECT_EQ(body["data"][1]["root"], "a");
  EXPECT_EQ(body["data"][0]["max_model_len"], 4096);
  const std::string id = make_response_id("cmpl");
  ASSERT_EQ(id.size(), 5u + 32u);
  EXPECT_EQ(id.substr(0, 5), "cmpl-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos);
  EXPECT_NE(make_response_id("cmpl"), id);
}

}  // namespace
}  // namespace lowbit::serve
