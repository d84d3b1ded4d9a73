// Rows of the seed's hardware matrix (shared/seeds/000_*.txt, vLLM's quantization docs) that no
// quantization_config selects in lowbit, registered so that `lowbit methods` lists every method of
// that matrix with the truth about it:
//   gguf          llama.cpp GGUF files. vLLM picks its "gguf" method for a .gguf model; lowbit's
//                 model loader reads the file itself (src/models/gguf_model.h) and decodes every
//                 quantized tensor at load, so this entry describes that path and where it runs.
//   fp8_vit_attn  "FP8 ViT Encoder Attention" (vLLM's --mm-encoder-attn-dtype fp8: Q/K/V of a
//                 multimodal model's vision encoder quantized to fp8 on the fly, FlashInfer cuDNN
//                 or AMD AITER). Listed as unsupported: lowbit is a text-only engine.
// Neither can be named by a checkpoint's quant_method: from_config says why.
#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

struct GgufListing {
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json&,
                                                         const std::string& where) {
    throw InvalidArgument(
        where +
        ": quant_method 'gguf' is a file format, not a "
        "quantization_config: give the .gguf file (or its directory) as the model");
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "gguf";
    d.summary =
        "llama.cpp GGUF files, chosen by the model path (MODEL.gguf), not by "
        "quantization_config: every tensor type decoded at load as gguf-py does";
    d.min_capability = 60;  // vLLM's GGUFConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead, LayerKind::Embedding};
    KernelSpec decode;
    decode.name = "gguf_decode";
    decode.isa = KernelSpec::Isa::Portable;
    decode.implements =
        "Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K..Q6_K decoded at load to f32 (or "
        "--dtype bf16 / f16), dense matmul";
    d.kernels = {decode};
    return d;
  }
};

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

LOWBIT_REGISTER_QUANTIZATION_CONFIG(GgufListing, "gguf");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(Fp8VitAttentionListing, "fp8_vit_attn");

}  // namespace lowbit::quant
