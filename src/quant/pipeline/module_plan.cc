#include "quant/pipeline/module_plan.h"

#include "core/log.h"
#include "lowbit/error.h"
#include "quant/algos/observers.h"
#include "quant/scheme/matching.h"

namespace lowbit::quant {

std::vector<int> ModulePlan::of_layer(int layer) const {
  std::vector<int> out;
  for (size_t i = 0; i < linears.size(); ++i) {
    if (linears[i].layer == layer) out.push_back(static_cast<int>(i));
  }
  return out;
}

namespace {

std::string strip_weight_suffix(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

void check_supported(const models::Model& model) {
  const models::ArchTensorNames& names = model.spec().names;
  if (!names.qkv_proj.empty() || !names.gate_up_proj.empty()) {
    throw Unsupported(model.config().architecture +
                      ": quantizing fused qkv_proj / gate_up_proj projections is not supported yet");
  }
  for (const models::LayerWeights& layer : model.weights().layers) {
    if (layer.is_moe()) {
      throw Unsupported(model.config().architecture +
                        ": quantizing mixture-of-experts layers is not supported yet");
    }
  }
}

}  // namespace

bool calibrated_inputs(const QuantScheme& s) {
  return s.input_activations && (!s.input_activations->is_dynamic() ||
                                 s.input_activations->strategy == Strategy::TensorGroup);
}

ModulePlan plan_modules(models::Model& model,
                        const std::vector<std::pair<std::string, QuantScheme>>& groups,
                        const std::vector<std::string>& ignore) {
  check_supported(model);
  const models::ArchTensorNames& names = model.spec().names;
  models::DecoderWeights& w = model.mutable_weights();
  ModulePlan plan;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const std::string prefix = names.layer_prefix + std::to_string(l) + ".";
    models::LayerWeights& layer = w.layers[l];
    const int index = static_cast<int>(l);
    plan.linears.push_back({prefix + names.q_proj, index, LinearRole::Q, &layer.attention.q});
    plan.linears.push_back({prefix + names.k_proj, index, LinearRole::K, &layer.attention.k});
    plan.linears.push_back({prefix + names.v_proj, index, LinearRole::V, &layer.attention.v});
    plan.linears.push_back({prefix + names.o_proj, index, LinearRole::O, &layer.attention.o});
    plan.linears.push_back({prefix + names.gate_proj, index, LinearRole::Gate, &layer.mlp.gate});
    plan.linears.push_back({prefix + names.up_proj, index, LinearRole::Up, &layer.mlp.up});
    plan.linears.push_back({prefix + names.down_proj, index, LinearRole::Down, &layer.mlp.down});
  }
  const std::string lm_head = strip_weight_suffix(names.lm_head);
  bool with_lm_head = !model.config().tie_word_embeddings;
  if (!with_lm_head) {
    // transformers keeps an lm_head module even when it is tied, so targets and ignore see it.
    // llm-compressor unties the embeddings when a group targets it (untie_word_embeddings): the
    // head becomes its own copy of the embedding matrix and is quantized like any Linear.
    const std::optional<size_t> group = resolve_group(groups, ignore, {lm_head, {"Linear"}});
    if (group && groups[*group].second.weights) {
      if (w.lm_head.weight.data() == nullptr || w.lm_head.method) {
        throw Unsupported(lm_head + ": the tied embedding is not a float matrix here (" +
                          model.quantization() + "): it cannot be untied and quantized");
      }
      plan.untied_lm_head = true;
      with_lm_head = true;
      log_info("lm_head is tied to the embedding and targeted: untying it (tie_word_embeddings "
               "false in the output), as llm-compressor does");
    }
  }
  if (with_lm_head) plan.linears.push_back({lm_head, -1, LinearRole::LmHead, &w.lm_head});

  std::vector<ModuleRef> refs;
  for (PlannedLinear& p : plan.linears) {
    ModuleRef ref{p.name, {"Linear"}};
    refs.push_back(ref);
    const std::optional<size_t> group = resolve_group(groups, ignore, ref);
    if (group && groups[*group].second.weights) p.group = static_cast<int>(*group);
  }
  if (!with_lm_head) refs.push_back({lm_head, {"Linear"}});
  const std::vector<std::string> missing = unmatched_targets(groups, refs);
  for (const std::string& entry : ignore) {
    if (entry.empty()) continue;  // `--ignore ""`: nothing left unquantized, not a module name
    bool any = false;
    for (const ModuleRef& ref : refs) any = any || match_target(entry, ref) != MatchKind::None;
    // llm-compressor's usual ignore lists name MoE routers too: not an error on a dense model.
    if (!any) log_warn("ignore entry '" + entry + "' matches no Linear module");
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "'" : ", '") + m + "'";
    throw InvalidArgument("targets match no Linear module of " +
                          model.config().architecture + ": " + list +
                          " (names look like 'model.layers.0.self_attn.q_proj'; 're:' for a regex)");
  }
  for (const PlannedLinear& p : plan.linears) {
    if (p.group < 0) continue;
    // Its weight is held by a quantization method (a quantized checkpoint; a GGUF file's Q4_0 /
    // Q8_0 projections): there is no float weight to quantize.
    if (p.linear->method) {
      throw Unsupported(p.name + " is already quantized (" + model.quantization() +
                        "): quantize an unquantized checkpoint, or ignore this module");
    }
    const QuantScheme& scheme = groups[static_cast<size_t>(p.group)].second;
    const QuantArgs& args = *scheme.weights;
    if (calibrated_inputs(scheme)) {
      check_input_observer(*scheme.input_activations,
                           "config group '" + groups[static_cast<size_t>(p.group)].first +
                               "' input_activations");
    }
    const bool grouped = args.strategy == Strategy::Group || args.strategy == Strategy::TensorGroup;
    // llm-compressor validates this too: a partial last group has no kernel in vLLM.
    if (grouped && args.group_size > 0 && p.linear->in_features() % args.group_size != 0) {
      throw InvalidArgument(p.name + ": group_size " + std::to_string(args.group_size) +
                            " does not divide its " + std::to_string(p.linear->in_features()) +
                            " input features (config group '" +
                            groups[static_cast<size_t>(p.group)].first + "')");
    }
  }
  for (const PlannedLinear& p : plan.linears) {
    if (p.role == LinearRole::LmHead && p.group >= 0) {
      log_warn("lm_head will be quantized: vLLM supports it for few schemes and quality drops; "
               "llm-compressor recipes ignore it");
    }
  }
  return plan;
}

}  // namespace lowbit::quant
