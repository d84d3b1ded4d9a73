// lowbit bench serve: vLLM's serving benchmark (`vllm bench serve`) against any OpenAI-compatible
// server: `lowbit serve`, vLLM, llama.cpp's server, SGLang... Streams every request and reports
// TTFT, TPOT, ITL and end-to-end latency with vLLM's table and JSON keys.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "command.h"
#include "lowbit/error.h"
#include "serve/bench_client.h"
#include "serve/bench_dataset.h"
#include "serve/bench_report.h"
#include "serve/bench_stats.h"

namespace lowbit::cli {
namespace {

struct BenchServeOptions {
  serve::BenchClientConfig client;
  std::string dataset = "random";
  int64_t num_prompts = 1000;
  std::string request_rate = "inf";
  int64_t input_len = 1024;
  int64_t output_len = 0;  // 0: not given (random: 128; files: each line's output_len, else 128)
  int64_t random_vocab = 1000;
  int64_t random_prefix_len = 0;
  bool ignore_eos = false;
  bool no_ignore_eos = false;
  std::string json_path;
  bool save_detailed = false;
  std::string percentiles = "99";
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
};

constexpr int64_t kDefaultOutputLen = 128;  // vLLM's --random-output-len default

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> values;
  for (const auto& part : split_commas(text)) {
    char* end = nullptr;
    const double q = std::strtod(part.c_str(), &end);
    LOWBIT_CHECK(end != part.c_str() && *end == '\0' && q >= 0 && q <= 100,
                 "bench serve: --percentiles takes numbers in [0, 100] separated by commas, got '" +
                     text + "'");
    values.push_back(q);
  }
  LOWBIT_CHECK(!values.empty(), "bench serve: --percentiles is empty");
  return values;
}

std::vector<std::string> parse_metric_names(const std::string& text) {
  std::vector<std::string> names = split_commas(text);
  for (const auto& name : names) {
    LOWBIT_CHECK(
        name == "ttft" || name == "tpot" || name == "itl" || name == "e2el",
        "bench serve: --percentile-metrics takes ttft, tpot, itl and e2el, got '" + name + "'");
  }
  return names;
}

double parse_rate(const std::string& text) {
  if (text == "inf") return INFINITY;
  char* end = nullptr;
  const double rate = std::strtod(text.c_str(), &end);
  LOWBIT_CHECK(end != text.c_str() && *end == '\0' && rate > 0 && std::isfinite(rate),
               "bench serve: --request-rate must be a positive number or inf, got '" + text + "'");
  return rate;
}

std::string now_date() {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &local);
  return buf;
}

int run_bench_serve(BenchServeOptions options) {
  serve::BenchClientConfig& client = options.client;
  const std::vector<double> percentiles = parse_percentiles(options.percentiles);
  const std::vector<std::string> metric_names = parse_metric_names(options.percentile_metrics);
  client.request_rate = parse_rate(options.request_rate);
  LOWBIT_CHECK(options.output_len >= 0, "bench serve: --output-len must be positive");
  if (client.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) client.api_key = key;
  }
  if (client.model.empty()) {
    client.model = serve::fetch_first_model(client.base_url, client.api_key, client.timeout_s);
    std::printf("Using model: %s\n", client.model.c_str());
  }

  std::vector<serve::BenchRequest> requests;
  const bool random = options.dataset == "random";
  if (random) {
    requests =
        serve::random_dataset(options.num_prompts, options.input_len,
                              options.output_len > 0 ? options.output_len : kDefaultOutputLen,
                              options.random_vocab, client.seed, options.random_prefix_len);
  } else {
    requests = serve::load_dataset_file(
        options.dataset, options.num_prompts,
        options.output_len > 0 ? std::optional<int64_t>(options.output_len) : std::nullopt,
        kDefaultOutputLen);
  }
  // As vLLM: random prompts run to their full output length unless told otherwise.
  client.ignore_eos = (options.ignore_eos || random) && !options.no_ignore_eos;

  if (std::isinf(client.request_rate))
    std::printf("Traffic request rate: inf\n");
  else
    std::printf("Traffic request rate: %g\n", client.request_rate);
  std::printf("Burstiness factor: 1.0 (Poisson process)\n");
  if (client.concurrency > 0)
    std::printf("Maximum request concurrency: %d\n", client.concurrency);
  else
    std::printf("Maximum request concurrency: None\n");
  std::fflush(stdout);

  const serve::BenchRun run = serve::run_benchmark(client, requests);
  const serve::BenchMetrics metrics =
      serve::compute_metrics(run.results, run.duration_s, percentiles);
  serve::BenchReportOptions report;
  report.model_id = client.model;
  report.endpoint_type =
      client.endpoint.find("chat/") != std::string::npos ? "openai-chat" : "openai";
  report.num_prompts = options.num_prompts;
  report.request_rate = client.request_rate;
  report.concurrency = client.concurrency;
  report.percentile_metrics = metric_names;
  report.percentiles = percentiles;
  report.save_detailed = options.save_detailed;
  std::fputs(serve::format_summary(metrics, run, report).c_str(), stdout);
  std::fflush(stdout);

  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path);
    if (!out) throw IoError("bench serve: cannot write " + options.json_path);
    // Generated text may hold invalid UTF-8 (a token split mid-character); replace rather than
    // fail.
    out << serve::result_json(metrics, run, report, now_date())
               .dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
        << "\n";
    if (!out) throw IoError("bench serve: cannot write " + options.json_path);
  }
  const std::string* first_error = nullptr;
  for (const auto& r : run.results) {
    if (!r.success) {
      first_error = &r.error;
      break;
    }
  }
  if (metrics.completed == 0) {
    std::fprintf(stderr, "lowbit: error: all %zu requests failed; the first: %s\n",
                 run.results.size(), first_error->c_str());
    return 1;
  }
  if (first_error) {
    std::fprintf(stderr, "lowbit: warning: %lld of %zu requests failed; the first: %s\n",
                 static_cast<long long>(metrics.failed), run.results.size(), first_error->c_str());
  }
  return 0;
}

}  // namespace

void add_bench_serve_command(CLI::App& bench, CommandList& commands) {
  auto options = std::make_shared<BenchServeOptions>();
  serve::BenchClientConfig& client = options->client;
  CLI::App* sub = bench.add_subcommand(
      "serve",
      "Load-test an OpenAI-compatible server as vLLM's `vllm bench serve` does: TTFT, TPOT, ITL, "
      "end-to-end latency and throughput");
  sub->add_option("--base-url", client.base_url, "Server URL")->capture_default_str();
  sub->add_option("--endpoint", client.endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  sub->add_option("--model", client.model,
                  "Model name to send (default: the first id of GET /v1/models)");
  sub->add_option("--dataset", options->dataset,
                  "'random' (token-id prompts of --input-len) or a JSONL file of {\"prompt\", "
                  "\"output_len\"} "
                  "or ShareGPT {\"conversations\"} entries")
      ->capture_default_str();
  sub->add_option("--num-prompts", options->num_prompts, "Requests to send")->capture_default_str();
  sub->add_option("--concurrency,--max-concurrency", client.concurrency,
                  "Most requests in flight (0: no limit)")
      ->capture_default_str();
  sub->add_option("--request-rate", options->request_rate,
                  "Requests per second, Poisson arrivals (inf: all at once)")
      ->capture_default_str();
  sub->add_option("--input-len", options->input_len, "Random prompts: tokens per prompt")
      ->capture_default_str();
  sub->add_option("--output-len", options->output_len,
                  "max_tokens of every request (default: a file line's output_len, else 128)");
  sub->add_option("--random-prefix-len", options->random_prefix_len,
                  "Random prompts: a shared start of N ids before each prompt's --input-len own "
                  "ones (exercises a server's prefix cache)")
      ->capture_default_str();
  sub->add_option("--random-vocab", options->random_vocab,
                  "Random prompts: token ids are drawn from [10, N)")
      ->capture_default_str();
  sub->add_option("--api-key", client.api_key, "Bearer token (default: $OPENAI_API_KEY)");
  sub->add_flag(
      "--ignore-eos", options->ignore_eos,
      "Send vLLM's ignore_eos so every request generates --output-len tokens (default for random)");
  sub->add_flag("--no-ignore-eos", options->no_ignore_eos,
                "Do not send ignore_eos, even for random prompts");
  sub->add_option("--temperature", client.temperature, "Sampling temperature")
      ->capture_default_str();
  sub->add_option("--seed", client.seed, "Seed of the random prompts and arrival times")
      ->capture_default_str();
  sub->add_option("--json,--result-filename", options->json_path,
                  "Write the result as JSON (vLLM's --save-result keys) to this file");
  sub->add_flag("--save-detailed", options->save_detailed, "Add per-request arrays to the JSON");
  sub->add_option("--percentiles,--metric-percentiles", options->percentiles,
                  "Percentiles to report, e.g. 50,90,99")
      ->capture_default_str();
  sub->add_option("--percentile-metrics", options->percentile_metrics,
                  "Metrics to report: ttft,tpot,itl,e2el")
      ->capture_default_str();
  sub->add_option("--timeout", client.timeout_s, "Seconds to wait for the next bytes of a response")
      ->capture_default_str();
  commands.push_back({sub, [options] { return run_bench_serve(*options); }});
}

}  // namespace lowbit::cli
