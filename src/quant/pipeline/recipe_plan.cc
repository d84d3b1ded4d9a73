#include "quant/pipeline/recipe_plan.h"

#include "lowbit/error.h"

namespace lowbit::quant {

namespace {

QuantizeStep quantize_step(const QuantizationConfig& c, bool gptq) {
  QuantizeStep s;
  s.gptq = gptq;
  s.groups = c.config_groups;
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
        if (sq->mappings) throw Unsupported(where + ": custom mappings are not supported yet");
        plan.steps.push_back(SmoothQuantStep{
            sq->smoothing_strength,
            sq->algorithm == SmoothQuantModifier::Algorithm::LogEqualization});
      } else if (const auto* awq = std::get_if<AwqModifier>(&m.args)) {
        if (awq->mappings) throw Unsupported(where + ": custom mappings are not supported yet");
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
