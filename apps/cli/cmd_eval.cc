// lowbit eval MODEL [--baseline BASE] [--ppl FILE] [--tasks FILE...]: perplexity (the protocol
// printed), KL divergence / top-1 agreement / greedy agreement against a baseline on the same
// tokens, lm-eval-style tasks, and the quantization pitfall checks (docs/eval.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <tuple>

#include "command.h"
#include "device.h"
#include "eval/eval_report.h"
#include "eval/py_text.h"
#include "eval/scored_windows.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "options.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct EvalOptions {
  ModelLoadOptions load;
  int threads = 0;
  std::string model;
  std::string baseline;
  std::string ppl_file;
  std::string ppl_protocol = "reference";
  int64_t context = 2048;
  bool bos = false;
  int64_t windows = 0;
  std::vector<std::string> tasks;
  int64_t limit = 0;
  int num_fewshot = 0;
  int max_gen_tokens = 256;
  eval::GreedyOptions greedy;
  std::string json_out;
  DeviceOptions device;
};

std::unique_ptr<Tokenizer> require_tokenizer(const std::string& dir) {
  auto tokenizer = load_tokenizer_if_present(dir);
  LOWBIT_CHECK(tokenizer != nullptr, dir + " has no tokenizer.json: eval needs one");
  return tokenizer;
}

// KL divergence compares distributions id by id: both vocabularies must be the same.
void check_same_vocabulary(const Tokenizer& model, const Tokenizer& base,
                           const std::string& model_dir, const std::string& base_dir) {
  if (model.vocab_size() != base.vocab_size()) {
    throw InvalidArgument(base_dir + "/tokenizer.json: " + std::to_string(base.vocab_size()) +
                          " tokens, " + model_dir + " has " + std::to_string(model.vocab_size()) +
                          ": --baseline needs a model with the same tokenizer");
  }
  for (int32_t id = 0; id < model.vocab_size(); ++id) {
    if (model.id_to_token(id) != base.id_to_token(id)) {
      throw InvalidArgument(base_dir + "/tokenizer.json: token " + std::to_string(id) + " is '" +
                            base.id_to_token(id) + "', " + model_dir + " has '" +
                            model.id_to_token(id) + "': --baseline needs the same tokenizer");
    }
  }
}

std::function<void(int64_t, int64_t)> progress_line(const char* what, bool show) {
  return [what, show](int64_t done, int64_t total) {
    if (show) std::fprintf(stderr, "\r%s %lld/%lld", what, static_cast<long long>(done),
                           static_cast<long long>(total));
    if (show && done == total) std::fputc('\n', stderr);
  };
}

eval::PerplexitySection run_perplexity(const EvalOptions& o, const models::Model& model,
                                       const models::Model* baseline, const Tokenizer& tokenizer,
                                       const std::string& text,
                                       const std::vector<int32_t>& tokens, bool show_progress) {
  eval::PerplexitySection s;
  s.protocol = o.ppl_protocol;
  s.text_file = o.ppl_file;
  s.context = o.context;
  s.bos = o.bos;
  s.text_tokens = static_cast<int64_t>(tokens.size());
  std::vector<eval::ScoredWindow> windows;
  if (o.ppl_protocol == "reference") {
    eval::PerplexityOptions ppl;
    ppl.context = o.context;
    ppl.max_windows = o.windows;
    if (o.bos) {
      LOWBIT_CHECK(model.config().bos_token_id.has_value(),
                   o.model + "/config.json: --bos needs bos_token_id, which is not set");
      ppl.bos_id = *model.config().bos_token_id;
    }
    windows = eval::reference_windows(tokens, ppl);
  } else {
    LOWBIT_CHECK(!o.bos, "--bos: the lm-eval protocol always starts with its prefix token");
    s.prefix_token = eval::lm_eval_prefix_token(model, tokenizer);
    s.words = eval::python_split_count(text);
    s.bytes = static_cast<int64_t>(text.size());
    windows = eval::lm_eval_rolling_windows(tokens, s.prefix_token, o.context, o.windows);
  }
  const auto progress = progress_line("window", show_progress);
  if (use_cuda(o.device)) {  // the windows on the GPU(s); tasks and greedy stay on the CPU
    size_t longest = 1;
    for (const eval::ScoredWindow& w : windows) longest = std::max(longest, w.input.size());
    const auto max_len = static_cast<int64_t>(longest);
    const eval::WindowLogits ours = cuda_window_logits(model, o.device, max_len);
    eval::WindowLogits base;
    if (baseline != nullptr) {
      LOWBIT_CHECK(baseline->config().vocab_size == model.config().vocab_size,
                   o.baseline + "/config.json: vocab_size differs from " + o.model +
                       "'s: the baseline must use the same tokenizer");
      base = cuda_window_logits(*baseline, o.device, max_len);
    }
    s.scores = eval::score_windows(ours, baseline != nullptr ? &base : nullptr,
                                   model.config().vocab_size, windows, progress);
  } else {
    s.scores = eval::score_windows(model, baseline, windows, progress);
  }
  if (s.scores.scored_tokens != s.text_tokens) {
    // --windows stopped early: words and bytes of the whole document would not match the NLL.
    s.words = s.bytes = 0;
  }
  return s;
}

void run_tasks(const EvalOptions& o, const models::Model& model, const Tokenizer& tokenizer,
               eval::EvalReport& report, bool show_progress) {
  for (const std::string& path : o.tasks) {
    eval::TaskSection section;
    section.task = eval::load_task_file(path);
    section.options.add_bos = o.bos;
    section.options.max_length = o.context;
    section.options.limit = o.limit;
    section.options.num_fewshot = o.num_fewshot;
    section.options.max_gen_tokens = o.max_gen_tokens;
    if (show_progress) std::fprintf(stderr, "task %s\n", section.task.name.c_str());
    if (section.task.kind == eval::TaskKind::MultipleChoice) {
      section.multiple_choice =
          eval::evaluate_multiple_choice(model, tokenizer, section.task, section.options);
    } else {
      section.generation =
          eval::evaluate_generation(model, tokenizer, section.task, section.options);
    }
    report.tasks.push_back(std::move(section));
  }
}

int run_eval(const EvalOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  apply_threads(o.threads);
  LOWBIT_CHECK(o.ppl_protocol == "reference" || o.ppl_protocol == "lm-eval",
               "--ppl-protocol '" + o.ppl_protocol + "': expected reference or lm-eval");
  LOWBIT_CHECK(!o.ppl_file.empty() || !o.tasks.empty(),
               "nothing to evaluate: give --ppl FILE and/or --tasks FILE");
  LOWBIT_CHECK(o.baseline.empty() || !o.ppl_file.empty(),
               "--baseline compares the models on the windows of --ppl FILE: give --ppl");
  auto model = load_model_on(o.device, o.model, prepare_model_load(o.load));
  auto tokenizer = require_tokenizer(o.model);
  std::unique_ptr<models::Model> baseline;
  if (!o.baseline.empty()) {
    // The baseline runs as stored: the quantization and KV-cache flags are the model's.
    baseline = load_model_on(o.device, o.baseline, {});
    check_same_vocabulary(*tokenizer, *require_tokenizer(o.baseline), o.model, o.baseline);
  }
  const bool show_progress = isatty(fileno(stderr));

  eval::EvalReport report;
  report.model = o.model;
  report.baseline = o.baseline;
  report.quantization = model->quantization();
  report.kernels = eval::linear_kernels(*model);
  const models::KvCacheQuantizer* kv = model->kv_cache_quantizer();
  if (kv != nullptr && kv->active()) report.kv_cache = kv->describe();

  if (!o.ppl_file.empty()) {
    const std::string text = eval::read_text_file_universal_newlines(o.ppl_file);
    const std::vector<int32_t> tokens = tokenizer->encode(text, /*add_special_tokens=*/false);
    report.perplexity =
        run_perplexity(o, *model, baseline.get(), *tokenizer, text, tokens, show_progress);
    if (baseline) {
      eval::GreedySection greedy;
      greedy.options = o.greedy;
      const auto prompts = eval::greedy_prompts(tokens, o.greedy);
      std::tie(greedy.model, greedy.baseline) =
          eval::greedy_run_pair(*model, *baseline, prompts, o.greedy.new_tokens);
      report.greedy = std::move(greedy);
    }
  }
  run_tasks(o, *model, *tokenizer, report, show_progress);
  if (baseline) {
    report.pitfalls_checked = true;
    report.pitfalls = eval::check_pitfalls(
        eval::pitfall_inputs(report, eval::lm_head_kernel(*model), eval::lm_head_kernel(*baseline),
                             !report.kv_cache.empty()));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::fputs(report.to_table().c_str(), stdout);
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(o.json_out + ": cannot write the --json file");
    out << report.to_json().dump(2) << "\n";
    if (!out) throw IoError(o.json_out + ": write failed");
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, CommandList& commands) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* sub = app.add_subcommand(
      "eval", "Evaluate a model: perplexity, KL divergence against a baseline, lm-eval-style "
              "tasks, quantization pitfalls");
  sub->add_option("model", o->model, "Model directory")->required();
  sub->add_option("--baseline", o->baseline,
                  "Reference model directory (same tokenizer) to compare against on the same "
                  "tokens: KLD, top-1 agreement, greedy match length, pitfall checks");
  sub->add_option("--ppl", o->ppl_file, "UTF-8 text for perplexity (line endings read as \\n)");
  sub->add_option("--ppl-protocol", o->ppl_protocol,
                  "reference (non-overlapping windows, = lowbit ppl) or lm-eval (rolling "
                  "loglikelihood: word/byte perplexity, bits per byte)")
      ->capture_default_str();
  sub->add_option("--ctx", o->context, "Window length in tokens (lm-eval: max_length)")
      ->capture_default_str();
  sub->add_flag("--bos", o->bos, "Start every window (and task context) with the BOS token");
  sub->add_option("--windows", o->windows, "Score at most this many windows (0 = all)");
  sub->add_option("--tasks", o->tasks, "JSONL task files (multiple choice or generation)");
  sub->add_option("--limit", o->limit, "Score at most this many items per task (0 = all)");
  sub->add_option("--num-fewshot", o->num_fewshot,
                  "Generation tasks: the file's first K items become the n-shot prefix");
  sub->add_option("--max-gen-tokens", o->max_gen_tokens, "Generation tasks: tokens per answer")
      ->capture_default_str();
  sub->add_option("--greedy-prompts", o->greedy.prompts, "With --baseline: greedy prompts")
      ->capture_default_str();
  sub->add_option("--greedy-prompt-tokens", o->greedy.prompt_tokens,
                  "With --baseline: tokens per greedy prompt (slices of the --ppl text)")
      ->capture_default_str();
  sub->add_option("--greedy-tokens", o->greedy.new_tokens,
                  "With --baseline: tokens generated per greedy prompt")
      ->capture_default_str();
  sub->add_option("--json", o->json_out, "Also write every figure to this JSON file");
  add_model_load_options(sub, o->load);
  add_threads_option(sub, o->threads);
  add_device_option(sub, o->device);
  commands.push_back({sub, [o] { return run_eval(*o); }});
}

}  // namespace lowbit::cli
