#include "eval/compare_plan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace lowbit::eval {
namespace fs = std::filesystem;

namespace {

// Paths compared across runs are absolute, so a rerun from another directory still matches.
std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), error);
  return error ? fs::absolute(path).lexically_normal().string() : p.string();
}

void add_threads(const CompareOptions& o, std::vector<std::string>& argv) {
  if (o.threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(o.threads)});
}

}  // namespace

std::string scheme_label(const std::string& scheme, const std::string& algo,
                         const std::string& kv_cache) {
  std::string label = scheme;
  std::transform(label.begin(), label.end(), label.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (!algo.empty() && algo != "rtn") label += "-" + algo;
  if (!kv_cache.empty() && kv_cache != "auto") label += "-kv" + kv_cache;
  return label;
}

nlohmann::json compare_protocol_json(const CompareOptions& o) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const std::string& t : o.tasks) tasks.push_back(absolute_path(t));
  return {{"format", "lowbit-compare-options/1"},
          {"model", absolute_path(o.model)},
          {"algo", o.algo},
          {"kv_cache", o.kv_cache},
          {"dataset", absolute_path(o.dataset)},
          {"num_samples", o.num_samples},
          {"seq_len", o.seq_len},
          {"ppl_text", absolute_path(o.ppl_text)},
          {"ctx", o.ctx},
          {"windows", o.windows},
          {"bos", o.bos},
          {"tasks", tasks},
          {"task_limit", o.task_limit},
          {"bench_prompt_tokens", o.bench_prompt_tokens},
          {"bench_decode_tokens", o.bench_decode_tokens},
          {"bench_repeats", o.bench_repeats},
          {"accuracy", o.accuracy},
          {"workload", o.workload}};
}

std::vector<std::string> quantize_argv(const std::string& lowbit, const CompareOptions& o,
                                       const std::string& scheme, const std::string& out_dir,
                                       bool resume) {
  std::vector<std::string> argv = {lowbit, "quantize", o.model, "-o", out_dir, "--scheme", scheme,
                                   "--algo", o.algo, "--json", "--no-progress"};
  if (!o.dataset.empty()) argv.insert(argv.end(), {"--dataset", o.dataset});
  if (o.num_samples > 0) argv.insert(argv.end(), {"--num-samples", std::to_string(o.num_samples)});
  if (o.seq_len > 0) argv.insert(argv.end(), {"--seq-len", std::to_string(o.seq_len)});
  if (o.kv_cache == "fp8") argv.insert(argv.end(), {"--kv-cache", "fp8"});
  if (resume) argv.push_back("--resume");
  add_threads(o, argv);
  return argv;
}

std::vector<std::string> eval_argv(const std::string& lowbit, const CompareOptions& o,
                                   const std::string& model_dir, bool against_baseline,
                                   const std::string& json_out) {
  std::vector<std::string> argv = {lowbit, "eval", model_dir, "--ppl", o.ppl_text,
                                   "--ctx", std::to_string(o.ctx)};
  if (against_baseline) argv.insert(argv.end(), {"--baseline", o.model});
  if (o.windows > 0) argv.insert(argv.end(), {"--windows", std::to_string(o.windows)});
  if (o.bos) argv.push_back("--bos");
  if (!o.tasks.empty()) {
    argv.push_back("--tasks");
    argv.insert(argv.end(), o.tasks.begin(), o.tasks.end());
  }
  if (o.task_limit > 0) argv.insert(argv.end(), {"--limit", std::to_string(o.task_limit)});
  // The quantized model runs with the cache its checkpoint calibrated (k_scale / v_scale).
  if (against_baseline && o.kv_cache == "fp8") argv.insert(argv.end(), {"--kv-cache-dtype", "fp8"});
  if (!json_out.empty()) argv.insert(argv.end(), {"--json", json_out});
  add_threads(o, argv);
  return argv;
}

std::vector<std::string> bench_argv(const std::string& lowbit, const CompareOptions& o,
                                    const std::string& model_dir) {
  std::vector<std::string> argv = {lowbit, "bench", model_dir, "--json",
                                   "--prompt-tokens", std::to_string(o.bench_prompt_tokens),
                                   "--decode-tokens", std::to_string(o.bench_decode_tokens),
                                   "--repeats", std::to_string(o.bench_repeats)};
  if (model_dir != o.model && o.kv_cache == "fp8") {
    argv.insert(argv.end(), {"--kv-cache-dtype", "fp8"});
  }
  add_threads(o, argv);
  return argv;
}

}  // namespace lowbit::eval
