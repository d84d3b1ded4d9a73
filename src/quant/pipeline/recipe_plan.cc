#include "quant/pipeline/recipe_plan.h"

#include <set>
#include <string>

#include "lowbit/error.h"

namespace lowbit::quant {

namespace {

// compressed-tensors infers int-quantized (unpacked int8 weights) for int4 weights with fp8
// activations, but vLLM's W4A8-FP8 scheme (Hopper) loads weight_packed: write what vLLM loads.
void pack_w4afp8(QuantScheme& s) {
  if (s.format || !s.weights || !s.input_activations) return;
  if (s.weights->type == QuantType::Int && s.weights->num_bits == 4 &&
      s.input_activations->type == QuantType::Float && s.input_activations->num_bits == 8) {
    s.format = CompressionFormat::PackQuantized;
  }
}

// A mapping reduced to what it connects: the projection names its patterns mention, e.g.
// "input_layernorm>q_proj,k_proj,v_proj". llm-compressor writes the mappings it inferred into
// recipe.yaml; those for the Llama family are the ones the pipeline implements.
std::string signature(const std::string& smooth, const std::vector<std::string>& balance) {
  static const char* kNames[] = {"input_layernorm", "post_attention_layernorm", "q_proj", "k_proj",
                                 "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  auto name_in = [](const std::string& pattern) {
    std::string found;
    for (const char* n : kNames) {
      if (pattern.find(n) != std::string::npos && std::string(n).size() > found.size()) found = n;
    }
    return found.empty() ? "?" + pattern : found;
  };
  std::string out = name_in(smooth) + ">";
  for (size_t i = 0; i < balance.size(); ++i) out += (i ? "," : "") + name_in(balance[i]);
  return out;
}

template <class Mapping>
void check_default_mappings(const std::vector<Mapping>& mappings, std::set<std::string> expected,
                            const std::string& where) {
  for (const Mapping& m : mappings) {
    const std::string sig = signature(m.smooth_layer, m.balance_layers);
    if (expected.erase(sig) == 0) {
      throw Unsupported(where + ": mapping " + sig +
                        " is not one lowbit runs (it runs the Llama-family mappings)");
    }
  }
}

QuantizeStep quantize_step(const CompressedTensorsConfig& c, bool gptq) {
  QuantizeStep s;
  s.gptq = gptq;
  s.groups = c.config_groups;
  for (auto& [name, scheme] : s.groups) pack_w4afp8(scheme);
  s.ignore = c.ignore;
  s.kv_cache_scheme = c.kv_cache_scheme;
  return s;
}

}  // namespace

OneshotPlan plan_from_recipe(const Recipe& recipe) {
  OneshotPlan plan;
  bool quantized = false;
  for (const RecipeStage& stage : recipe.stages) {
    for (const Modifier& m : stage.modifiers) {
      const std::string where = std::string("recipe stage '") + stage.name + "', " + m.type_name();
      if (quantized) {
        throw Unsupported(where + ": lowbit runs one quantizing modifier, last in the recipe");
      }
      if (const auto* sq = std::get_if<SmoothQuantModifier>(&m.args)) {
        if (sq->mappings) {
          check_default_mappings(*sq->mappings,
                                 {"input_layernorm>q_proj,k_proj,v_proj",
                                  "post_attention_layernorm>gate_proj,up_proj"},
                                 where);
        }
        plan.steps.push_back(SmoothQuantStep{
            sq->smoothing_strength,
            sq->algorithm == SmoothQuantModifier::Algorithm::LogEqualization});
      } else if (const auto* awq = std::get_if<AwqModifier>(&m.args)) {
        if (awq->mappings) {
          check_default_mappings(*awq->mappings,
                                 {"input_layernorm>q_proj,k_proj,v_proj", "v_proj>o_proj",
                                  "post_attention_layernorm>gate_proj,up_proj", "up_proj>down_proj"},
                                 where);
        }
        AwqStep step;
        step.options.n_grid = static_cast<int>(awq->n_grid);
        step.options.duo_scaling = awq->duo_scaling == AwqModifier::DuoScaling::Off
                                       ? AwqOptions::Duo::Off
                                       : awq->duo_scaling == AwqModifier::DuoScaling::Both
                                             ? AwqOptions::Duo::Both
                                             : AwqOptions::Duo::On;
        plan.steps.push_back(step);
      } else if (const auto* q = std::get_if<QuantizationModifier>(&m.args)) {
        plan.steps.push_back(quantize_step(resolve_quantization_config(*q, where), false));
        quantized = true;
      } else if (const auto* g = std::get_if<GptqModifier>(&m.args)) {
        QuantizeStep step = quantize_step(resolve_quantization_config(*g, where), true);
        step.gptq_options.block_size = g->block_size;
        step.gptq_options.dampening_frac = g->dampening_frac;
        plan.steps.push_back(step);
        quantized = true;
      }
    }
  }
  if (!quantized) {
    throw InvalidArgument("the recipe has no quantizing modifier (QuantizationModifier or "
                          "GPTQModifier)");
  }
  return plan;
}

}  // namespace lowbit::quant
