// Reading a `lowbit compare` result and choosing by measurement: the accuracy budget applied to
// measured ΔPPL and KLD instead of the tree's rules of thumb.
#include <cmath>
#include <cstdio>

#include "eval/recommend.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

std::string percent(double v) {
  char s[32];
  std::snprintf(s, sizeof(s), "%+.2f%%", v * 100);
  return s;
}
std::string plain(double v) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.4g", v);
  return s;
}

// "ΔPPL +0.80% <= 3.00%, KLD 0.021 <= 0.05", saying what exceeds the budget. delta_ppl is
// compare's relative change (ppl / baseline ppl - 1); KLD is optional there.
std::string against_budget(const CompareScheme& m, const Budget& b, bool* within) {
  const bool ppl_ok = m.delta_ppl <= b.max_delta_ppl;
  *within = ppl_ok;
  std::string s = "ΔPPL " + percent(m.delta_ppl) + (ppl_ok ? " <= " : " > ") +
                  percent(b.max_delta_ppl).substr(1);
  if (m.kld_mean) {
    const bool ok = *m.kld_mean <= b.max_kld;
    *within = *within && ok;
    s += std::string(s.empty() ? "" : ", ") + "KLD " + plain(*m.kld_mean) +
         (ok ? " <= " : " > ") + plain(b.max_kld);
  }
  return s;
}

}  // namespace

Workload parse_workload(const std::string& t, const std::string& flag) {
  if (t == "chat") return Workload::Chat;
  if (t == "batch") return Workload::Batch;
  if (t == "long-context") return Workload::LongContext;
  throw InvalidArgument(flag + ": '" + t + "' is not one of chat, batch, long-context");
}

AccuracyBudget parse_accuracy(const std::string& t, const std::string& flag) {
  if (t == "strict") return AccuracyBudget::Strict;
  if (t == "balanced") return AccuracyBudget::Balanced;
  if (t == "aggressive") return AccuracyBudget::Aggressive;
  throw InvalidArgument(flag + ": '" + t + "' is not one of strict, balanced, aggressive");
}

const char* workload_name(Workload w) {
  switch (w) {
    case Workload::Chat: return "chat";
    case Workload::Batch: return "batch";
    case Workload::LongContext: return "long-context";
  }
  return "?";
}

const char* accuracy_name(AccuracyBudget a) {
  switch (a) {
    case AccuracyBudget::Strict: return "strict";
    case AccuracyBudget::Balanced: return "balanced";
    case AccuracyBudget::Aggressive: return "aggressive";
  }
  return "?";
}

Budget accuracy_budget(AccuracyBudget a) {
  switch (a) {
    case AccuracyBudget::Strict: return {0.01, 0.01};
    case AccuracyBudget::Balanced: return {0.03, 0.05};
    case AccuracyBudget::Aggressive: return {0.05, 0.10};  // seed §6.1: > 5% needs attention
  }
  return {0, 0};
}

std::optional<size_t> pick_measured(const CompareResult& compare, const std::string& path,
                                    AccuracyBudget accuracy,
                                    Workload workload, const MeasuredChecks& checks,
                                    nlohmann::ordered_json& record, std::vector<Reason>& reasons) {
  const Budget b = accuracy_budget(accuracy);
  record = nlohmann::ordered_json::object();
  record["file"] = path;
  record["budget"] = {{"accuracy", accuracy_name(accuracy)},
                      {"max_delta_ppl", b.max_delta_ppl},
                      {"max_kld", b.max_kld}};
  record["schemes"] = nlohmann::ordered_json::array();
  std::optional<size_t> best;
  double best_bits = 0, best_kld = 0;
  bool best_clean = false;
  std::string smaller_over;  // smaller schemes that failed the budget, for the reason
  std::vector<std::pair<double, std::string>> over;  // (bits, "W4A16 (ΔPPL +4% > 3%)")
  for (size_t i = 0; i < compare.schemes.size(); ++i) {
    const CompareScheme& m = compare.schemes[i];
    nlohmann::ordered_json row = {{"scheme", m.scheme}, {"algo", m.algo}, {"kv_cache", m.kv_cache},
                                  {"delta_ppl", m.delta_ppl}};
    if (m.kld_mean) row["kld_mean"] = *m.kld_mean;
    for (const Pitfall& p : m.pitfalls) row["pitfalls"].push_back(p.kind + ": " + p.message);
    SchemeFacts f;
    try {
      f = scheme_facts(m.scheme);
    } catch (const InvalidArgument&) {
      row["verdict"] = "not a preset recommend knows";
      record["schemes"].push_back(row);
      continue;
    }
    const double bits = m.bits_per_weight;
    row["bits_per_weight"] = bits;
    const Verdict v = checks.runs(f);
    bool within = false;
    const std::string numbers = against_budget(m, b, &within);
    if (!v.runs) {
      row["verdict"] = "refused by the target: " + v.reason;
    } else if (workload == Workload::Batch && !f.quantizes_activations()) {
      row["verdict"] = "weight-only: does not speed up a prefill-bound batch workload";
    } else if (!checks.fits(bits)) {
      row["verdict"] = "does not fit in memory";
    } else if (!within) {
      row["verdict"] = "over the budget: " + numbers;
      over.emplace_back(bits, m.scheme + " (" + numbers + ")");
    } else {
      row["verdict"] = "within the budget: " + numbers;
      const bool clean = m.pitfalls.empty();
      const double kld = m.kld_mean.value_or(0);
      // Schemes without reported pitfalls first, then fewer bits, then lower KLD.
      const bool better = !best || (clean && !best_clean) ||
                          (clean == best_clean &&
                           (bits < best_bits - 1e-9 || (std::fabs(bits - best_bits) <= 1e-9 &&
                                                        kld < best_kld)));
      if (better) {
        best = i;
        best_bits = bits;
        best_kld = kld;
        best_clean = clean;
      }
    }
    record["schemes"].push_back(row);
  }
  if (!best) {
    std::string list;
    for (const auto& [bits, s] : over) list += (list.empty() ? "" : "; ") + s;
    reasons.push_back({"measurement", "none of the " + std::to_string(compare.schemes.size()) +
                                          " measured schemes in " + path +
                                          " is within the " + accuracy_name(accuracy) +
                                          " budget on hardware that runs it" +
                                          (list.empty() ? "" : " (" + list + ")") +
                                          ": the tree's rules of thumb decide, but expect more "
                                          "loss than the budget allows; relax --accuracy or keep "
                                          "16-bit weights"});
    record["chosen"] = nullptr;
    return std::nullopt;
  }
  const CompareScheme& m = compare.schemes[*best];
  record["schemes"][*best]["verdict"] = "chosen: " + record["schemes"][*best]["verdict"].get<std::string>();
  record["chosen"] = m.scheme;
  for (const auto& [bits, s] : over) {
    if (bits < best_bits) smaller_over += (smaller_over.empty() ? "" : "; ") + s;
  }
  bool within = false;
  reasons.push_back({"measurement",
                     m.scheme + (m.algo.empty() ? "" : " (" + m.algo + ")") +
                         " chosen by measurement (" + path + "): the smallest scheme (" +
                         plain(best_bits) + " bits/weight) within the " + accuracy_name(accuracy) +
                         " budget that the target runs and fits: " +
                         against_budget(m, b, &within) +
                         (smaller_over.empty() ? "" : "; smaller but over budget: " + smaller_over)});
  if (!m.pitfalls.empty()) {
    std::string list;
    for (const Pitfall& p : m.pitfalls) list += (list.empty() ? "" : "; ") + p.message;
    reasons.push_back({"measurement", "compare reported pitfalls for " + m.scheme + ": " + list});
  }
  return best;
}

}  // namespace lowbit::eval
