#include "eval/eval_report.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace lowbit::eval {
namespace {

using nlohmann::json;

json protocol_json(const EvalReport& r) {
  json p = json::object();
  if (r.perplexity) {
    const PerplexitySection& s = *r.perplexity;
    json ppl = {{"protocol", s.protocol}, {"text", s.text_file}, {"context", s.context},
                {"windows", s.scores.windows}, {"tokens_scored", s.scores.scored_tokens},
                {"text_tokens", s.text_tokens}};
    if (s.protocol == "reference") {
      ppl["stride"] = s.bos ? s.context - 1 : s.context;
      ppl["bos"] = s.bos;
      ppl["description"] = "non-overlapping windows, each scored on its own (lowbit ppl)";
    } else {
      ppl["max_length"] = s.context;
      ppl["context_len"] = 1;
      ppl["prefix_token"] = s.prefix_token;
      if (s.words > 0) ppl["words"] = s.words;
      if (s.bytes > 0) ppl["bytes"] = s.bytes;
      ppl["description"] =
          "lm-eval loglikelihood_rolling: the text as one document, disjoint rolling windows";
    }
    p["perplexity"] = ppl;
    if (s.scores.has_baseline) {
      p["kld"] = "KL(baseline || model) of the full distributions, per scored token, in double";
    }
  }
  if (r.greedy) {
    p["greedy"] = {{"prompts", r.greedy->options.prompts},
                   {"prompt_tokens", r.greedy->options.prompt_tokens},
                   {"new_tokens", r.greedy->options.new_tokens}};
  }
  if (!r.tasks.empty()) {
    const TaskOptions& o = r.tasks.front().options;
    p["tasks"] = {{"target_delimiter", " "}, {"bos", o.add_bos}, {"max_length", o.max_length},
                  {"num_fewshot", o.num_fewshot}, {"max_gen_tokens", o.max_gen_tokens},
                  {"until", {"\n\n", "Question:"}}};
  }
  return p;
}

void add_perplexity(const PerplexitySection& s, json& j) {
  j["ppl"] = s.scores.perplexity();
  j["ppl_tokens"] = s.scores.scored_tokens;
  j["ppl_windows"] = s.scores.windows;
  if (s.protocol == "lm-eval" && s.words > 0 && s.bytes > 0) {
    const double nll = s.scores.total_nll;
    j["word_perplexity"] = std::exp(nll / static_cast<double>(s.words));
    j["byte_perplexity"] = std::exp(nll / static_cast<double>(s.bytes));
    j["bits_per_byte"] = nll / static_cast<double>(s.bytes) / std::log(2.0);
  }
  if (!s.scores.has_baseline) return;
  const KldStatistics k = kld_statistics(s.scores.kld, s.scores.same_top);
  j["baseline_ppl"] = s.scores.base_perplexity();
  j["delta_ppl"] = s.scores.perplexity() - s.scores.base_perplexity();
  j["kld_mean"] = k.mean;
  j["kld_mean_stderr"] = k.mean_stderr;
  j["kld_median"] = k.median;
  j["kld_p90"] = k.p90;
  j["kld_p99"] = k.p99;
  j["kld_max"] = k.max;
  j["top1_agreement"] = k.same_top;
  j["top1_agreement_stderr"] = k.same_top_stderr;
  j["kld_first_quarter"] = s.scores.kld_first_quarter;
  j["kld_last_quarter"] = s.scores.kld_last_quarter;
}

json greedy_figures(const GreedyRun& run) {
  return {{"mean_length", run.mean_length()},
          {"repeated_4grams", run.repeated_ngram_fraction(4)},
          {"decode_tok_s", run.decode_tokens_per_second()},
          {"decode_tokens", run.decode_tokens},
          {"decode_seconds", run.decode_seconds}};
}

json task_json(const TaskSection& t) {
  json j = {{"name", t.task.name}, {"path", t.task.path}};
  if (t.multiple_choice) {
    const MultipleChoiceResult& m = *t.multiple_choice;
    j.update({{"kind", "multiple_choice"}, {"n", m.items.size()}, {"acc", m.acc},
              {"acc_stderr", m.acc_stderr}, {"acc_norm", m.acc_norm},
              {"acc_norm_stderr", m.acc_norm_stderr}, {"seconds", m.seconds}});
    json items = json::array();
    for (const MultipleChoiceItemResult& item : m.items) {
      items.push_back({{"loglikelihoods", item.loglikelihoods}, {"pred", item.pred},
                       {"pred_norm", item.pred_norm}, {"acc", item.acc},
                       {"acc_norm", item.acc_norm}});
    }
    j["items"] = items;
  }
  if (t.generation) {
    const GenerationTaskResult& g = *t.generation;
    j.update({{"kind", "generation"}, {"n", g.items.size()}, {"num_fewshot", t.options.num_fewshot},
              {"exact_match_strict", g.strict}, {"exact_match_strict_stderr", g.strict_stderr},
              {"exact_match_flexible", g.flexible},
              {"exact_match_flexible_stderr", g.flexible_stderr}, {"seconds", g.seconds}});
    json items = json::array();
    for (const GenerationItemResult& item : g.items) {
      items.push_back({{"output", item.output}, {"strict", item.strict},
                       {"flexible", item.flexible}, {"strict_match", item.strict_match},
                       {"flexible_match", item.flexible_match}});
    }
    j["items"] = items;
  }
  return j;
}

void add_tasks(const std::vector<TaskSection>& tasks, json& j) {
  json list = json::array();
  bool have_mc = false, have_gen = false;
  for (const TaskSection& t : tasks) {
    list.push_back(task_json(t));
    if (t.multiple_choice && !have_mc) {
      have_mc = true;
      j["task_acc"] = t.multiple_choice->acc;
      j["task_acc_stderr"] = t.multiple_choice->acc_stderr;
      j["task_acc_norm"] = t.multiple_choice->acc_norm;
      j["task_acc_norm_stderr"] = t.multiple_choice->acc_norm_stderr;
    }
    if (t.generation && !have_gen) {
      have_gen = true;
      j["task_exact_match_strict"] = t.generation->strict;
      j["task_exact_match_strict_stderr"] = t.generation->strict_stderr;
      j["task_exact_match_flexible"] = t.generation->flexible;
      j["task_exact_match_flexible_stderr"] = t.generation->flexible_stderr;
    }
  }
  j["tasks"] = list;
}

std::string line(const char* spec, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* spec, ...) {
  char buffer[512];
  va_list args;
  va_start(args, spec);
  std::vsnprintf(buffer, sizeof(buffer), spec, args);
  va_end(args);
  return std::string(buffer) + "\n";
}

std::string perplexity_table(const PerplexitySection& s) {
  std::string out;
  const WindowScores& w = s.scores;
  if (s.protocol == "reference") {
    out += line("protocol   reference: %lld windows of %lld tokens, stride %lld, %s, %lld tokens "
                "scored (of %lld in %s)",
                static_cast<long long>(w.windows), static_cast<long long>(s.context),
                static_cast<long long>(s.bos ? s.context - 1 : s.context),
                s.bos ? "BOS first" : "no BOS", static_cast<long long>(w.scored_tokens),
                static_cast<long long>(s.text_tokens), s.text_file.c_str());
  } else {
    out += line("protocol   lm-eval rolling loglikelihood: max_length %lld, context_len 1, "
                "prefix token %d, %lld windows, %lld tokens scored (of %lld in %s)",
                static_cast<long long>(s.context), s.prefix_token,
                static_cast<long long>(w.windows), static_cast<long long>(w.scored_tokens),
                static_cast<long long>(s.text_tokens), s.text_file.c_str());
  }
  out += "\n";
  out += line("%-26s %14s %14s", "metric", "model", w.has_baseline ? "baseline" : "");
  char base[32] = "";
  if (w.has_baseline) std::snprintf(base, sizeof(base), "%.4f", w.base_perplexity());
  out += line("%-26s %14.4f %14s", "perplexity", w.perplexity(), base);
  if (s.protocol == "lm-eval" && (s.words == 0 || s.bytes == 0)) {
    out += "(word and byte perplexity need the whole document: drop --windows)\n";
  } else if (s.protocol == "lm-eval") {
    const double nll = w.total_nll;
    out += line("%-26s %14.4f", "word perplexity", std::exp(nll / static_cast<double>(s.words)));
    out += line("%-26s %14.4f", "byte perplexity", std::exp(nll / static_cast<double>(s.bytes)));
    out += line("%-26s %14.4f", "bits per byte", nll / static_cast<double>(s.bytes) / std::log(2.0));
  }
  if (w.has_baseline) {
    const KldStatistics k = kld_statistics(w.kld, w.same_top);
    out += line("%-26s %+14.4f", "delta perplexity", w.perplexity() - w.base_perplexity());
    out += line("%-26s %14.6f ± %.6f", "KLD mean", k.mean, k.mean_stderr);
    out += line("%-26s %14.6f", "KLD median", k.median);
    out += line("%-26s %14.6f", "KLD p90", k.p90);
    out += line("%-26s %14.6f", "KLD p99", k.p99);
    out += line("%-26s %14.6f", "KLD max", k.max);
    out += line("%-26s %13.3f%% ± %.3f%%", "top-1 agreement", 100 * k.same_top,
                100 * k.same_top_stderr);
    out += line("%-26s %14.6f / %.6f", "KLD first / last quarter", w.kld_first_quarter,
                w.kld_last_quarter);
  }
  return out;
}

}  // namespace

json EvalReport::to_json() const {
  json j = {{"model", model}, {"quantization", quantization}, {"kernels", kernels},
            {"kv_cache", kv_cache.empty() ? json(nullptr) : json(kv_cache)},
            {"baseline", baseline.empty() ? json(nullptr) : json(baseline)},
            {"protocol", protocol_json(*this)}, {"seconds", seconds}};
  if (perplexity) add_perplexity(*perplexity, j);
  if (greedy) {
    j["greedy_match_len"] = mean_common_prefix(greedy->model, greedy->baseline);
    j["decode_tok_s"] = greedy->model.decode_tokens_per_second();
    j["baseline_decode_tok_s"] = greedy->baseline.decode_tokens_per_second();
    j["greedy"] = {{"model", greedy_figures(greedy->model)},
                   {"baseline", greedy_figures(greedy->baseline)}};
  }
  if (!tasks.empty()) add_tasks(tasks, j);
  if (pitfalls_checked) {
    json list = json::array();
    for (const Pitfall& p : pitfalls) list.push_back({{"kind", p.kind}, {"message", p.message}});
    j["pitfalls"] = list;
  }
  return j;
}

std::string EvalReport::to_table() const {
  std::string out = line("model      %s (%s%s%s)", model.c_str(), quantization.c_str(),
                         kv_cache.empty() ? "" : ", KV cache ", kv_cache.c_str());
  if (!kernels.empty()) {
    std::string names;
    for (const std::string& k : kernels) names += (names.empty() ? "" : ", ") + k;
    out += line("kernels    %s", names.c_str());
  }
  if (!baseline.empty()) out += line("baseline   %s", baseline.c_str());
  if (perplexity) out += perplexity_table(*perplexity);
  if (greedy) {
    const GreedyRun& m = greedy->model;
    const GreedyRun& b = greedy->baseline;
    out += line("%-26s %14.2f   (of %d tokens, %d prompts of %d tokens)", "greedy match length",
                mean_common_prefix(m, b), greedy->options.new_tokens, greedy->options.prompts,
                greedy->options.prompt_tokens);
    out += line("%-26s %14.2f %14.2f", "greedy output length", m.mean_length(), b.mean_length());
    out += line("%-26s %13.1f%% %13.1f%%", "repeated 4-grams", 100 * m.repeated_ngram_fraction(4),
                100 * b.repeated_ngram_fraction(4));
    out += line("%-26s %14.1f %14.1f", "decode tok/s", m.decode_tokens_per_second(),
                b.decode_tokens_per_second());
  }
  for (const TaskSection& t : tasks) {
    if (t.multiple_choice) {
      const MultipleChoiceResult& r = *t.multiple_choice;
      out += line("task %s (%zu items, multiple choice): acc %.4f ± %.4f, acc_norm %.4f ± %.4f",
                  t.task.name.c_str(), r.items.size(), r.acc, r.acc_stderr, r.acc_norm,
                  r.acc_norm_stderr);
    }
    if (t.generation) {
      const GenerationTaskResult& r = *t.generation;
      out += line("task %s (%zu items, %d-shot generation): exact match strict %.4f ± %.4f, "
                  "flexible %.4f ± %.4f",
                  t.task.name.c_str(), r.items.size(), t.options.num_fewshot, r.strict,
                  r.strict_stderr, r.flexible, r.flexible_stderr);
    }
  }
  for (const Pitfall& p : pitfalls) out += line("pitfall: %s: %s", p.kind.c_str(), p.message.c_str());
  if (pitfalls_checked && pitfalls.empty()) out += "pitfalls: none found\n";
  return out;
}

PitfallInputs pitfall_inputs(const EvalReport& report, const std::string& model_lm_head_kernel,
                             const std::string& baseline_lm_head_kernel, bool kv_cache_fp8) {
  PitfallInputs in;
  in.model_lm_head_kernel = model_lm_head_kernel;
  in.baseline_lm_head_kernel = baseline_lm_head_kernel;
  in.model_kernels = report.kernels;
  in.model_quantization = report.quantization;
  in.kv_cache_fp8 = kv_cache_fp8;
  in.kv_cache = report.kv_cache;
  if (report.greedy) {
    in.has_greedy = true;
    for (auto [run, figures] : {std::pair{&report.greedy->model, &in.model},
                                std::pair{&report.greedy->baseline, &in.baseline}}) {
      figures->mean_length = run->mean_length();
      figures->repeated_4grams = run->repeated_ngram_fraction(4);
      figures->decode_tokens_per_second = run->decode_tokens_per_second();
    }
  }
  if (report.perplexity && report.perplexity->scores.has_baseline) {
    in.kld_first_quarter = report.perplexity->scores.kld_first_quarter;
    in.kld_last_quarter = report.perplexity->scores.kld_last_quarter;
  }
  return in;
}

}  // namespace lowbit::eval
