// `lowbit compare`: what to measure and where each step's result lives. One run quantizes the model
// with every scheme, evaluates each against the original on the same tokens and tasks, benchmarks
// each on this machine, and writes DIR/compare.json (eval/compare_result.h) plus a table.
//
// DIR layout (every file written whole, via a temporary name, so an interrupted run resumes at the
// first missing one):
//   compare-options.json          the protocol of the run; a rerun must match it (schemes may differ)
//   <label>/                      the quantized checkpoint (lowbit quantize's output)
//   steps/<label>.<step>.json     step = quantize | eval | bench | layers; baseline.eval/.bench
//   logs/<label>.<step>.log       what the step's child process printed
//   compare.json, compare.md      the result
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lowbit::eval {

struct CompareOptions {
  std::string model;                 // the unquantized checkpoint: the baseline
  std::vector<std::string> schemes;  // quantize presets, e.g. FP8_DYNAMIC, W8A8, W4A16
  std::string algo = "rtn";          // rtn, gptq, awq: lowbit quantize --algo
  std::string kv_cache;              // "" or "fp8": quantize --kv-cache fp8, eval with an fp8 cache
  std::string dataset;               // calibration data (quantize --dataset)
  int64_t num_samples = 0;           // 0: quantize's default
  int64_t seq_len = 0;               // 0: quantize's default
  std::string ppl_text;              // perplexity and KLD text (eval --ppl)
  int64_t ctx = 2048;
  int64_t windows = 0;               // 0: the whole text
  bool bos = false;
  std::vector<std::string> tasks;    // JSONL task files (eval --tasks)
  int64_t task_limit = 0;            // items per task (0: all)
  int64_t bench_prompt_tokens = 256;
  int64_t bench_decode_tokens = 32;
  int64_t bench_repeats = 3;
  int threads = 0;                   // 0: lowbit's default
  std::string accuracy = "balanced"; // the recommendation's budget (recommend --accuracy)
  std::string workload = "chat";     // and workload
  std::string output_dir;
  bool overwrite = false;            // start again in a DIR made with other options
};

// "W4A16", "W4A16-gptq", "W4A16-kvfp8": the checkpoint's directory name and the steps' prefix.
std::string scheme_label(const std::string& scheme, const std::string& algo,
                         const std::string& kv_cache);

// The options a resumed run must share with the first one (all but schemes, threads, overwrite
// and the output directory), as written to compare-options.json.
nlohmann::json compare_protocol_json(const CompareOptions& options);

// The argv of each child step (argv[0] = `lowbit`); `json_out` is where the step writes its figures.
std::vector<std::string> quantize_argv(const std::string& lowbit, const CompareOptions& o,
                                       const std::string& scheme, const std::string& out_dir,
                                       bool resume);
std::vector<std::string> eval_argv(const std::string& lowbit, const CompareOptions& o,
                                   const std::string& model_dir, bool against_baseline,
                                   const std::string& json_out);
std::vector<std::string> bench_argv(const std::string& lowbit, const CompareOptions& o,
                                    const std::string& model_dir);

// Runs the whole comparison; `log` gets one line per step ("[3/13] eval W4A16 ... 12.3 s").
// Throws InvalidArgument for bad options or a DIR made with other options, and Error naming the
// step and its log file when a step fails (finished steps stay; rerun to resume).
void run_compare(const CompareOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace lowbit::eval
