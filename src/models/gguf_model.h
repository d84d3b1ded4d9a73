// A GGUF file (llama.cpp's format) as a model source: its metadata becomes the config.json that
// Hugging Face would have, and its tensors become a formats::Checkpoint under Hugging Face's
// names, so that the shared config parser, ArchSpec and weight loader run unchanged.
//
// Supported: general.architecture "llama" (LlamaForCausalLM) and "qwen2" (Qwen2ForCausalLM: q/k/v
// biases, q/k not permuted by the converter). Projections (q/k/v/o/gate/up/down)
// and the LM head stored as Q4_0, Q8_0 or Q6_K run on the int kernels (W4A16 / W8A16 group 32,
// 6-bit group 16; an output tied to such a token_embd too, loaded untied from the same blocks): the
// config gets quantization_config {"quant_method": "gguf", "modules": {module: type}} and the
// checkpoint the module's raw blocks as "<module>.qweight" (U8 [out, row bytes], a view of the
// mapped file), which quant/methods/gguf.cc turns into canonical int weights without a float
// round trip. Every other quantized tensor (the other types of formats/gguf_dequant.h, and the
// embedding whatever its type) is decoded at load, exactly as gguf-py dequantizes it, and held as
// F32 (default) or BF16 / F16; F32 / F16 / BF16 tensors stay zero-copy views of the mapped file.
// Llama's attn_q / attn_k (and their biases, and their qweight rows of blocks) get back Hugging Face's row
// order: convert_hf_to_gguf.py's LlamaModel.permute interleaves the two rotary halves of each head
// (row h*d + i*d/2 + j becomes h*d + 2*j + i, for head h of size d, half i, j < d/2; attn_k uses
// the KV head count).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace lowbit::models {

// The .gguf file a model path names: the path itself if it ends in ".gguf", or the only *.gguf of
// a directory that holds no *.safetensors; nullopt otherwise (a safetensors model). A directory
// with several .gguf files and no safetensors: InvalidArgument listing them.
std::optional<std::string> find_gguf_model(const std::string& path);

// config.json text equivalent to `file`'s metadata (a rope_freqs tensor becomes the equivalent
// rope_scaling). Unsupported naming general.architecture for one other than llama and qwen2,
// and for what lowbit cannot express yet (experts; rope_freqs together with a rope scaling
// type); InvalidArgument naming the file and key for missing/bad values.
// Holds the gguf quantization_config when some projection is Q4_0 / Q8_0 (see above).
std::string gguf_config_json(const formats::GgufFile& file);

// Every tensor of `file` under its Hugging Face name (unknown GGUF names are kept as they are, so
// that the weight loader reports them as unused). InvalidArgument naming the GGUF tensor when one
// that Llama needs is missing. `num_heads` / `num_kv_heads` undo the q / k permutation.
// Q4_0 / Q8_0 projections are kept as their blocks ("<module>.qweight"); the other quantized
// tensors are decoded to F32 and then held as `decoded_dtype` (F32, BF16 or F16): F32 keeps
// gguf-py's values exactly, BF16 halves the memory (--dtype bfloat16).
formats::Checkpoint gguf_checkpoint(const std::shared_ptr<formats::GgufFile>& file,
                                    int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
                                    DType decoded_dtype = DType::F32);

}  // namespace lowbit::models
