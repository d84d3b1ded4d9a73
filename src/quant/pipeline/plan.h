// What one oneshot run does, in order: the recipe's modifiers reduced to the steps the pipeline
// executes. Like llm-compressor's default "independent" pipeline, each step that needs data is
// its own sequential pass over the layers (SmoothQuant smooths every layer before GPTQ sees any).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "quant/algos/gptq.h"
#include "quant/algos/smoothing.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

struct SmoothQuantStep {
  double smoothing_strength = 0.5;
  bool log_equalization = false;
};

struct AwqStep {
  AwqOptions options;
  // The quantization args AWQ's search fake-quantizes with: the following quantize step's.
};

struct QuantizeStep {
  bool gptq = false;  // false: round-to-nearest (QuantizationModifier)
  GptqOptions gptq_options;
  std::vector<std::pair<std::string, QuantScheme>> groups;  // config_groups, in order
  std::vector<std::string> ignore;
  std::optional<QuantArgs> kv_cache_scheme;
};

using PlanStep = std::variant<SmoothQuantStep, AwqStep, QuantizeStep>;

struct OneshotPlan {
  std::vector<PlanStep> steps;  // exactly one QuantizeStep, last
  const QuantizeStep& quantize() const { return std::get<QuantizeStep>(steps.back()); }
};

}  // namespace lowbit::quant
