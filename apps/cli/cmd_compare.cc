// lowbit compare MODEL --schemes A,B,C --ppl FILE [--dataset FILE] [--tasks FILE...] -o DIR:
// quantize with each scheme, evaluate each against the original, benchmark each here, and write one
// table (DIR/compare.json, DIR/compare.md) that `lowbit report` draws and `lowbit recommend
// --compare` reads. Resumable: rerun the same command after an interruption (docs/compare.md).
#include <cstdio>

#include "command.h"
#include "eval/compare_plan.h"
#include "options.h"

namespace lowbit::cli {
namespace {

int run_compare_command(eval::CompareOptions o) {
  eval::run_compare(o, [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    if (line.empty() || line.back() != '\n') std::fputc('\n', stdout);
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, CommandList& commands) {
  auto o = std::make_shared<eval::CompareOptions>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Quantize a model with several schemes, evaluate and benchmark each against the "
                 "original, and write one comparison table (resumable)");
  sub->add_option("model", o->model, "Unquantized model directory (the baseline)")->required();
  sub->add_option("--schemes", o->schemes, "Quantization presets, comma-separated "
                                           "(e.g. FP8_DYNAMIC,W8A8,W4A16,W4A16_ASYM,W4A8)")
      ->delimiter(',')
      ->required();
  sub->add_option("--algo", o->algo, "Quantization algorithm for every scheme: rtn, gptq or awq")
      ->capture_default_str();
  sub->add_option("--kv-cache", o->kv_cache, "fp8: also calibrate an FP8 KV cache and evaluate "
                                             "with it");
  sub->add_option("--dataset", o->dataset, "Calibration data for quantize (.txt, .jsonl, .json); "
                                           "schemes that need none run without it");
  sub->add_option("--num-samples", o->num_samples, "Calibration samples (default: quantize's)");
  sub->add_option("--seq-len", o->seq_len, "Tokens per calibration sample (default: quantize's)");
  sub->add_option("--ppl", o->ppl_text, "Held-out text for perplexity and KL divergence")->required();
  sub->add_option("--ctx", o->ctx, "Perplexity window in tokens")->capture_default_str();
  sub->add_option("--windows", o->windows, "Score at most this many windows (0 = the whole text)");
  sub->add_flag("--bos", o->bos, "Start every window with the BOS token");
  sub->add_option("--tasks", o->tasks, "lm-eval-style JSONL task files (e.g. data/tasks/heldout_mc.jsonl)");
  sub->add_option("--limit", o->task_limit, "Items per task (0 = all)");
  sub->add_option("--bench-prompt-tokens", o->bench_prompt_tokens, "Prefill length for bench")
      ->capture_default_str();
  sub->add_option("--bench-decode-tokens", o->bench_decode_tokens, "Decode steps for bench")
      ->capture_default_str();
  sub->add_option("--bench-repeats", o->bench_repeats, "Bench repetitions (best is kept)")
      ->capture_default_str();
  sub->add_option("--accuracy", o->accuracy, "Budget of the recommendation: strict, balanced, "
                                             "aggressive")->capture_default_str();
  sub->add_option("--workload", o->workload, "Workload of the recommendation: chat, batch, "
                                             "long-context")->capture_default_str();
  sub->add_option("-o,--output", o->output_dir, "Output directory (reused to resume)")->required();
  sub->add_flag("--overwrite", o->overwrite, "Start again when DIR was measured with other options");
  add_threads_option(sub, o->threads);
  commands.push_back({sub, [o] { return run_compare_command(*o); }});
}

}  // namespace lowbit::cli
