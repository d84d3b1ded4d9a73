// The decision tree of seed 004 §1 (hardware → bottleneck → context → accuracy budget), the memory
// check ("does it fit"), and the command lines that produce and serve the result. Every choice
// appends a Reason; the report prints them in order.
#include "eval/recommend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

constexpr double kGpuUtilization = 0.9;   // vLLM's --gpu-memory-utilization default
constexpr double kHostUtilization = 0.8;  // host RAM: the OS and activations need the rest
constexpr int64_t kLongContext = 32768;   // seed 004: "32K+ → FP8 KV cache"
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

enum class Branch { Blackwell, HopperAda, Ampere40, OlderGpu, AmdFp8, Amd, Cpu };

const char* branch_id(Branch b) {
  switch (b) {
    case Branch::Blackwell: return "blackwell";
    case Branch::HopperAda: return "hopper-ada";
    case Branch::Ampere40: return "ampere-40g";
    case Branch::OlderGpu: return "older-gpu";
    case Branch::AmdFp8: return "amd-fp8";
    case Branch::Amd: return "amd";
    case Branch::Cpu: return "cpu";
  }
  return "?";
}

// What every step reads.
struct Plan {
  const RecommendRequest& req;
  Branch branch = Branch::Cpu;
  double per_gpu_usable = 0;  // bytes (the host's usable RAM for a CPU target)
  int64_t context = 0;
  double kv16 = 0;  // KV bytes per token at 16 bits
  double kv8 = 0;
  int gpus() const { return req.gpu ? req.num_gpus : 1; }
  double weights(const std::string& scheme) const {
    return weight_bytes(req.model, scheme_facts(scheme).bits_per_weight);
  }
  // Weights plus `sequences` full-length sequences' KV cache at `kv` bytes per token, on n GPUs.
  bool fits(double weights, int n, double sequences, double kv) const {
    return weights + sequences * static_cast<double>(context) * kv <= n * per_gpu_usable;
  }
};

std::string gb(double bytes) { return format_bytes(bytes); }
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f", v);
  return text;
}

Verdict verdict_for(const Plan& plan, const SchemeFacts& f) {
  Verdict v{f.name, false, ""};
  if (plan.req.gpu) {
    const Support s = target_support(f, *plan.req.gpu);
    v.runs = s.runs;
    v.reason = s.reason;
    return v;
  }
  const LowbitKernel k = lowbit_kernel(f, plan.req.host.platform);
  v.runs = !k.kernel.empty() && !k.dequant_only;
  if (k.dequant_only) {
    v.reason = "only lowbit's dequantizing reference kernel runs it on a CPU (no FP4/MX "
               "arithmetic there): no memory or speed gain at run time";
  } else if (f.cpu_kernel == "fp8" && f.quantizes_activations()) {
    v.reason = "fp8 kernel: FP8 weights; the FP8 activations are emulated in fp32 (CPUs have no "
               "FP8 arithmetic), so it saves memory but not compute";
  } else {
    v.reason = k.text;
  }
  return v;
}

Branch classify(const RecommendRequest& r, std::vector<Reason>& reasons) {
  if (!r.gpu) {
    reasons.push_back({"hardware", "no GPU: recommending for this machine's CPU (" +
                                       r.host.description + "), where lowbit itself runs the "
                                       "result. CPUs have no FP8 or FP4 arithmetic, so the seed's "
                                       "integer route applies"});
    return Branch::Cpu;
  }
  const GpuSpec& g = *r.gpu;
  if (g.vendor == GpuVendor::Amd) {
    reasons.push_back(
        {"hardware", g.name + " (AMD " + g.architecture + ", ROCm): not in seed 004's tree; its "
                     "matrix marks llm-compressor FP8 W8A8 as supported on AMD" +
                         std::string(g.amd_fp8 ? "" : ", but this GPU predates FP8 matrix cores "
                                                      "(CDNA 3), so the integer route applies") +
                         ". lowbit writes compressed-tensors, whose int schemes vLLM runs on "
                         "ROCm through Triton kernels"});
    return g.amd_fp8 ? Branch::AmdFp8 : Branch::Amd;
  }
  const std::string id = g.name + " (" + g.architecture + ", sm_" + std::to_string(g.capability);
  if (g.capability >= 100) {
    reasons.push_back({"hardware", id + "): Blackwell has FP4 tensor cores; seed 004 goes "
                                        "straight to NVFP4 or MXFP4 ('有 Blackwell 就上 NVFP4'), "
                                        "choosing NVFP4 when accuracy matters"});
    return Branch::Blackwell;
  }
  if (g.capability >= 89) {
    reasons.push_back({"hardware", id + "): FP8 tensor cores; the seed's Hopper/Ada branch: FP8 "
                                        "or INT4 depending on the bottleneck"});
    return Branch::HopperAda;
  }
  if (g.capability >= 80 && g.memory_gb >= 40) {
    reasons.push_back({"hardware", id + ", " + num(g.memory_gb) + " GB): the seed puts 'A100 "
                                        "40G+' in its Hopper/Ada branch, but Ampere has no FP8 "
                                        "tensor cores (the seed's own matrix), so INT8 W8A8 "
                                        "(SmoothQuant + GPTQ) takes FP8 W8A8's place"});
    return Branch::Ampere40;
  }
  reasons.push_back({"hardware", id + ", " + num(g.memory_gb) + " GB): an older or smaller GPU "
                                      "without FP8 tensor cores, the seed's 'V100/T4/RTX' branch: "
                                      "INT4 g128 when memory comes first, INT8 W8A8 when "
                                      "accuracy does"});
  return Branch::OlderGpu;
}

// Hopper/Ada, Ampere 40G+ and FP8-capable AMD: bottleneck, then accuracy.
std::vector<std::string> fp8_tier_candidates(const Plan& plan, const std::string& w8,
                                             std::vector<Reason>& reasons) {
  const RecommendRequest& r = plan.req;
  const bool hopper = r.gpu && r.gpu->vendor == GpuVendor::Nvidia && r.gpu->capability == 90;
  std::vector<std::string> order;
  if (r.workload == Workload::Batch) {
    order = {w8, hopper ? "W4AFP8" : "W4A8", "W4A16"};
    reasons.push_back({"bottleneck", "batch: prefill/throughput-bound, the seed's branch 'W8A8 "
                                     "FP8': 8-bit activations put the large prefill matmuls on "
                                     "8-bit tensor cores, where weight-only INT4 gains little "
                                     "(seed §7: TTFT)" +
                                         std::string(w8 == "W8A8" ? "; here as INT8 W8A8" : "")});
    if (r.accuracy == AccuracyBudget::Aggressive && hopper) {
      order = {"W4AFP8", w8, "W4A16"};
      reasons.push_back({"accuracy", "aggressive on Hopper: W4AFP8 keeps FP8 compute with 4-bit "
                                     "weights (vLLM's sm_90 W4A8-FP8 kernel)"});
    } else {
      reasons.push_back({"accuracy", std::string(accuracy_name(r.accuracy)) +
                                         ": the prefill branch needs activation quantization "
                                         "whatever the budget; 8-bit is its most accurate form"});
    }
    return order;
  }
  if (r.workload == Workload::LongContext) {
    order = {"W4A16", w8};
    reasons.push_back({"bottleneck", "long context: the KV cache is the largest item (seed "
                                     "recipe '128K 长文档 Agent': INT4 + FP8 KV cache, 'KV 是绝对"
                                     "大头'), so INT4 weights leave it the most memory"});
  } else {
    const double w8_bytes = plan.weights(w8);
    const bool room = plan.fits(w8_bytes, plan.gpus(), static_cast<double>(r.concurrency),
                                plan.kv16);
    if (room) {
      order = {w8, "W4A16"};
      reasons.push_back({"bottleneck", "chat: decode-bound, but 8-bit weights (" + gb(w8_bytes) +
                                           ") leave room for " + std::to_string(r.concurrency) +
                                           " sequences of " + std::to_string(plan.context) +
                                           " tokens with a 16-bit KV cache: the seed's rule "
                                           "'能用 FP8 就别折腾 INT' and its 8B high-concurrency "
                                           "recipe (FP8 W8A8: near lossless, gains in prefill and "
                                           "decode)"});
    } else {
      order = {"W4A16", w8};
      reasons.push_back({"bottleneck", "chat: decode-bound and the weights dominate memory (8-bit "
                                       "weights: " + gb(w8_bytes) + " would not leave room for " +
                                       std::to_string(r.concurrency) + " sequences of " +
                                       std::to_string(plan.context) + " tokens): the seed's "
                                       "decode branch, INT4 W4A16 (AWQ/GPTQ + Marlin), halves the "
                                       "bytes each decode step reads (its 70B-on-one-H100 "
                                       "recipe)"});
    }
  }
  if (r.accuracy == AccuracyBudget::Strict && order.front() != w8) {
    std::swap(order[0], order[1]);
    reasons.push_back({"accuracy", "strict: seed §1 Q4, 'the tighter the budget, FP8 first, then "
                                   "AWQ/GPTQ g128': " + w8 + " first if it fits"});
  } else if (r.accuracy == AccuracyBudget::Aggressive && order.front() != "W4A16") {
    std::swap(order[0], order[1]);
    reasons.push_back({"accuracy", "aggressive: the smallest scheme the GPU runs well, INT4 "
                                   "W4A16 (4.125 bits), instead of 8-bit weights"});
  } else {
    reasons.push_back({"accuracy", std::string(accuracy_name(r.accuracy)) + ": " + order.front() +
                                       " stays (never 2-bit: seed §1 Q4)"});
  }
  return order;
}

// Older GPUs, AMD without FP8, CPUs: the integer route (seed: "显存优先 INT4 g128, 精度优先 INT8
// W8A8").
std::vector<std::string> int_route_candidates(const Plan& plan, std::vector<Reason>& reasons) {
  const RecommendRequest& r = plan.req;
  const bool accuracy_first = r.accuracy == AccuracyBudget::Strict ||
                              (r.workload == Workload::Batch &&
                               r.accuracy == AccuracyBudget::Balanced);
  reasons.push_back({"bottleneck", std::string(workload_name(r.workload)) + ": " +
                                       (r.workload == Workload::Batch
                                            ? "prefill-bound: INT8 W8A8 computes in int8"
                                            : "decode/memory-bound: each token reads the "
                                              "weights, 4x fewer bytes in INT4 than in 16 bits")});
  if (accuracy_first) {
    reasons.push_back({"accuracy", std::string(accuracy_name(r.accuracy)) +
                                       ": accuracy first, the seed's INT8 W8A8 (SmoothQuant + "
                                       "GPTQ)"});
    return {"W8A8", "W4A16"};
  }
  reasons.push_back({"accuracy", std::string(accuracy_name(r.accuracy)) +
                                     ": memory first, the seed's INT4 g128 (W4A16)"});
  return {"W4A16", "W8A8"};
}

std::vector<std::string> blackwell_candidates(const Plan& plan, std::vector<Reason>& reasons) {
  const RecommendRequest& r = plan.req;
  reasons.push_back({"bottleneck", std::string(workload_name(r.workload)) + ": not asked on "
                                       "Blackwell, W4A4 FP4 speeds up prefill (FP4 tensor cores) "
                                       "and decode (4-bit weights) alike"});
  switch (r.accuracy) {
    case AccuracyBudget::Strict:
      reasons.push_back({"accuracy", "strict: seed §1 Q4 'FP8/NVFP4 first': FP8 W8A8 if it fits, "
                                     "NVFP4 otherwise"});
      return {"FP8_DYNAMIC", "NVFP4", "W4A16"};
    case AccuracyBudget::Balanced:
      reasons.push_back({"accuracy", "balanced: NVFP4 ('精度敏感选 NVFP4': FP8 scales per 16 "
                                     "values, finer than MXFP4's power-of-two scales per 32)"});
      return {"NVFP4", "MXFP4", "W4A16"};
    case AccuracyBudget::Aggressive:
      reasons.push_back({"accuracy", "aggressive: MXFP4 (4.25 bits per weight against NVFP4's "
                                     "4.5), the seed's alternative when accuracy is not the "
                                     "concern"});
      return {"MXFP4", "NVFP4", "W4A16"};
  }
  return {};
}

std::vector<std::string> tree_candidates(const Plan& plan, std::vector<Reason>& reasons) {
  switch (plan.branch) {
    case Branch::Blackwell: return blackwell_candidates(plan, reasons);
    case Branch::HopperAda:
    case Branch::AmdFp8: return fp8_tier_candidates(plan, "FP8_DYNAMIC", reasons);
    case Branch::Ampere40: return fp8_tier_candidates(plan, "W8A8", reasons);
    default: return int_route_candidates(plan, reasons);
  }
}

// Tensor parallelism: the smallest power of two within `limit` GPUs that holds the weights and
// every sequence; else the largest within the limit that holds the weights and one sequence; else
// the smallest beyond it that does (the report then asks for more GPUs).
int tensor_parallel(const Plan& plan, double weights, double kv, int limit) {
  int largest = 1;
  while (largest * 2 <= limit) largest *= 2;
  for (int t = 1; t <= largest; t *= 2) {
    if (plan.fits(weights, t, static_cast<double>(plan.req.concurrency), kv)) return t;
  }
  int t = largest;
  while (!plan.fits(weights, t, 1, kv) && t < (1 << 20)) t *= 2;
  return t;
}

std::string default_algo(const std::string& scheme) {
  if (scheme == "W4A16" || scheme == "W4A16_ASYM") return "awq";
  if (scheme == "W8A8" || scheme == "W4A8") return "smoothquant+gptq";
  if (scheme == "W8A16" || scheme == "W4AFP8") return "gptq";
  return "rtn";  // FP8 (seed §4.1: no calibration needed for FP8_DYNAMIC), NVFP4, MXFP4
}

}  // namespace

// Defined in recommend_report.cc.
void build_commands(const RecommendRequest& request, Recommendation& rec);

HostTarget this_machine() {
  HostTarget h;
  h.platform = quant::Platform::current();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  h.memory_bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * page : 0;
  h.description = h.platform.describe() + ", " + format_bytes(h.memory_bytes) + " RAM";
  return h;
}

namespace {

// Walks the candidates: refused by the hardware → next; does not fit → next. Returns the chosen
// scheme, or the smallest runnable one when none fits (then tensor parallelism must grow).
std::string choose(const Plan& plan, const std::vector<std::string>& candidates,
                   std::vector<Reason>& reasons) {
  std::string smallest;
  for (const std::string& c : candidates) {
    const SchemeFacts f = scheme_facts(c);
    const Verdict v = verdict_for(plan, f);
    if (!v.runs) {
      reasons.push_back({"hardware", c + " refused: " + v.reason});
      continue;
    }
    const double w = plan.weights(c);
    if (plan.fits(w, plan.gpus(), 1, plan.kv8)) return c;
    reasons.push_back({"memory", c + " does not fit: weights " + gb(w) + " + one " +
                                     std::to_string(plan.context) + "-token sequence > " +
                                     gb(plan.gpus() * plan.per_gpu_usable) + " usable"});
    if (smallest.empty() || f.bits_per_weight < scheme_facts(smallest).bits_per_weight) {
      smallest = c;
    }
  }
  return smallest;
}

void decide_kv_cache(const Plan& plan, Recommendation& rec) {
  const RecommendRequest& r = plan.req;
  const double room = rec.tensor_parallel * plan.per_gpu_usable - rec.weight_bytes;
  const double per_seq16 = static_cast<double>(plan.context) * plan.kv16;
  const int64_t seqs16 = room > 0 ? static_cast<int64_t>(room / per_seq16) : 0;
  if (plan.context >= kLongContext) {
    rec.kv_cache = "fp8";
    rec.reasons.push_back({"context", std::to_string(plan.context) + " tokens >= 32K: seed 004 "
                                      "'长上下文必加 KV 量化', FP8 KV cache on top of the weights"});
  } else if (r.workload == Workload::LongContext) {
    rec.kv_cache = "fp8";
    rec.reasons.push_back({"context", "long-context workload: FP8 KV cache (the seed's "
                                      "long-context branch)"});
  } else if (seqs16 < r.concurrency) {
    rec.kv_cache = "fp8";
    rec.reasons.push_back({"context", "a 16-bit KV cache holds only " + std::to_string(seqs16) +
                                          " of the " + std::to_string(r.concurrency) +
                                          " sequences next to the weights; FP8 halves it (seed: "
                                          "'32K+ 或并发要求高 → 必须加 KV Cache 量化')"});
  } else {
    rec.reasons.push_back({"context", std::to_string(plan.context) + " tokens, and a 16-bit KV "
                                      "cache holds " + std::to_string(seqs16) + " sequences >= " +
                                      std::to_string(r.concurrency) + ": no KV quantization "
                                      "needed"});
  }
  const double kv = rec.kv_cache == "fp8" ? plan.kv8 : plan.kv16;
  rec.kv_bytes_per_sequence = static_cast<double>(plan.context) * kv;
  rec.max_sequences = room > 0 ? static_cast<int64_t>(room / rec.kv_bytes_per_sequence) : 0;
  if (rec.max_sequences < r.concurrency) {
    rec.warnings.push_back("only " + std::to_string(rec.max_sequences) + " sequences of " +
                           std::to_string(plan.context) + " tokens fit next to the weights (" +
                           std::to_string(r.concurrency) + " asked): lower the concurrency or "
                           "add GPUs");
  }
  if (rec.kv_cache == "fp8" && r.accuracy == AccuracyBudget::Strict) {
    rec.warnings.push_back("strict budget with an FP8 KV cache: its failures show near the "
                           "context limit (seed §6.3); verify there, and keep sensitive layers "
                           "in 16 bits with --kv-cache-dtype-skip-layers if needed (§8)");
  }
}

}  // namespace

Recommendation recommend(const RecommendRequest& req) {
  LOWBIT_CHECK(req.model.params > 0 && req.model.layers > 0, "recommend: the model has no shape");
  LOWBIT_CHECK(req.num_gpus >= 1, "--num-gpus must be at least 1");
  LOWBIT_CHECK(req.concurrency >= 1, "--concurrency must be at least 1");
  Recommendation rec;
  Plan plan{req};
  plan.context = req.context > 0 ? req.context
                                 : (req.workload == Workload::LongContext ? 131072 : 8192);
  const bool capped =
      req.context == 0 && req.model.max_context > 0 && plan.context > req.model.max_context;
  if (capped) plan.context = req.model.max_context;
  plan.kv16 = kv_bytes_per_token(req.model, 2);
  plan.kv8 = kv_bytes_per_token(req.model, 1);
  plan.per_gpu_usable = req.gpu ? req.gpu->memory_gb * kGiB * kGpuUtilization
                                : req.host.memory_bytes * kHostUtilization;
  rec.context = plan.context;
  rec.model = req.model;
  rec.workload = workload_name(req.workload);
  rec.accuracy = accuracy_name(req.accuracy);
  rec.concurrency = req.concurrency;
  rec.target = req.gpu ? std::to_string(req.num_gpus) + " x " + describe_gpu(*req.gpu)
                       : "this machine's CPU: " + req.host.description;
  rec.assumptions.push_back("model: " + req.model.source);
  if (capped) {
    rec.assumptions.push_back("context: " + std::to_string(plan.context) + " tokens, the model's "
                              "max_position_embeddings (--context sets it)");
  }
  rec.assumptions.push_back(
      req.gpu ? "usable memory: 90% of each GPU (vLLM's --gpu-memory-utilization default)"
              : "usable memory: 80% of this machine's RAM");
  rec.assumptions.push_back("KV cache: context x layers x KV heads x head_dim x 2 (K and V) x "
                            "bytes per value; activations and CUDA graphs not counted");
  if (req.context > 0 && req.model.max_context > 0 && req.context > req.model.max_context) {
    rec.warnings.push_back("--context " + std::to_string(req.context) + " exceeds the model's " +
                           "max_position_embeddings " + std::to_string(req.model.max_context));
  }
  for (const std::string& p : recommend_presets()) {
    rec.target_support.push_back(verdict_for(plan, scheme_facts(p)));
  }

  plan.branch = classify(req, rec.reasons);
  rec.branch = branch_id(plan.branch);
  std::vector<std::string> candidates = tree_candidates(plan, rec.reasons);
  std::string algo;
  std::optional<size_t> measured;
  if (!req.scheme.empty()) {
    const Verdict v = verdict_for(plan, scheme_facts(req.scheme));
    rec.requested = v;
    if (v.runs) {
      candidates.insert(candidates.begin(), v.scheme);
      rec.reasons.push_back({"request", "--scheme " + v.scheme + " runs on the target: checked "
                                        "before the tree's own choice"});
    } else {
      rec.reasons.push_back({"request", "--scheme " + v.scheme + " refused: " + v.reason});
    }
  }
  if (req.compare) {
    MeasuredChecks checks;
    checks.runs = [&](const SchemeFacts& f) { return verdict_for(plan, f); };
    checks.fits = [&](double bits) {
      return plan.fits(weight_bytes(req.model, bits), plan.gpus(), 1, plan.kv8);
    };
    measured =
        pick_measured(*req.compare, req.compare_path.empty() ? "compare.json" : req.compare_path,
                      req.accuracy, req.workload, checks, rec.measured, rec.reasons);
    if (measured) {
      const CompareScheme& m = req.compare->schemes[*measured];
      candidates.insert(candidates.begin(), scheme_facts(m.scheme).name);
      algo = m.algo;
    }
  }

  rec.scheme = choose(plan, candidates, rec.reasons);
  if (rec.scheme.empty()) {
    rec.scheme = "UNQUANTIZED";
    rec.reasons.push_back({"hardware", "no quantized scheme of the tree runs on the target: keep "
                                       "the checkpoint's 16-bit weights"});
  }
  rec.facts = scheme_facts(rec.scheme);
  rec.algo = rec.scheme == "UNQUANTIZED" ? "" : algo.empty() ? default_algo(rec.scheme)
                                                             : algo;
  rec.weight_bytes = weight_bytes(req.model, rec.facts.bits_per_weight);
  const int limit = plan.gpus();
  rec.tensor_parallel = req.gpu ? tensor_parallel(plan, rec.weight_bytes, plan.kv8, limit) : 1;
  rec.replicas = std::max(1, limit / rec.tensor_parallel);
  rec.feasible = plan.fits(rec.weight_bytes, rec.tensor_parallel, 1, plan.kv8);
  rec.usable_bytes = rec.tensor_parallel * plan.per_gpu_usable;
  if (!rec.feasible) {
    rec.warnings.push_back("even " + rec.scheme + " (" + gb(rec.weight_bytes) + ") does not fit " +
                           "this machine's memory");
  } else if (rec.tensor_parallel > limit) {
    rec.reasons.push_back({"memory", "does not fit on " + std::to_string(limit) + " GPU(s): " +
                                         rec.scheme + " needs tensor parallelism over " +
                                         std::to_string(rec.tensor_parallel)});
    rec.warnings.push_back("needs " + std::to_string(rec.tensor_parallel) + " GPUs, " +
                           std::to_string(limit) + " given (--num-gpus)");
  } else {
    rec.reasons.push_back(
        {"memory", (rec.tensor_parallel == 1 && req.gpu ? "fits on one GPU: " : "fits: ") +
                       rec.scheme + " weights " + gb(rec.weight_bytes) + " of " +
                       gb(rec.usable_bytes) + " usable" +
                       (rec.tensor_parallel > 1
                            ? " (tensor parallel over " + std::to_string(rec.tensor_parallel) + ")"
                            : "") +
                       (rec.replicas > 1 ? ", " + std::to_string(rec.replicas) + " replicas" : "")});
  }
  decide_kv_cache(plan, rec);
  if (measured && req.compare->schemes[*measured].scheme == rec.scheme &&
      (req.compare->schemes[*measured].kv_cache == "fp8") != (rec.kv_cache == "fp8")) {
    rec.warnings.push_back("the measurement of " + rec.scheme + " used KV cache '" +
                           req.compare->schemes[*measured].kv_cache + "', the recommendation '" +
                           rec.kv_cache + "': measure that combination too (lowbit compare "
                           "--kv-cache fp8)");
  }
  build_commands(req, rec);
  // Report the reasons in the tree's order, whatever order the code reached them in.
  const std::vector<std::string> order = {"hardware", "request", "bottleneck", "context",
                                          "accuracy", "measurement", "memory"};
  auto rank = [&](const Reason& reason) {
    return std::find(order.begin(), order.end(), reason.step) - order.begin();
  };
  std::stable_sort(rec.reasons.begin(), rec.reasons.end(),
                   [&](const Reason& a, const Reason& b) { return rank(a) < rank(b); });
  return rec;
}

}  // namespace lowbit::eval
