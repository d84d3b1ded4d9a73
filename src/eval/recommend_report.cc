// The recommendation as command lines, JSON and text. The text keeps the two hardware questions
// apart: what the target can compute, and what lowbit's registry can run today.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "eval/recommend.h"

namespace lowbit::eval {
namespace {

std::string shell_quote(const std::string& s) {
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' ||
          c == '-' || c == '+' || c == ':' || c == '=')) {
      std::string q = "'";
      for (char d : s) q += d == '\'' ? std::string("'\\''") : std::string(1, d);
      return q + "'";
    }
  }
  return s;
}

std::string algo_flags(const std::string& algo) {
  if (algo == "smoothquant+gptq") return " --algo gptq --smoothquant 0.8";
  if (algo == "smoothquant+rtn") return " --algo rtn --smoothquant 0.8";
  return algo.empty() ? "" : " --algo " + algo;
}

void describe_lowbit(const RecommendRequest& req, Recommendation& rec) {
  const LowbitKernel here = lowbit_kernel(rec.facts, req.host.platform);
  rec.lowbit_here = here.kernel.empty()
                        ? "lowbit cannot run " + rec.scheme + " on this machine (" +
                              req.host.platform.describe() + "): " + here.text
                        : "lowbit serve runs " + rec.scheme + " on this machine (" +
                              req.host.platform.describe() + ") with " + here.text;
  if (!req.gpu) {
    rec.lowbit_on_target = rec.lowbit_here;
    return;
  }
  const LowbitKernel there = lowbit_kernel(rec.facts, gpu_platform(*req.gpu));
  rec.lowbit_on_target =
      there.kernel.empty()
          ? "lowbit cannot run it on the " + req.gpu->name + " today: " + there.text +
                " (`lowbit methods` shows the registry's hardware matrix); serve it on the GPU "
                "with vLLM"
          : "lowbit runs it on the " + req.gpu->name + " with " + there.text;
}

}  // namespace

void build_commands(const RecommendRequest& req, Recommendation& rec) {
  describe_lowbit(req, rec);
  std::string model = req.model.dir.empty() ? "MODEL_DIR" : req.model.dir;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  const bool fp8_kv = rec.kv_cache == "fp8";
  std::string out = model;
  if (rec.scheme != "UNQUANTIZED") {
    out = model + "-" + rec.scheme + (fp8_kv ? "-kvfp8" : "");
    const bool calibrate = (rec.algo != "rtn" && !rec.algo.empty()) || fp8_kv ||
                           rec.facts.calibrated_activations;
    rec.quantize_command = "lowbit quantize " + shell_quote(model) + " -o " + shell_quote(out) +
                           " --scheme " + rec.scheme + algo_flags(rec.algo) +
                           (fp8_kv ? " --kv-cache fp8" : "") +
                           (calibrate ? " --dataset CALIBRATION.jsonl" : "");
  }
  const int64_t seqs = std::max<int64_t>(1, std::min(rec.concurrency, rec.max_sequences));
  const std::string common = " --max-model-len " + std::to_string(rec.context) +
                             " --max-num-seqs " + std::to_string(seqs) +
                             (fp8_kv ? " --kv-cache-dtype fp8" : "");
  rec.vllm_command = "vllm serve " + shell_quote(out);
  if (rec.tensor_parallel > 1) {
    rec.vllm_command += " --tensor-parallel-size " + std::to_string(rec.tensor_parallel);
  }
  if (rec.replicas > 1) rec.vllm_command += " --data-parallel-size " + std::to_string(rec.replicas);
  rec.vllm_command += common;
  if (rec.scheme == "UNQUANTIZED" && req.gpu && req.gpu->vendor == GpuVendor::Nvidia &&
      req.gpu->capability < 80) {
    rec.vllm_command += " --dtype half";  // no bfloat16 before Ampere
  }
  rec.lowbit_command = "lowbit serve " + shell_quote(out) + common;
}

nlohmann::ordered_json recommendation_to_json(const Recommendation& r) {
  nlohmann::ordered_json j;
  j["target"] = r.target;
  j["model"] = {{"params", r.model.params},
                {"layers", r.model.layers},
                {"kv_heads", r.model.kv_heads},
                {"head_dim", r.model.head_dim},
                {"source", r.model.source},
                {"assumed_shape", r.model.assumed_shape}};
  j["branch"] = r.branch;
  j["feasible"] = r.feasible;
  j["scheme"] = r.scheme;
  j["weights"] = r.facts.weight_text;
  j["activations"] = r.facts.activation_text;
  j["bits_per_weight"] = r.facts.bits_per_weight;
  j["algo"] = r.algo;
  j["workload"] = r.workload;
  j["accuracy"] = r.accuracy;
  j["kv_cache"] = r.kv_cache;
  j["context"] = r.context;
  j["concurrency"] = r.concurrency;
  j["memory"] = {{"weight_bytes", r.weight_bytes},
                 {"kv_bytes_per_sequence", r.kv_bytes_per_sequence},
                 {"usable_bytes", r.usable_bytes},
                 {"max_sequences", r.max_sequences},
                 {"tensor_parallel", r.tensor_parallel},
                 {"replicas", r.replicas}};
  j["commands"] = {{"quantize", r.quantize_command},
                   {"vllm_serve", r.vllm_command},
                   {"lowbit_serve", r.lowbit_command}};
  j["reasons"] = nlohmann::ordered_json::array();
  for (const Reason& reason : r.reasons) {
    j["reasons"].push_back({{"step", reason.step}, {"text", reason.text}});
  }
  j["target_support"] = nlohmann::ordered_json::array();
  for (const Verdict& v : r.target_support) {
    j["target_support"].push_back({{"scheme", v.scheme}, {"runs", v.runs}, {"reason", v.reason}});
  }
  if (r.requested) {
    j["requested"] = {{"scheme", r.requested->scheme},
                      {"runs", r.requested->runs},
                      {"reason", r.requested->reason}};
  }
  j["lowbit"] = {{"on_target", r.lowbit_on_target}, {"this_machine", r.lowbit_here}};
  j["assumptions"] = r.assumptions;
  j["warnings"] = r.warnings;
  j["measured"] = r.measured.is_null() ? nlohmann::ordered_json(nullptr) : r.measured;
  return j;
}

std::string recommendation_to_text(const Recommendation& r) {
  std::ostringstream s;
  s << "Target: " << r.target << "\n";
  s << "Workload: " << r.workload << ", " << r.context << "-token context, " << r.concurrency
    << " sequences, " << r.accuracy << " accuracy budget\n\n";
  s << "Recommendation" << (r.feasible ? "" : " (does not fit)") << "\n";
  s << "  scheme     " << r.scheme << ": weights " << r.facts.weight_text << "; activations "
    << r.facts.activation_text << "\n";
  if (!r.algo.empty()) s << "  algorithm  " << r.algo << "\n";
  s << "  KV cache   " << (r.kv_cache == "fp8" ? "fp8 (e4m3, scales calibrated by quantize)"
                                               : "auto (the model's 16-bit dtype)")
    << "\n";
  s << "  memory     weights " << format_bytes(r.weight_bytes) << ", KV "
    << format_bytes(r.kv_bytes_per_sequence) << " per sequence, " << r.max_sequences
    << " sequences fit in " << format_bytes(r.usable_bytes) << " usable";
  if (r.tensor_parallel > 1) s << " (tensor parallel " << r.tensor_parallel << ")";
  if (r.replicas > 1) s << ", " << r.replicas << " replicas";
  s << "\n\n";
  if (!r.quantize_command.empty()) s << "Produce it\n  " << r.quantize_command << "\n";
  s << "Serve it\n  " << r.vllm_command << "\n  " << r.lowbit_command
    << "   (lowbit, this machine's CPU)\n\n";
  s << "Why (seed 004: hardware -> bottleneck -> context -> accuracy, then memory)\n";
  for (const Reason& reason : r.reasons) s << "  " << reason.step << ": " << reason.text << "\n";
  if (r.requested) {
    s << "\nRequested scheme " << r.requested->scheme << ": "
      << (r.requested->runs ? "runs on the target" : "refused: " + r.requested->reason) << "\n";
  }
  s << "\nWhat the target can compute\n  yes:";
  for (const Verdict& v : r.target_support) {
    if (v.runs) s << " " << v.scheme;
  }
  s << "\n";
  // Schemes refused for the same reason share one line.
  std::vector<std::pair<std::string, std::string>> refused;  // (schemes, reason)
  for (const Verdict& v : r.target_support) {
    if (v.runs) continue;
    auto same = std::find_if(refused.begin(), refused.end(),
                             [&](const auto& e) { return e.second == v.reason; });
    if (same == refused.end()) {
      refused.emplace_back(v.scheme, v.reason);
    } else {
      same->first += ", " + v.scheme;
    }
  }
  for (const auto& [schemes, reason] : refused) s << "  no:  " << schemes << " - " << reason << "\n";
  s << "\nWhat lowbit can run today\n  on the target: " << r.lowbit_on_target << "\n"
    << "  here: " << r.lowbit_here << "\n";
  if (!r.warnings.empty()) {
    s << "\nWarnings\n";
    for (const std::string& w : r.warnings) s << "  " << w << "\n";
  }
  s << "\nAssumptions\n";
  for (const std::string& a : r.assumptions) s << "  " << a << "\n";
  s << "\nVerify before serving (seed 004 §6): perplexity, task accuracy and real samples against "
       "the original, e.g. lowbit compare MODEL --schemes "
    << (r.scheme == "UNQUANTIZED" ? "W4A16" : r.scheme) << " ... then --compare its result here\n";
  return s.str();
}

}  // namespace lowbit::eval
