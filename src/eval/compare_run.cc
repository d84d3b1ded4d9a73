// The orchestration of `lowbit compare` (compare_plan.h): child processes for quantize, eval and
// bench (each with its own peak memory; a crash in one loses only that step), the sizes and layer
// errors in this process, then the result and a recommendation.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/subprocess.h"
#include "eval/compare_assemble.h"
#include "eval/compare_plan.h"
#include "eval/layer_error.h"
#include "eval/recommend.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::eval {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw InvalidArgument(path.string() + ": not valid JSON (" + e.what() +
                          "); delete it to measure that step again");
  }
}

void write_text_file(const std::string& text, const fs::path& path) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp.string() + ": cannot write");
    out << text;
    if (!out) throw IoError(tmp.string() + ": write failed");
  }
  fs::rename(tmp, path);
}

void write_json_file(const json& value, const fs::path& path) {
  write_text_file(value.dump(2) + "\n", path);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "";
}

void check_options(const CompareOptions& o) {
  LOWBIT_CHECK(!o.schemes.empty(), "--schemes: give at least one scheme, e.g. FP8_DYNAMIC,W8A8,W4A16");
  for (const std::string& s : o.schemes) {
    try {
      quant::preset_scheme(s, {"Linear"});
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("--schemes: ") + e.what());
    }
  }
  LOWBIT_CHECK(o.algo == "rtn" || o.algo == "gptq" || o.algo == "awq",
               "--algo '" + o.algo + "': expected rtn, gptq or awq");
  LOWBIT_CHECK(o.kv_cache.empty() || o.kv_cache == "fp8", "--kv-cache '" + o.kv_cache + "': expected fp8");
  LOWBIT_CHECK(!o.ppl_text.empty(), "compare needs a text for perplexity and KLD: --ppl FILE");
  LOWBIT_CHECK(fs::is_regular_file(o.ppl_text), "--ppl " + o.ppl_text + ": no such file");
  for (const std::string& t : o.tasks) LOWBIT_CHECK(fs::is_regular_file(t), "--tasks " + t + ": no such file");
  LOWBIT_CHECK(o.dataset.empty() || fs::exists(o.dataset), "--dataset " + o.dataset + ": no such file");
  LOWBIT_CHECK(fs::is_regular_file(fs::path(o.model) / "config.json"),
               o.model + ": not a model directory (no config.json)");
  LOWBIT_CHECK(!o.output_dir.empty(), "-o DIR is required");
  LOWBIT_CHECK(o.ctx >= 16, "--ctx must be at least 16 tokens");
  parse_accuracy(o.accuracy, "--accuracy");
  parse_workload(o.workload, "--workload");
}

// Creates DIR, or checks that an existing one was made with the same protocol.
void prepare_output(const CompareOptions& o) {
  const fs::path dir = o.output_dir;
  const fs::path options_file = dir / "compare-options.json";
  const json protocol = compare_protocol_json(o);
  if (fs::exists(dir) && !fs::is_empty(dir)) {
    if (!fs::exists(options_file)) {
      throw InvalidArgument(o.output_dir + ": exists and is not a compare directory (no "
                            "compare-options.json); choose another -o");
    }
    const json before = read_json_file(options_file);
    if (before != protocol) {
      if (!o.overwrite) {
        std::string differing;
        for (auto it = protocol.begin(); it != protocol.end(); ++it) {
          if (!before.contains(it.key()) || before[it.key()] != it.value()) {
            differing += (differing.empty() ? "" : ", ") + it.key();
          }
        }
        throw InvalidArgument(options_file.string() + ": this directory was measured with other "
                              "options (" + differing + "); rerun with the same ones to resume, "
                              "or --overwrite to start again");
      }
      fs::remove_all(dir);
    }
  }
  fs::create_directories(dir / "steps");
  fs::create_directories(dir / "logs");
  write_json_file(protocol, options_file);
}

struct StepRunner {
  const CompareOptions& options;
  const std::function<void(const std::string&)>& log;
  int step = 0, total = 0;

  std::string counter() const {
    return "[" + std::to_string(step) + "/" + std::to_string(total) + "] ";
  }

  // Runs the child `argv()` unless `done` exists (a finished step of an earlier run); the child's
  // stdout goes to `log_file`. Returns whether it ran.
  bool run(const std::string& title, const std::function<std::vector<std::string>()>& argv,
           const fs::path& done, const fs::path& log_file) {
    ++step;
    if (fs::exists(done)) {
      log(counter() + title + ": kept from an earlier run (" + done.string() + ")");
      return false;
    }
    log(counter() + title + " ...");
    const std::vector<std::string> args = argv();
    const auto start = std::chrono::steady_clock::now();
    const ChildResult result = run_child(args, log_file.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (result.exit_code != 0) {
      std::string command;
      for (const std::string& a : args) command += (command.empty() ? "" : " ") + a;
      throw Error(title + " failed (exit " + std::to_string(result.exit_code) + "): " + command +
                  "\n  its output: " + log_file.string() +
                  "\n  finished steps are kept: rerun the same compare command to resume");
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.1f s)", seconds);
    log(counter() + title + " done" + buf);
    return true;
  }
};

// `lowbit bench --json` prints one JSON line on stdout: it becomes the step's file.
void bench_step(StepRunner& runner, const std::string& lowbit, const std::string& label,
                const std::string& model_dir, const fs::path& dir) {
  const fs::path done = dir / "steps" / (label + ".bench.json");
  const fs::path log_file = dir / "logs" / (label + ".bench.log");
  if (runner.run("bench " + label, [&] { return bench_argv(lowbit, runner.options, model_dir); },
                 done, log_file)) {
    write_json_file(read_json_file(log_file), done);
  }
}

// eval --json writes its file directly; it becomes the step's file only once eval has succeeded.
void eval_step(StepRunner& runner, const std::string& lowbit, const std::string& label,
               const std::string& model_dir, bool against_baseline, const fs::path& dir) {
  const fs::path done = dir / "steps" / (label + ".eval.json");
  const fs::path partial = done.string() + ".partial";
  if (runner.run("eval " + label,
                 [&] { return eval_argv(lowbit, runner.options, model_dir, against_baseline, partial.string()); },
                 done, dir / "logs" / (label + ".eval.log"))) {
    fs::rename(partial, done);
  }
}

// Per-module weight error, computed here (it loads the quantized model once).
std::vector<LayerError> layer_step(StepRunner& runner, const std::string& label,
                                   const fs::path& model_dir, const fs::path& dir) {
  ++runner.step;
  const fs::path done = dir / "steps" / (label + ".layers.json");
  if (!fs::exists(done)) {
    runner.log(runner.counter() + "layer errors " + label + " ...");
    const auto model = models::Model::load(model_dir.string());
    json layers = json::array();
    for (const LayerError& e : layer_errors(*model, runner.options.model)) {
      layers.push_back({{"name", e.name}, {"rel_error", e.rel_error}});
    }
    write_json_file(layers, done);
  } else {
    runner.log(runner.counter() + "layer errors " + label + ": kept from an earlier run");
  }
  std::vector<LayerError> errors;
  const json layers = read_json_file(done);
  try {
    for (const json& e : layers) {
      errors.push_back({e.at("name").get<std::string>(), e.at("rel_error").get<double>()});
    }
  } catch (const json::exception& e) {
    throw InvalidArgument(done.string() + ": " + e.what() + "; delete it to measure again");
  }
  return errors;
}

CompareRecommendation recommend_from(const CompareOptions& o, const CompareResult& result,
                                     const fs::path& compare_path) {
  RecommendRequest request;
  request.model = model_shape_from_dir(o.model);
  request.workload = parse_workload(o.workload, "--workload");
  request.accuracy = parse_accuracy(o.accuracy, "--accuracy");
  request.compare = result;
  request.compare_path = compare_path.string();
  const Recommendation r = recommend(request);
  CompareRecommendation out;
  for (const Reason& reason : r.reasons) out.reasons.push_back(reason.step + ": " + reason.text);
  if (!r.feasible) return out;
  if (r.scheme == "UNQUANTIZED") {
    out.scheme = result.baseline.name;
    out.is_baseline = true;
    return out;
  }
  for (size_t i = 0; i < result.schemes.size(); ++i) {
    if (result.schemes[i].scheme == r.scheme) {
      out.scheme = result.schemes[i].label();
      out.algo = result.schemes[i].algo;
      out.index = i;
      return out;
    }
  }
  // The tree chose a scheme this run did not measure: say so rather than point at a row.
  out.reasons.push_back("recommend: " + r.scheme + " was not among the measured schemes");
  return out;
}

}  // namespace

void run_compare(const CompareOptions& o, const std::function<void(const std::string&)>& log) {
  check_options(o);
  prepare_output(o);
  const std::string lowbit = self_executable();
  const fs::path dir = o.output_dir;
  const bool measure_layers = o.algo != "awq";  // AWQ rescales W: see layer_error.h

  StepRunner runner{o, log, 0, 2 + static_cast<int>(o.schemes.size()) * (measure_layers ? 4 : 3)};
  eval_step(runner, lowbit, "baseline", o.model, false, dir);
  bench_step(runner, lowbit, "baseline", o.model, dir);

  std::vector<CompareSchemeSteps> schemes;
  for (const std::string& scheme : o.schemes) {
    const std::string label = scheme_label(scheme, o.algo, o.kv_cache);
    const fs::path model_dir = dir / label;
    // The finished checkpoint is the quantize step's mark; OUT.tmp left by an interrupted quantize
    // is resumed layer by layer (lowbit quantize --resume).
    runner.run("quantize " + label,
               [&] {
                 return quantize_argv(lowbit, o, scheme, model_dir.string(),
                                      fs::exists(model_dir.string() + ".tmp"));
               },
               model_dir / "config.json", dir / "logs" / (label + ".quantize.log"));
    eval_step(runner, lowbit, label, model_dir.string(), true, dir);
    bench_step(runner, lowbit, label, model_dir.string(), dir);

    CompareSchemeSteps s;
    s.scheme = scheme;
    s.algo = o.algo;
    s.kv_cache = o.kv_cache;
    s.dir = label;
    s.eval = read_json_file(dir / "steps" / (label + ".eval.json"));
    s.bench = read_json_file(dir / "steps" / (label + ".bench.json"));
    s.size = measure_checkpoint(model_dir.string(), o.model);
    if (measure_layers) {
      s.layer_errors = layer_step(runner, label, model_dir, dir);
      s.layer_errors_measured = true;
    }
    schemes.push_back(std::move(s));
  }

  CompareModelSteps baseline;
  baseline.dir = fs::absolute(o.model).lexically_normal().string();
  baseline.eval = read_json_file(dir / "steps/baseline.eval.json");
  baseline.bench = read_json_file(dir / "steps/baseline.bench.json");
  baseline.size = measure_checkpoint(o.model, o.model);

  CompareMachine machine;
  machine.cpu = cpu_name();
  if (const auto threads = baseline.bench.find("threads");
      threads != baseline.bench.end() && threads->is_number_integer()) {
    machine.threads = threads->get<int64_t>();
  }
  CompareResult result = assemble_compare(o, baseline, schemes, machine, utc_now());
  const fs::path compare_path = dir / "compare.json";
  result.recommendation = recommend_from(o, result, compare_path);
  write_compare_result(result, compare_path.string());
  // Read back: the file must satisfy the reader `report` and `recommend` use.
  const CompareResult checked = read_compare_result(compare_path.string());
  write_text_file(compare_markdown(checked), dir / "compare.md");
  log(compare_markdown(checked));
  log("wrote " + compare_path.string() + " and " + (dir / "compare.md").string() +
      "; `lowbit report " + dir.string() + "` draws it as a page");
}

}  // namespace lowbit::eval
