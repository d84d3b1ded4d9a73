// Streaming answers: server-sent events written as the engine produces tokens. The writer runs on
// the request's HTTP thread after the handler returns (httplib's chunked content provider); a
// failed write means the client went away, which cancels every choice of the request so that the
// engine frees their KV blocks at its next step (and they are counted as aborted).
#include <httplib.h>

#include <chrono>

#include "serve/completion_handler.h"
#include "serve/metrics.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds without output after which an SSE comment line is written: it keeps proxies from timing
// out and is how a disconnected client is noticed while its request waits in the queue.
constexpr double kKeepAliveSeconds = 1.0;

int64_t utf8_characters(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// One streaming response: owns the per-choice progress and writes chunks into the sink.
class StreamWriter {
 public:
  StreamWriter(std::shared_ptr<SubmittedRequest> request, const Tokenizer* tokenizer,
               ServerMetrics& metrics)
      : request_(std::move(request)),
        tokenizer_(tokenizer),
        metrics_(metrics),
        progress_(request_->choices.size()) {}

  // Writes the whole stream; false when the client went away.
  bool run(httplib::DataSink& sink);
  // After a failed write: waits for the engine to end every unfinished choice, and counts them.
  void abort_unfinished();

 private:
  struct Progress {
    bool started = false;   // the role chunk (chat) or the echoed prompt (completions) went out
    bool finished = false;
    int64_t text_offset = 0;  // characters sent (completions' logprobs text_offset)
    std::optional<Clock::time_point> last_token;
  };

  bool write(const std::string& data);
  bool emit(const nlohmann::ordered_json& payload) { return write(sse_event(payload)); }
  bool start_choice(size_t c);
  // Reads what choice c produced since last time (waiting at most `wait` seconds) and writes it.
  // Sets *wrote when a chunk went out.
  bool pump_choice(size_t c, double wait, bool* wrote);
  void finish_choice(size_t c, const char* reason);

  std::shared_ptr<SubmittedRequest> request_;
  const Tokenizer* tokenizer_;
  ServerMetrics& metrics_;
  std::vector<Progress> progress_;
  httplib::DataSink* sink_ = nullptr;
  Usage usage_;
  size_t finished_ = 0;
};

bool StreamWriter::write(const std::string& data) {
  if (sink_->write(data.data(), data.size())) return true;
  for (auto& c : request_->choices) c.stream->cancel();
  return false;
}

bool StreamWriter::start_choice(size_t c) {
  Progress& p = progress_[c];
  const ApiRequest& api = request_->api;
  const ChoiceStream& choice = request_->choices[c];
  p.started = true;
  if (api.endpoint == Endpoint::CHAT) {
    return emit(chat_role_chunk(request_->meta, choice.index, "assistant", chunk_usage(api)));
  }
  if (!api.echo) return true;
  CompletionChoice echo;
  echo.index = choice.index;
  echo.text = choice.prompt_text;
  p.text_offset += utf8_characters(echo.text);
  return emit(completion_chunk(request_->meta, echo, request_->logprob_options, 0, chunk_usage(api)));
}

bool StreamWriter::pump_choice(size_t c, double wait, bool* wrote) {
  Progress& p = progress_[c];
  ChoiceStream& choice = request_->choices[c];
  const ApiRequest& api = request_->api;
  StreamEvent event;
  bool timed_out = false;
  const bool more = choice.stream->next_for(event, wait, &timed_out);
  if (timed_out) return true;
  if (!event.token_ids.empty()) {
    const Clock::time_point now = Clock::now();
    if (p.last_token) {
      metrics_.observe_itl(std::chrono::duration<double>(now - *p.last_token).count() /
                           static_cast<double>(event.token_ids.size()));
    }
    p.last_token = now;
  }
  const bool ends = !more || event.finish != FinishReason::NONE;
  std::optional<std::string> finish;
  if (ends) {
    finish = finish_reason_name(event.finish == FinishReason::NONE ? FinishReason::ABORT
                                                                   : event.finish);
  }
  std::optional<std::vector<LogprobEntry>> entries;
  if (api.logprobs) entries = logprob_entries(tokenizer_, event.logprobs);
  // Completions send a chunk for every step that produced tokens, even with no text yet (vLLM
  // does: clients count them as tokens); chat sends only content.
  const bool has_tokens = !event.token_ids.empty() && api.endpoint == Endpoint::COMPLETIONS;
  if (!event.text.empty() || ends || has_tokens || (entries && !entries->empty())) {
    nlohmann::ordered_json chunk;
    if (api.endpoint == Endpoint::CHAT) {
      chunk = chat_content_chunk(request_->meta, choice.index, event.text,
                                 entries ? &*entries : nullptr, finish, stop_reason_of(event),
                                 request_->logprob_options, chunk_usage(api));
    } else {
      CompletionChoice part;
      part.index = choice.index;
      part.text = event.text;
      part.logprobs = std::move(entries);
      part.finish_reason = finish;
      part.stop_reason = stop_reason_of(event);
      chunk = completion_chunk(request_->meta, part, request_->logprob_options, p.text_offset,
                               chunk_usage(api));
      p.text_offset += utf8_characters(event.text);
    }
    if (!emit(chunk)) return false;
    *wrote = true;
  }
  if (ends) finish_choice(c, finish->c_str());
  return true;
}

void StreamWriter::finish_choice(size_t c, const char* reason) {
  ChoiceStream& choice = request_->choices[c];
  // The summary is final once the stream has been read to its end.
  StreamEvent rest;
  while (choice.stream->next(rest)) {
  }
  progress_[c].finished = true;
  ++finished_;
  const RequestSummary s = choice.stream->summary();
  const bool first_of_prompt = choice.index % request_->api.n == 0;
  if (first_of_prompt) {
    usage_.prompt_tokens += s.prompt_tokens;
    if (s.cached_tokens) usage_.cached_tokens = usage_.cached_tokens.value_or(0) + *s.cached_tokens;
  }
  usage_.completion_tokens += s.output_tokens;
  record_choice_metrics(metrics_, s, reason, first_of_prompt);
}

bool StreamWriter::run(httplib::DataSink& sink) {
  sink_ = &sink;
  const ApiRequest& api = request_->api;
  const bool single = request_->choices.size() == 1;
  Clock::time_point last_write = Clock::now();
  while (finished_ < request_->choices.size()) {
    bool wrote = false;
    for (size_t c = 0; c < request_->choices.size(); ++c) {
      if (progress_[c].finished) continue;
      if (!progress_[c].started) {
        if (!start_choice(c)) return false;
        wrote = true;
      }
      // One choice: block on it; several: poll each briefly in turn.
      if (!pump_choice(c, single ? 0.25 : 0.01, &wrote)) return false;
    }
    const Clock::time_point now = Clock::now();
    if (wrote) {
      last_write = now;
    } else if (std::chrono::duration<double>(now - last_write).count() > kKeepAliveSeconds) {
      if (!write(": keep-alive\n\n")) return false;
      last_write = now;
    }
  }
  if (api.include_usage && !emit(usage_chunk(request_->meta, api.endpoint, usage_))) return false;
  if (!write(std::string(kSseDone))) return false;
  sink.done();
  return true;
}

void StreamWriter::abort_unfinished() {
  for (size_t c = 0; c < request_->choices.size(); ++c) {
    if (progress_[c].finished) continue;
    request_->choices[c].stream->cancel();
    finish_choice(c, "abort");
  }
}

}  // namespace

void record_choice_metrics(ServerMetrics& metrics, const RequestSummary& s, const char* reason,
                           bool count_prompt) {
  metrics.record_tokens(count_prompt ? s.prompt_tokens : 0, s.output_tokens);
  metrics.record_success(reason);
  if (s.output_tokens > 0) metrics.observe_ttft(s.first_token_seconds);
  metrics.observe_e2e(s.total_seconds);
  if (s.output_tokens > 1) {
    metrics.observe_tpot((s.total_seconds - s.first_token_seconds) /
                         static_cast<double>(s.output_tokens - 1));
  }
}

void CompletionHandler::respond_stream(std::shared_ptr<SubmittedRequest> request,
                                       httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto writer = std::make_shared<StreamWriter>(std::move(request), tokenizer_, metrics_);
  res.set_chunked_content_provider(
      "text/event-stream",
      [writer](size_t, httplib::DataSink& sink) { return writer->run(sink); },
      [writer](bool success) {
        if (!success) writer->abort_unfinished();
      });
}

}  // namespace lowbit::serve
