#include "eval/compare_assemble.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "eval/report_format.h"
#include "lowbit/error.h"

namespace lowbit::eval {

using nlohmann::json;

namespace {

std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

double required(const json& j, const char* key, const std::string& what) {
  const std::optional<double> x = number(j, key);
  if (!x) throw Internal(what + ": the step's JSON has no number '" + key + "'");
  return *x;
}

void fill_measurements(const CompareModelSteps& steps, const std::string& what,
                       CompareMeasurements& m) {
  m.dir = steps.dir;
  m.size_bytes = steps.size.size_bytes;
  m.bits_per_weight = steps.size.bits_per_weight;
  m.ppl = required(steps.eval, "ppl", what + " eval");
  if (const auto score = task_score(steps.eval)) {
    m.task_acc = score->acc;
    m.task_acc_stderr = score->stderr_;
  }
  m.decode_tok_s = number(steps.bench, "decode_tps");
  m.prefill_tok_s = number(steps.bench, "prefill_tps");
  if (const auto rss = number(steps.bench, "peak_rss_bytes")) m.peak_rss_bytes = int64_t(*rss);
}

}  // namespace

std::optional<TaskScore> task_score(const json& eval) {
  auto tasks = eval.find("tasks");
  if (tasks == eval.end() || !tasks->is_array() || tasks->empty()) return std::nullopt;
  double sum = 0, variance = 0;
  int n = 0;
  for (const json& t : *tasks) {
    const bool mc = t.value("kind", "") == "multiple_choice";
    const std::optional<double> acc = number(t, mc ? "acc" : "exact_match_flexible");
    const std::optional<double> se = number(t, mc ? "acc_stderr" : "exact_match_flexible_stderr");
    if (!acc) continue;
    sum += *acc;
    variance += se ? *se * *se : 0.0;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return TaskScore{sum / n, std::sqrt(variance) / n};
}

CompareResult assemble_compare(const CompareOptions& options, const CompareModelSteps& baseline,
                               const std::vector<CompareSchemeSteps>& schemes,
                               const CompareMachine& machine, const std::string& created) {
  CompareResult r;
  r.model = options.model;
  r.created = created;
  r.machine = machine;
  r.protocol.ppl_text = options.ppl_text;
  r.protocol.ctx = options.ctx;
  if (const auto windows = number(baseline.eval, "ppl_windows")) r.protocol.windows = int64_t(*windows);
  r.protocol.bos = options.bos;
  r.protocol.tasks = options.tasks;
  r.baseline.name = "BF16";
  if (baseline.size.bits_per_weight > 16.5) r.baseline.name = "FP32";
  fill_measurements(baseline, "baseline", r.baseline);

  bool any_layer_errors = false;
  for (const CompareSchemeSteps& s : schemes) {
    const std::string what = scheme_label(s.scheme, s.algo, s.kv_cache);
    CompareScheme row;
    row.scheme = s.scheme;
    row.algo = s.algo;
    row.kv_cache = s.kv_cache.empty() ? "auto" : s.kv_cache;
    fill_measurements(s, what, row);
    // The scheme's eval scored the baseline again on the same windows: it must have seen the same
    // perplexity, or the two evals did not measure the same thing. 1e-9 relative: both are sums
    // of the same fp64 terms in the same order.
    const double base_again = required(s.eval, "baseline_ppl", what + " eval");
    if (std::fabs(base_again / r.baseline.ppl - 1) > 1e-9) {
      throw Internal(what + ": its eval saw baseline perplexity " + std::to_string(base_again) +
                     ", the baseline's own eval " + std::to_string(r.baseline.ppl) +
                     ": the two runs did not score the same tokens");
    }
    row.delta_ppl = row.ppl / r.baseline.ppl - 1;
    row.kld_mean = number(s.eval, "kld_mean");
    row.kld_p99 = number(s.eval, "kld_p99");
    row.top1_agreement = number(s.eval, "top1_agreement");
    if (s.layer_errors_measured) {
      row.layer_errors = s.layer_errors;
      any_layer_errors = true;
    }
    if (auto pitfalls = s.eval.find("pitfalls"); pitfalls != s.eval.end() && pitfalls->is_array()) {
      for (const json& p : *pitfalls) {
        row.pitfalls.push_back({p.value("kind", ""), p.value("message", "")});
      }
    }
    r.schemes.push_back(std::move(row));
  }
  if (any_layer_errors) r.layer_error_metric = "weight_rel_fro";
  return r;
}

namespace {

std::string cell(const std::optional<double>& x, const char* format) {
  if (!x) return report::kNotMeasured;
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *x);
  return buf;
}

void row_cells(std::ostringstream& out, const std::string& name, const CompareMeasurements& m,
               const std::string& delta, const std::string& kld) {
  std::string acc = report::kNotMeasured;
  if (m.task_acc) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f ± %.3f", *m.task_acc, m.task_acc_stderr.value_or(0));
    acc = buf;
  }
  char bits[32];
  std::snprintf(bits, sizeof bits, "%.2f", m.bits_per_weight);
  out << "| " << name << " | " << bits << " | " << report::format_bytes(m.size_bytes) << " | "
      << delta << " | " << kld << " | " << acc << " | " << cell(m.decode_tok_s, "%.1f") << " | "
      << cell(m.prefill_tok_s, "%.1f") << " | "
      << (m.peak_rss_bytes ? report::format_bytes(*m.peak_rss_bytes) : std::string(report::kNotMeasured))
      << " |\n";
}

}  // namespace

std::string compare_markdown(const CompareResult& r) {
  std::ostringstream out;
  out << "# lowbit compare: " << r.model << "\n\n";
  char protocol[512];
  std::snprintf(protocol, sizeof protocol,
                "Perplexity and KLD on %s, %lld-token windows%s%s; decode and prefill on %s.\n\n",
                r.protocol.ppl_text.c_str(), static_cast<long long>(r.protocol.ctx),
                r.protocol.windows ? (", " + std::to_string(*r.protocol.windows) + " windows").c_str() : "",
                r.protocol.bos ? ", BOS first" : "",
                r.machine.cpu.empty() ? "this machine" : r.machine.cpu.c_str());
  out << protocol;
  out << "| scheme | bits/weight | size | ΔPPL | KLD | task acc | decode tok/s | prefill tok/s | "
         "peak memory |\n|---|---|---|---|---|---|---|---|---|\n";
  char ppl[64];
  std::snprintf(ppl, sizeof ppl, "(ppl %.4f)", r.baseline.ppl);
  row_cells(out, r.baseline.name + " (baseline)", r.baseline, ppl, "0");
  for (const CompareScheme& s : r.schemes) {
    char delta[64];
    std::snprintf(delta, sizeof delta, "%+.2f%% (ppl %.4f)", 100 * s.delta_ppl, s.ppl);
    row_cells(out, s.label(), s, delta, cell(s.kld_mean, "%.5f"));
  }
  bool any = false;
  for (const CompareScheme& s : r.schemes) {
    for (const Pitfall& p : s.pitfalls) {
      if (!any) out << "\nPitfalls:\n";
      any = true;
      out << "- " << s.label() << ": " << p.kind << ": " << p.message << "\n";
    }
  }
  if (r.recommendation.scheme) {
    out << "\nRecommended: " << *r.recommendation.scheme << "\n";
    for (const std::string& reason : r.recommendation.reasons) out << "- " << reason << "\n";
  } else if (!r.recommendation.reasons.empty()) {
    out << "\nNo scheme recommended:\n";
    for (const std::string& reason : r.recommendation.reasons) out << "- " << reason << "\n";
  }
  return out.str();
}

}  // namespace lowbit::eval
