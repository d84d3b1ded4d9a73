// A row of the seed's hardware matrix (shared/seeds/000_*.txt, vLLM's quantization docs) that no
// quantization_config selects in lowbit, registered so that `lowbit methods` lists every method of
// that matrix with the truth about it:
//   fp8_vit_attn  "FP8 ViT Encoder Attention" (vLLM's --mm-encoder-attn-dtype fp8: Q/K/V of a
//                 multimodal model's vision encoder quantized to fp8 on the fly, FlashInfer cuDNN
//                 or AMD AITER). Listed as unsupported: lowbit is a text-only engine.
// It cannot be named by a checkpoint's quant_method: from_config says why. (GGUF, the other row
// no checkpoint names, is a method of its own: gguf.cc.)
#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

constexpr const char* kVitReason =
    "outside a text-only engine: it quantizes the attention of a multimodal model's vision (ViT) "
    "encoder, and lowbit runs no vision encoder (no multimodal model is in scope)";

struct Fp8VitAttentionListing {
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json&,
                                                         const std::string& where) {
    throw Unsupported(where + ": fp8_vit_attn is not supported by lowbit: " + kVitReason);
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "fp8_vit_attn";
    d.summary =
        "FP8 attention for ViT encoders (vLLM's --mm-encoder-attn-dtype fp8, Qwen3-VL "
        "family): Q/K/V of the vision encoder quantized to fp8 on the fly";
    d.unsupported = kVitReason;
    return d;
  }
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(Fp8VitAttentionListing, "fp8_vit_attn");

}  // namespace lowbit::quant
