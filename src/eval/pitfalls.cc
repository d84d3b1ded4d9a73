#include "eval/pitfalls.h"

#include <algorithm>
#include <cstdio>

#include "models/model.h"

namespace lowbit::eval {
namespace {

std::string format(const char* spec, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), spec, value);
  return buffer;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

void add_kernel(const models::Linear& linear, std::vector<std::string>& kernels) {
  if (!linear.method) return;
  const std::string name = linear.method->kernel_name();
  if (std::find(kernels.begin(), kernels.end(), name) == kernels.end()) kernels.push_back(name);
}

}  // namespace

std::vector<std::string> linear_kernels(const models::Model& model) {
  std::vector<std::string> kernels;
  for (const models::LayerWeights& layer : model.weights().layers) {
    for (const models::Linear* linear : {&layer.attention.q, &layer.attention.k, &layer.attention.v,
                                         &layer.attention.o, &layer.mlp.gate, &layer.mlp.up,
                                         &layer.mlp.down}) {
      add_kernel(*linear, kernels);
    }
    for (const models::MlpWeights& expert : layer.moe.experts) {
      for (const models::Linear* linear : {&expert.gate, &expert.up, &expert.down}) {
        add_kernel(*linear, kernels);
      }
    }
  }
  add_kernel(model.weights().lm_head, kernels);
  return kernels;
}

std::string lm_head_kernel(const models::Model& model) {
  const models::Linear& head = model.weights().lm_head;
  return head.method ? head.method->kernel_name() : std::string();
}

std::vector<Pitfall> check_pitfalls(const PitfallInputs& in) {
  std::vector<Pitfall> found;
  if (!in.model_lm_head_kernel.empty() && in.baseline_lm_head_kernel.empty()) {
    found.push_back({"lm_head_quantized",
                     "the LM head is quantized (kernel " + in.model_lm_head_kernel +
                         "); the output projection is the most sensitive layer: keep it in the "
                         "ignore list (ignore: [lm_head])"});
  }
  if (in.has_greedy) {
    if (in.model.mean_length < kShorterRatio * in.baseline.mean_length) {
      found.push_back({"shorter_outputs",
                       "greedy outputs end sooner than the baseline's: mean " +
                           format("%.1f", in.model.mean_length) + " tokens vs " +
                           format("%.1f", in.baseline.mean_length) + " (threshold " +
                           format("%.0f", 100 * kShorterRatio) + "% of the baseline's)"});
    }
    if (in.model.repeated_4grams > in.baseline.repeated_4grams + kRepetitionMargin) {
      found.push_back({"repetitive_outputs",
                       "greedy outputs repeat themselves more than the baseline's: " +
                           format("%.1f", 100 * in.model.repeated_4grams) +
                           "% repeated 4-grams vs " +
                           format("%.1f", 100 * in.baseline.repeated_4grams) + "% (threshold +" +
                           format("%.0f", 100 * kRepetitionMargin) + " points)"});
    }
    if (!in.model_kernels.empty() &&
        in.model.decode_tokens_per_second <= in.baseline.decode_tokens_per_second) {
      found.push_back({"not_faster",
                       "the quantized model decodes no faster than its baseline: " +
                           format("%.1f", in.model.decode_tokens_per_second) + " tok/s vs " +
                           format("%.1f", in.baseline.decode_tokens_per_second) +
                           " (quantization " + in.model_quantization + ", kernels " +
                           join(in.model_kernels) +
                           "): check the kernel is the fast path for this hardware and that "
                           "the batch size the memory saving allows is actually used"});
    }
  }
  if (in.kv_cache_fp8 && in.kld_last_quarter > kKvGrowthRatio * in.kld_first_quarter &&
      in.kld_last_quarter > kKvMinKld) {
    found.push_back({"kv_cache_fp8_long_context",
                     "with the fp8 KV cache (" + in.kv_cache + ") the KLD grows along the window: " +
                         format("%.5f", in.kld_last_quarter) + " nats in its last quarter vs " +
                         format("%.5f", in.kld_first_quarter) + " in its first (threshold " +
                         format("%.1f", kKvGrowthRatio) + "x and " + format("%.3f", kKvMinKld) +
                         "): check the KV scales (--calculate-kv-scales, or calibrated k_scale / "
                         "v_scale) or skip layers"});
  }
  return found;
}

}  // namespace lowbit::eval
