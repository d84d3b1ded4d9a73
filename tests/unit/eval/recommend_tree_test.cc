// Seed 004's decision tree as `recommend` implements it: its four scenario recipes, one test per
// branch (hardware, bottleneck, context, accuracy, memory), the refusals, and the choice by
// measurement. Expected schemes are the seed's (/work/shared/seeds/004_*.txt §1-2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eval/recommend.h"
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"

namespace lowbit::eval {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

RecommendRequest request(const std::string& gpu, const std::string& params, int gpus = 1) {
  RecommendRequest r;
  r.host.platform.x86 = r.host.platform.avx2 = r.host.platform.avx512 = true;
  r.host.memory_bytes = 64 * kGiB;
  r.host.description = "test host";
  if (!gpu.empty()) {
    r.gpu = find_gpu(gpu);
    EXPECT_TRUE(r.gpu) << gpu;
  }
  r.num_gpus = gpus;
  r.model = parse_model_params(params, "--model-params");
  return r;
}

std::string reasons_of(const Recommendation& r) {
  std::string s;
  for (const Reason& reason : r.reasons) s += reason.step + ": " + reason.text + "\n";
  return s;
}

bool has_reason(const Recommendation& r, const std::string& step, const std::string& text) {
  for (const Reason& reason : r.reasons) {
    if (reason.step == step && reason.text.find(text) != std::string::npos) return true;
  }
  return false;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- seed 004 §2: the four scenario recipes -----------------------------------------------------

TEST(SeedRecipes, Serving70BOnOneH100IsInt4AwqWithFp8KvCache) {
  const Recommendation r = recommend(request("H100", "70B"));
  EXPECT_EQ(r.scheme, "W4A16") << reasons_of(r);
  EXPECT_EQ(r.algo, "awq");
  EXPECT_EQ(r.kv_cache, "fp8") << reasons_of(r);
  EXPECT_EQ(r.tensor_parallel, 1);
  EXPECT_TRUE(r.feasible);
  // "权重 37G": 70B at 4.125 bits plus 16-bit embeddings and LM head.
  EXPECT_NEAR(r.weight_bytes / 1e9, 39.2, 0.5);
  EXPECT_TRUE(has_reason(r, "bottleneck", "weights dominate")) << reasons_of(r);
  EXPECT_TRUE(contains(r.quantize_command, "--scheme W4A16 --algo awq --kv-cache fp8 --dataset"))
      << r.quantize_command;
  EXPECT_TRUE(contains(r.vllm_command, "--kv-cache-dtype fp8")) << r.vllm_command;
  EXPECT_TRUE(contains(r.vllm_command, "--max-model-len 8192")) << r.vllm_command;
}

TEST(SeedRecipes, HighConcurrency8BChatOnH100sIsFp8W8A8) {
  const Recommendation r = recommend(request("H100", "8B", 8));
  EXPECT_EQ(r.scheme, "FP8_DYNAMIC") << reasons_of(r);
  EXPECT_EQ(r.algo, "rtn");  // seed §4.1: FP8_DYNAMIC needs no calibration set
  EXPECT_EQ(r.kv_cache, "auto");
  EXPECT_EQ(r.tensor_parallel, 1);
  EXPECT_EQ(r.replicas, 8);
  EXPECT_FALSE(contains(r.quantize_command, "--dataset")) << r.quantize_command;
  EXPECT_TRUE(contains(r.vllm_command, "--data-parallel-size 8")) << r.vllm_command;
}

TEST(SeedRecipes, LongDocumentAgentIsInt4PlusFp8KvOrNvfp4OnBlackwell) {
  RecommendRequest hopper = request("H100", "8B");
  hopper.workload = Workload::LongContext;
  hopper.context = 131072;
  const Recommendation h = recommend(hopper);
  EXPECT_EQ(h.scheme, "W4A16") << reasons_of(h);
  EXPECT_EQ(h.kv_cache, "fp8");
  EXPECT_TRUE(contains(h.vllm_command, "--max-model-len 131072")) << h.vllm_command;

  RecommendRequest blackwell = hopper;
  blackwell.gpu = find_gpu("B200");
  const Recommendation b = recommend(blackwell);
  EXPECT_EQ(b.scheme, "NVFP4") << reasons_of(b);
  EXPECT_EQ(b.kv_cache, "fp8");
}

TEST(SeedRecipes, Batch405BOnGb300IsNvfp4) {
  for (int gpus : {1, 72}) {
    RecommendRequest req = request("GB300", "405B", gpus);
    req.workload = Workload::Batch;
    const Recommendation r = recommend(req);
    EXPECT_EQ(r.scheme, "NVFP4") << gpus << "\n" << reasons_of(r);
    EXPECT_EQ(r.branch, "blackwell");
    EXPECT_TRUE(r.feasible);
    if (gpus == 1) {
      EXPECT_EQ(r.tensor_parallel, 1);  // 218 GB of NVFP4 weights in 288 GB
    }
  }
}

// ---- refusals -----------------------------------------------------------------------------------

TEST(Refusals, Nvfp4OnHopperIsRefusedWithTheReason) {
  RecommendRequest req = request("H100", "70B");
  req.scheme = "NVFP4";
  req.accuracy = AccuracyBudget::Aggressive;
  const Recommendation r = recommend(req);
  ASSERT_TRUE(r.requested);
  EXPECT_FALSE(r.requested->runs);
  EXPECT_TRUE(contains(r.requested->reason, "Blackwell")) << r.requested->reason;
  EXPECT_TRUE(contains(r.requested->reason, "sm_90")) << r.requested->reason;
  EXPECT_NE(r.scheme, "NVFP4");
  EXPECT_NE(r.scheme, "MXFP4");
  EXPECT_TRUE(has_reason(r, "request", "--scheme NVFP4 refused")) << reasons_of(r);
  for (const Verdict& v : r.target_support) {
    if (v.scheme == "NVFP4" || v.scheme == "MXFP4") {
      EXPECT_FALSE(v.runs) << v.scheme;
    }
  }
}

TEST(Refusals, Fp8W8A8OnAmpereIsRefusedAndInt8TakesItsPlace) {
  RecommendRequest req = request("A100", "8B");
  req.scheme = "FP8_DYNAMIC";
  req.workload = Workload::Batch;
  const Recommendation r = recommend(req);
  ASSERT_TRUE(r.requested);
  EXPECT_FALSE(r.requested->runs);
  EXPECT_TRUE(contains(r.requested->reason, "FP8 tensor cores")) << r.requested->reason;
  EXPECT_TRUE(contains(r.requested->reason, "weight-only")) << r.requested->reason;
  EXPECT_EQ(r.branch, "ampere-40g");
  EXPECT_EQ(r.scheme, "W8A8") << reasons_of(r);
  EXPECT_EQ(r.algo, "smoothquant+gptq");
  EXPECT_TRUE(contains(r.quantize_command, "--algo gptq --smoothquant 0.8")) << r.quantize_command;
}

TEST(Refusals, ARequestedSchemeThatRunsIsTakenFirst) {
  RecommendRequest req = request("H100", "8B");
  req.scheme = "W8A8";
  const Recommendation r = recommend(req);
  ASSERT_TRUE(r.requested);
  EXPECT_TRUE(r.requested->runs);
  EXPECT_EQ(r.scheme, "W8A8");
}

// ---- hardware branch ----------------------------------------------------------------------------

TEST(HardwareBranch, EachGpuFamilyTakesItsBranch) {
  const std::pair<const char*, const char*> cases[] = {
      {"B200", "blackwell"},     {"RTX 5090", "blackwell"}, {"H100", "hopper-ada"},
      {"L40S", "hopper-ada"},    {"A100", "ampere-40g"},    {"A100-40GB", "ampere-40g"},
      {"A10", "older-gpu"},      {"RTX 3090", "older-gpu"}, {"T4", "older-gpu"},
      {"MI300X", "amd-fp8"},     {"MI250X", "amd"}};
  for (const auto& [gpu, branch] : cases) {
    EXPECT_EQ(recommend(request(gpu, "8B")).branch, branch) << gpu;
  }
  EXPECT_EQ(recommend(request("", "8B")).branch, "cpu");
}

TEST(HardwareBranch, OlderGpusTakeTheIntegerRoute) {
  const Recommendation chat = recommend(request("RTX 3090", "8B"));
  EXPECT_EQ(chat.scheme, "W4A16") << reasons_of(chat);  // memory first: INT4 g128
  RecommendRequest strict = request("T4", "8B");
  strict.accuracy = AccuracyBudget::Strict;
  EXPECT_EQ(recommend(strict).scheme, "W8A8");  // accuracy first: INT8 W8A8
}

TEST(HardwareBranch, GpusBelowEveryKernelKeep16BitWeights) {
  const Recommendation pascal = recommend(request("P100", "1B"));
  EXPECT_EQ(pascal.scheme, "UNQUANTIZED") << reasons_of(pascal);
  EXPECT_TRUE(has_reason(pascal, "hardware", "registry declares compute capability >= 70"))
      << reasons_of(pascal);
  const Recommendation volta = recommend(request("V100", "8B"));
  EXPECT_EQ(volta.scheme, "UNQUANTIZED") << reasons_of(volta);
  EXPECT_TRUE(volta.quantize_command.empty());
  EXPECT_TRUE(contains(volta.vllm_command, "--dtype half")) << volta.vllm_command;
}

TEST(HardwareBranch, AmdUsesFp8WhereItsMatrixCoresHaveIt) {
  RecommendRequest req = request("MI300X", "8B");
  req.workload = Workload::Batch;
  EXPECT_EQ(recommend(req).scheme, "FP8_DYNAMIC");
  req.gpu = find_gpu("MI250X");
  EXPECT_EQ(recommend(req).scheme, "W8A8");
}

TEST(HardwareBranch, CpuTargetRunsOnLowbitsOwnKernels) {
  const Recommendation chat = recommend(request("", "8B"));
  EXPECT_EQ(chat.scheme, "W4A16") << reasons_of(chat);
  EXPECT_TRUE(contains(chat.lowbit_on_target, "wna16")) << chat.lowbit_on_target;
  EXPECT_EQ(chat.lowbit_on_target, chat.lowbit_here);
  RecommendRequest batch = request("", "8B");
  batch.workload = Workload::Batch;
  const Recommendation b = recommend(batch);
  EXPECT_EQ(b.scheme, "W8A8");
  EXPECT_TRUE(contains(b.lowbit_here, "w8a8")) << b.lowbit_here;
  bool nvfp4_listed = false;
  for (const Verdict& v : chat.target_support) {
    if (v.scheme != "NVFP4") continue;
    nvfp4_listed = true;
    EXPECT_FALSE(v.runs);
    EXPECT_TRUE(contains(v.reason, "dequantizing reference")) << v.reason;
  }
  EXPECT_TRUE(nvfp4_listed);
}

TEST(HardwareBranch, GpuTargetsNameTheGpuKernelOfThisBuild) {
  const Recommendation r = recommend(request("H100", "8B"));
  EXPECT_TRUE(contains(r.lowbit_here, "fp8")) << r.lowbit_here;  // FP8_DYNAMIC on the CPU
  if (quant::cuda_backend_built()) {
    // GpuLinear::from's kernel for fp8 weights x dynamic fp8 inputs (gpu_linear_kernels.h).
    EXPECT_TRUE(contains(r.lowbit_on_target, "runs it on the H100 with kernel w8a8_fp8_cuda"))
        << r.lowbit_on_target;
  } else {
    EXPECT_TRUE(contains(r.lowbit_on_target, "built without the CUDA backend"))
        << r.lowbit_on_target;
  }
}

// ---- bottleneck branch --------------------------------------------------------------------------

TEST(BottleneckBranch, BatchTakesW8A8Fp8AndChatDependsOnWhatDominatesMemory) {
  RecommendRequest batch = request("H100", "70B");
  batch.workload = Workload::Batch;
  const Recommendation b = recommend(batch);
  EXPECT_EQ(b.scheme, "FP8_DYNAMIC") << reasons_of(b);
  EXPECT_TRUE(has_reason(b, "bottleneck", "prefill")) << reasons_of(b);
  // The same 70B for chat on one H100 is weight-dominated (INT4); on eight it is not (FP8).
  EXPECT_EQ(recommend(request("H100", "70B")).scheme, "W4A16");
  const Recommendation eight = recommend(request("H100", "70B", 8));
  EXPECT_EQ(eight.scheme, "FP8_DYNAMIC") << reasons_of(eight);
  EXPECT_GE(eight.tensor_parallel, 2);  // 70 GB of weights plus 32 sequences need two
}

// ---- context branch -----------------------------------------------------------------------------

TEST(ContextBranch, LongContextOrTooManySequencesQuantizeTheKvCache) {
  const Recommendation short_ctx = recommend(request("H100", "8B"));
  EXPECT_EQ(short_ctx.kv_cache, "auto");
  EXPECT_TRUE(has_reason(short_ctx, "context", "no KV quantization needed")) << reasons_of(short_ctx);
  RecommendRequest long_ctx = request("H100", "8B");
  long_ctx.context = 32768;
  const Recommendation l = recommend(long_ctx);
  EXPECT_EQ(l.kv_cache, "fp8");
  EXPECT_TRUE(has_reason(l, "context", ">= 32K")) << reasons_of(l);
  RecommendRequest busy = request("H100", "8B");
  busy.concurrency = 128;  // 128 x 1 GB of 16-bit KV does not fit next to 8.5 GB of weights
  const Recommendation c = recommend(busy);
  EXPECT_EQ(c.kv_cache, "fp8") << reasons_of(c);
  EXPECT_TRUE(has_reason(c, "context", "holds only")) << reasons_of(c);
}

// ---- accuracy branch ----------------------------------------------------------------------------

TEST(AccuracyBranch, BudgetReordersTheCandidates) {
  RecommendRequest strict = request("H100", "8B");
  strict.workload = Workload::LongContext;
  strict.accuracy = AccuracyBudget::Strict;
  const Recommendation s = recommend(strict);
  EXPECT_EQ(s.scheme, "FP8_DYNAMIC") << reasons_of(s);
  EXPECT_EQ(s.kv_cache, "fp8");
  EXPECT_FALSE(s.warnings.empty());  // strict + FP8 KV: verify near the context limit

  RecommendRequest aggressive = request("H100", "8B");
  aggressive.accuracy = AccuracyBudget::Aggressive;
  EXPECT_EQ(recommend(aggressive).scheme, "W4A16");

  RecommendRequest hopper_batch = request("H100", "8B");
  hopper_batch.workload = Workload::Batch;
  hopper_batch.accuracy = AccuracyBudget::Aggressive;
  EXPECT_EQ(recommend(hopper_batch).scheme, "W4AFP8");

  RecommendRequest blackwell = request("B200", "8B");
  blackwell.accuracy = AccuracyBudget::Aggressive;
  EXPECT_EQ(recommend(blackwell).scheme, "MXFP4");
  blackwell.accuracy = AccuracyBudget::Strict;
  EXPECT_EQ(recommend(blackwell).scheme, "FP8_DYNAMIC");
}

// ---- memory branch ------------------------------------------------------------------------------

TEST(MemoryBranch, ACandidateThatDoesNotFitGivesWayToTheNext) {
  RecommendRequest req = request("H100", "70B");
  req.accuracy = AccuracyBudget::Strict;
  req.context = 131072;  // FP8 weights (68 GB) + one 128K sequence (20 GB of FP8 KV) > 72 GB
  const Recommendation r = recommend(req);
  EXPECT_EQ(r.scheme, "W4A16") << reasons_of(r);
  EXPECT_TRUE(has_reason(r, "memory", "FP8_DYNAMIC does not fit")) << reasons_of(r);
  EXPECT_TRUE(has_reason(r, "memory", "fits on one GPU")) << reasons_of(r);
}

TEST(MemoryBranch, NothingFitsOnOneGpuAsksForTensorParallelism) {
  const Recommendation r = recommend(request("H100", "405B"));
  EXPECT_EQ(r.scheme, "W4A16") << reasons_of(r);
  EXPECT_EQ(r.tensor_parallel, 4);  // ~200 GB of INT4 weights, 72 GB usable per GPU
  EXPECT_TRUE(has_reason(r, "memory", "tensor parallelism over 4")) << reasons_of(r);
  EXPECT_TRUE(contains(r.vllm_command, "--tensor-parallel-size 4")) << r.vllm_command;
  ASSERT_FALSE(r.warnings.empty());
}

TEST(Commands, UseTheModelDirectoryWhenGiven) {
  RecommendRequest req = request("H100", std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m");
  const Recommendation r = recommend(req);
  EXPECT_TRUE(contains(r.quantize_command, "models/ref-llama-19m -o ")) << r.quantize_command;
  EXPECT_TRUE(contains(r.lowbit_command, "lowbit serve ")) << r.lowbit_command;
  EXPECT_TRUE(contains(r.vllm_command, "--max-model-len 2048")) << r.vllm_command;  // its limit
  const nlohmann::ordered_json j = recommendation_to_json(r);
  EXPECT_EQ(j["scheme"], r.scheme);
  EXPECT_EQ(j["model"]["params"].get<double>(), r.model.params);
  EXPECT_FALSE(j["reasons"].empty());
  const std::string text = recommendation_to_text(r);
  EXPECT_TRUE(contains(text, "What the target can compute")) << text;
  EXPECT_TRUE(contains(text, "What lowbit can run today")) << text;
}

// ---- choosing by measurement (a compare.json written by hand in lowbit-compare/1) --------------

// Baseline perplexity 20; delta_ppl = ppl / 20 - 1 as the format requires.
CompareResult measured(bool only_int4 = false, bool int4_pitfall = false) {
  nlohmann::json j = {
      {"format", "lowbit-compare/1"},
      {"model", "models/ref-llama-19m"},
      {"created", "2026-11-29T18:30:00Z"},
      {"protocol", {{"ppl_text", "data/text/heldout.txt"}, {"ctx", 512}}},
      {"baseline", {{"name", "BF16"}, {"size_bytes", 37761792}, {"bits_per_weight", 16},
                    {"ppl", 20.0}}}};
  auto row = [](const char* scheme, const char* algo, double bits, double ppl, double kld) {
    return nlohmann::json{{"scheme", scheme}, {"algo", algo}, {"kv_cache", "auto"},
                          {"size_bytes", 1000000}, {"bits_per_weight", bits}, {"ppl", ppl},
                          {"delta_ppl", ppl / 20.0 - 1}, {"kld_mean", kld}};
  };
  j["schemes"] = nlohmann::json::array();
  if (!only_int4) {
    // W8A8 first: the tie at 8 bits must be broken by KLD, not by order.
    j["schemes"].push_back(row("W8A8", "gptq", 8.0, 20.16, 0.009));
    j["schemes"].push_back(row("FP8_DYNAMIC", "rtn", 8.0, 20.08, 0.004));
    j["schemes"].push_back(row("NVFP4", "rtn", 4.5, 20.18, 0.008));
  }
  j["schemes"].push_back(row("W4A16", "gptq", 4.125, 20.42, 0.03));
  if (int4_pitfall) {
    j["schemes"].back()["pitfalls"] = {
        {{"kind", "repetitive_outputs"}, {"message", "outputs repeat more than the baseline's"}}};
  }
  j["schemes"].push_back(row("W4A16", "rtn", 4.125, 21.2, 0.12));
  return CompareResult::from_json(j, "compare.json");
}

Recommendation with_measurements(const char* gpu, AccuracyBudget accuracy,
                                 Workload workload = Workload::Chat, bool only_int4 = false,
                                 bool int4_pitfall = false) {
  RecommendRequest req = request(gpu, "8B");
  req.accuracy = accuracy;
  req.workload = workload;
  req.compare = measured(only_int4, int4_pitfall);
  req.compare_path = "compare.json";
  return recommend(req);
}

TEST(Measurement, PicksTheSmallestSchemeWithinTheBudgetThatTheGpuRuns) {
  // The tree alone says FP8_DYNAMIC for 8B chat on an H100; the measurements show W4A16 GPTQ is
  // within the balanced budget (+2.1% <= 3%, KLD 0.03 <= 0.05) and smaller. NVFP4 measured
  // better still but the H100 cannot compute it.
  const Recommendation r = with_measurements("H100", AccuracyBudget::Balanced);
  EXPECT_EQ(r.scheme, "W4A16") << reasons_of(r);
  EXPECT_EQ(r.algo, "gptq");
  EXPECT_TRUE(has_reason(r, "measurement", "W4A16 (gptq) chosen by measurement")) << reasons_of(r);
  EXPECT_TRUE(has_reason(r, "measurement", "ΔPPL +2.10% <= 3.00%, KLD 0.03 <= 0.05"))
      << reasons_of(r);
  EXPECT_EQ(r.measured["chosen"], "W4A16");
  const std::string nvfp4 = r.measured["schemes"][2]["verdict"].get<std::string>();
  EXPECT_EQ(nvfp4.rfind("refused by the target", 0), 0u) << nvfp4;
  const std::string rtn = r.measured["schemes"][4]["verdict"].get<std::string>();
  EXPECT_EQ(rtn.rfind("over the budget", 0), 0u) << rtn;
}

TEST(Measurement, TheBudgetAndTheHardwareChangeThePick) {
  // strict (1% / 0.01): only the 8-bit schemes pass on an H100; equal bits, lower KLD wins.
  const Recommendation strict = with_measurements("H100", AccuracyBudget::Strict);
  EXPECT_EQ(strict.scheme, "FP8_DYNAMIC") << reasons_of(strict);
  EXPECT_EQ(strict.algo, "rtn");
  // On Blackwell NVFP4 (+0.9%, KLD 0.008) passes strict and is smaller than FP8.
  EXPECT_EQ(with_measurements("B200", AccuracyBudget::Strict).scheme, "NVFP4");
  // aggressive (5% / 0.10): W4A16 GPTQ passes, W4A16 RTN (+6%) does not.
  const Recommendation aggressive = with_measurements("H100", AccuracyBudget::Aggressive);
  EXPECT_EQ(aggressive.scheme, "W4A16");
  EXPECT_EQ(aggressive.algo, "gptq");
  // batch: weight-only schemes do not speed up prefill, so W4A16 is out.
  const Recommendation batch =
      with_measurements("H100", AccuracyBudget::Balanced, Workload::Batch);
  EXPECT_EQ(batch.scheme, "FP8_DYNAMIC") << reasons_of(batch);
}

TEST(Measurement, ASchemeWithReportedPitfallsLosesToACleanOne) {
  const Recommendation r = with_measurements("H100", AccuracyBudget::Balanced, Workload::Chat,
                                             /*only_int4=*/false, /*int4_pitfall=*/true);
  EXPECT_EQ(r.scheme, "FP8_DYNAMIC") << reasons_of(r);
  EXPECT_EQ(r.measured["schemes"][3]["pitfalls"][0],
            "repetitive_outputs: outputs repeat more than the baseline's");
}

TEST(Measurement, NothingWithinTheBudgetFallsBackToTheTreeAndSaysSo) {
  const Recommendation r =
      with_measurements("H100", AccuracyBudget::Strict, Workload::Chat, /*only_int4=*/true);
  EXPECT_TRUE(r.measured["chosen"].is_null());
  EXPECT_TRUE(has_reason(r, "measurement", "none of the 2 measured schemes")) << reasons_of(r);
  EXPECT_EQ(r.scheme, "FP8_DYNAMIC");  // the tree's strict choice for 8B on an H100
}

}  // namespace
}  // namespace lowbit::eval
