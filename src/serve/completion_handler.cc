#include "serve/completion_handler.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "runtime/chat_source.h"
#include "serve/metrics.h"
#include "serve/server.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* endpoint_path(Endpoint endpoint) {
  return endpoint == Endpoint::CHAT ? "/v1/chat/completions" : "/v1/completions";
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(error_body(error), "application/json");
}

// Everything one choice produced, gathered for a non-streaming answer.
struct ChoiceOutput {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::NONE;
  StopReason stop_reason;
  RequestSummary summary;
};

ChoiceOutput drain(RequestStream& stream) {
  ChoiceOutput out;
  StreamEvent event;
  while (stream.next(event)) {
    out.text += event.text;
    out.logprobs.insert(out.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    if (event.finish != FinishReason::NONE) {
      out.finish = event.finish;
      out.stop_reason = stop_reason_of(event);
    }
  }
  out.summary = stream.summary();
  return out;
}

}  // namespace

StopReason stop_reason_of(const StreamEvent& event) {
  if (event.stop_reason.empty()) return std::monostate{};
  if (event.stop_reason_is_token) return static_cast<int64_t>(std::stoll(event.stop_reason));
  return event.stop_reason;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::ABORT: return "abort";
    case FinishReason::NONE: break;
  }
  return "abort";
}

std::vector<LogprobEntry> logprob_entries(const Tokenizer* tokenizer,
                                          const std::vector<TokenLogprob>& logprobs) {
  auto text = [&](int32_t id) {
    if (tokenizer == nullptr) return "token_id:" + std::to_string(id);
    return tokenizer->decode_raw({id}, /*skip_special_tokens=*/false);
  };
  std::vector<LogprobEntry> entries;
  entries.reserve(logprobs.size());
  for (const auto& lp : logprobs) {
    LogprobEntry entry;
    entry.id = lp.id;
    entry.token = text(lp.id);
    entry.logprob = lp.logprob;
    for (const auto& [id, value] : lp.top) entry.top.push_back(TopLogprob{id, text(id), value});
    entries.push_back(std::move(entry));
  }
  return entries;
}

CompletionHandler::CompletionHandler(const models::Model& model, const Tokenizer* tokenizer,
                                     Engine& engine, ServerMetrics& metrics,
                                     const ServerOptions& options)
    : tokenizer_(tokenizer), engine_(engine), metrics_(metrics), options_(options) {
  limits_.max_model_len = engine.max_model_len();
  limits_.defaults = sampling_defaults_from_dir(options.model_dir);
  chat_template_ = runtime::model_chat_template(options.model_dir);
  template_variables_ = nlohmann::ordered_json(runtime::model_special_tokens(options.model_dir));
  (void)model;
}

uint64_t CompletionHandler::draw_seed() {
  std::lock_guard<std::mutex> lock(seed_mutex_);
  return seed_source_();
}

std::vector<int32_t> CompletionHandler::chat_prompt(const ApiRequest& api) const {
  if (!chat_template_ || tokenizer_ == nullptr) {
    throw ApiError(400, "this model has no chat template (or no tokenizer): use /v1/completions",
                   "messages");
  }
  nlohmann::ordered_json variables = template_variables_;
  for (const auto& [key, value] : api.chat_template_kwargs.items()) variables[key] = value;
  std::string text;
  try {
    if (api.continue_final_message) {
      // transformers: render without a generation prompt, then cut after the final message's
      // content so the model continues it.
      const std::string last = api.messages.back().value("content", std::string());
      text = chat_template_->render(api.messages, false, variables);
      const size_t at = last.empty() ? std::string::npos : text.rfind(last);
      if (at != std::string::npos) text.resize(at + last.size());
    } else {
      text = chat_template_->render(api.messages, api.add_generation_prompt, variables);
    }
  } catch (const InvalidArgument& e) {
    throw ApiError(400, std::string("the chat template failed on these messages: ") + e.what(),
                   "messages");
  }
  return tokenizer_->encode(text, api.add_special_tokens);
}

std::shared_ptr<SubmittedRequest> CompletionHandler::submit(const std::string& body,
                                                            Endpoint endpoint) {
  auto request = std::make_shared<SubmittedRequest>();
  request->arrived = std::chrono::steady_clock::now();
  ApiRequest& api = request->api;
  api = endpoint == Endpoint::CHAT ? parse_chat_request(body, limits_)
                                   : parse_completion_request(body, limits_);
  const auto& names = options_.served_model_names;
  if (api.model && std::find(names.begin(), names.end(), *api.model) == names.end()) {
    throw ApiError::model_not_found(*api.model);
  }
  request->meta.id = make_response_id(endpoint == Endpoint::CHAT ? "chatcmpl" : "cmpl");
  request->meta.created = unix_seconds();
  request->meta.model = api.model.value_or(names.front());
  request->logprob_options.top = api.logprobs.value_or(0);

  // Prompts → ids, each checked against the context length before anything is submitted.
  struct Prepared {
    std::vector<int32_t> ids;
    std::string text;
    int64_t max_tokens;
  };
  std::vector<Prepared> prepared;
  if (endpoint == Endpoint::CHAT) {
    std::vector<int32_t> ids = chat_prompt(api);
    const int64_t max_tokens = effective_max_tokens(api, ids.size(), limits_);
    prepared.push_back({std::move(ids), {}, max_tokens});
  } else {
    for (const Prompt& prompt : api.prompts) {
      Prepared p;
      if (prompt.text) {
        if (tokenizer_ == nullptr) {
          throw ApiError(400, "this model has no tokenizer: send the prompt as token ids", "prompt");
        }
        p.ids = tokenizer_->encode(*prompt.text, api.add_special_tokens);
        p.text = *prompt.text;
      } else {
        p.ids = prompt.ids;
        if (tokenizer_ != nullptr && api.echo) p.text = tokenizer_->decode(p.ids, false);
      }
      if (p.ids.empty()) throw ApiError(400, "the prompt is empty", "prompt");
      p.max_tokens = effective_max_tokens(api, p.ids.size(), limits_);
      prepared.push_back(std::move(p));
    }
  }

  try {
    int32_t index = 0;
    for (const Prepared& p : prepared) {
      for (int32_t i = 0; i < api.n; ++i) {
        GenerateParams params;
        params.prompt_ids = p.ids;
        // echo with max_tokens 0 (vLLM: the prompt alone): one token is generated and dropped.
        params.max_tokens = std::max<int64_t>(p.max_tokens, 1);
        params.sampling = to_sampling_params(api, i, draw_seed());
        params.stop = api.stop;
        params.stop_token_ids = api.stop_token_ids;
        params.ignore_eos = api.ignore_eos;
        params.include_stop_str_in_output = api.include_stop_str_in_output;
        params.skip_special_tokens = api.skip_special_tokens;
        params.logprobs = api.logprobs ? *api.logprobs : -1;
        params.prompt_logprobs = api.echo && api.logprobs.has_value();
        ChoiceStream choice;
        choice.index = index++;
        choice.prompt_ids = p.ids;
        choice.prompt_text = p.text;
        choice.stream = engine_.submit(std::move(params));
        request->choices.push_back(std::move(choice));
      }
    }
  } catch (...) {
    for (auto& c : request->choices) c.stream->cancel();
    throw;
  }
  return request;
}

void CompletionHandler::handle(const httplib::Request& req, httplib::Response& res,
                               Endpoint endpoint) {
  const char* path = endpoint_path(endpoint);
  try {
    std::shared_ptr<SubmittedRequest> request = submit(req.body, endpoint);
    if (request->api.stream) {
      respond_stream(std::move(request), res);
    } else {
      respond_whole(*request, res);
    }
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Overloaded& e) {
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(503, e.what(), "", "ServiceUnavailableError"));
  } catch (const InvalidArgument& e) {
    // The engine's own checks (ids outside the vocabulary, a prompt the cache can never hold).
    send_error(res, ApiError(400, e.what(), endpoint == Endpoint::CHAT ? "messages" : "prompt"));
  }
  metrics_.record_request(path, res.status);
}

void CompletionHandler::respond_whole(SubmittedRequest& request, httplib::Response& res) {
  const ApiRequest& api = request.api;
  Usage usage;
  std::vector<CompletionChoice> completions;
  std::vector<ChatChoice> chats;
  for (size_t c = 0; c < request.choices.size(); ++c) {
    ChoiceStream& choice = request.choices[c];
    ChoiceOutput out = drain(*choice.stream);
    const RequestSummary& s = out.summary;
    // Prompt tokens count once per prompt, not once per choice (OpenAI's usage with n > 1).
    if (static_cast<int32_t>(c) % api.n == 0) {
      usage.prompt_tokens += s.prompt_tokens;
      if (s.cached_tokens) usage.cached_tokens = usage.cached_tokens.value_or(0) + *s.cached_tokens;
    }
    const bool echo_only = api.echo && api.max_tokens.value_or(1) == 0;
    usage.completion_tokens += echo_only ? 0 : s.output_tokens;
    record_choice_metrics(metrics_, s, finish_reason_name(out.finish),
                          static_cast<int32_t>(c) % api.n == 0);
    std::optional<std::vector<LogprobEntry>> entries;
    if (api.logprobs) entries = logprob_entries(tokenizer_, out.logprobs);
    if (api.endpoint == Endpoint::CHAT) {
      ChatChoice chat;
      chat.index = choice.index;
      chat.content = out.text;
      chat.logprobs = std::move(entries);
      chat.finish_reason = finish_reason_name(out.finish);
      chat.stop_reason = out.stop_reason;
      chats.push_back(std::move(chat));
      continue;
    }
    CompletionChoice completion;
    completion.index = choice.index;
    completion.finish_reason = finish_reason_name(out.finish);
    completion.stop_reason = out.stop_reason;
    if (echo_only) {
      completion.text = choice.prompt_text;
      completion.finish_reason = "length";
      if (entries) entries->clear();
    } else {
      completion.text = api.echo ? choice.prompt_text + out.text : out.text;
    }
    if (entries && api.echo) {
      // Prompt entries first: the first prompt token has no logprob (nothing predicts it).
      std::vector<TokenLogprob> prompt;
      std::vector<std::optional<float>> values;
      for (size_t i = 0; i < choice.prompt_ids.size(); ++i) {
        const auto& lp = i < s.prompt_logprobs.size() ? s.prompt_logprobs[i] : std::nullopt;
        TokenLogprob t = lp.value_or(TokenLogprob{choice.prompt_ids[i], 0.0f, {}});
        prompt.push_back(t);
        values.push_back(lp ? std::optional<float>(lp->logprob) : std::nullopt);
      }
      std::vector<LogprobEntry> all = logprob_entries(tokenizer_, prompt);
      for (size_t i = 0; i < all.size(); ++i) all[i].logprob = values[i];
      all.insert(all.end(), entries->begin(), entries->end());
      entries = std::move(all);
    }
    completion.logprobs = std::move(entries);
    completions.push_back(std::move(completion));
  }
  const nlohmann::ordered_json body =
      api.endpoint == Endpoint::CHAT
          ? chat_response(request.meta, chats, usage, request.logprob_options)
          : completion_response(request.meta, completions, usage, request.logprob_options);
  res.status = 200;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

}  // namespace lowbit::serve
