// LayerParams and the default behaviours of LinearMethod; layer kind names.
#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::Linear: return "Linear";
    case LayerKind::LmHead: return "LM head";
    case LayerKind::Embedding: return "Embedding";
    case LayerKind::Experts: return "MoE experts";
    case LayerKind::Attention: return "Attention (KV cache)";
  }
  return "?";
}

const Tensor& LayerParams::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw InvalidArgument(source + ": tensor '" + info_.prefix + "." + name + "' is missing");
  }
  return it->second;
}

std::string LayerParams::describe(const std::string& name) const {
  return source + ": tensor '" + info_.prefix + "." + name + "'";
}

void LinearMethod::embedding(const int32_t*, int64_t, float*) const {
  throw Unsupported(kernel_name() + " does not implement embedding lookups");
}

void LinearMethod::tie_weights(LayerParams& lm_head, const LayerParams& embed_tokens) {
  (void)lm_head;
  (void)embed_tokens;
  throw Unsupported(kernel_name() + " cannot tie an LM head to the embedding");
}

}  // namespace lowbit::quant
