// The quantization pitfalls `lowbit eval --baseline` looks for (issue 7 item 5, from seed 004),
// each a kind and a one-line message. The thresholds are fixed here and printed in the messages:
//   lm_head_quantized      the model's LM head runs a quantization method and the baseline's does
//                          not (the output projection is the layer most sensitive to rounding);
//   shorter_outputs        greedy outputs on the same prompts end (EOS) sooner: mean length below
//                          kShorterRatio × the baseline's;
//   repetitive_outputs     the fraction of repeated 4-grams in the greedy outputs exceeds the
//                          baseline's by more than kRepetitionMargin;
//   not_faster             the model's weights are quantized but its greedy decode is not faster
//                          (tok/s <= the baseline's), naming the kernels its layers run;
//   kv_cache_fp8_long_context  with an fp8 KV cache, the mean KLD over the last quarter of the
//                          window positions exceeds kKvGrowthRatio × that of the first quarter and
//                          kKvMinKld nats: the error grows with the context length.
#pragma once

#include <string>
#include <vector>

namespace lowbit::models {
class Model;
}

namespace lowbit::eval {

inline constexpr double kShorterRatio = 0.8;
inline constexpr double kRepetitionMargin = 0.10;
inline constexpr double kKvGrowthRatio = 1.5;
inline constexpr double kKvMinKld = 0.005;

struct Pitfall {
  std::string kind;
  std::string message;
};

// The kernels of a model's quantized Linear layers (decoder layers and LM head), distinct, in
// first-seen order; empty for a dense model.
std::vector<std::string> linear_kernels(const models::Model& model);
// The LM head's kernel, empty when it is a dense (unquantized) matmul.
std::string lm_head_kernel(const models::Model& model);

struct GreedyFigures {
  double mean_length = 0;      // tokens before EOS, mean over prompts
  double repeated_4grams = 0;  // fraction
  double decode_tokens_per_second = 0;
};

struct PitfallInputs {
  std::string model_lm_head_kernel, baseline_lm_head_kernel;
  bool has_greedy = false;
  GreedyFigures model, baseline;
  std::vector<std::string> model_kernels;  // linear_kernels(model): non-empty = weights quantized
  std::string model_quantization;          // Model::quantization()
  bool kv_cache_fp8 = false;
  std::string kv_cache;  // KvCacheQuantizer::describe()
  double kld_first_quarter = 0, kld_last_quarter = 0;
};

std::vector<Pitfall> check_pitfalls(const PitfallInputs& inputs);

}  // namespace lowbit::eval
