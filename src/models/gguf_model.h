// A GGUF file (llama.cpp's format) as a model source: its metadata becomes the config.json that
// Hugging Face would have, and its tensors become a formats::Checkpoint under Hugging Face's
// names, so that the shared config parser, ArchSpec and weight loader run unchanged.
//
// Supported: general.architecture "llama" (LlamaForCausalLM). Quantized tensors (every type of
// formats/gguf_dequant.h) are decoded at load, exactly as gguf-py dequantizes them, and held as
// F32 (default) or BF16 / F16; F32 / F16 / BF16 tensors stay zero-copy views of the mapped file. attn_q / attn_k (and their biases)
// get back Hugging Face's row order: convert_hf_to_gguf.py's LlamaModel.permute interleaves the
// two rotary halves of each head (row h*d + i*d/2 + j becomes h*d + 2*j + i, for head h of
// size d, half i, j < d/2; attn_k uses the KV head count).
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

// config.json text equivalent to `file`'s metadata. Unsupported naming general.architecture for
// an architecture other than llama, and for what lowbit cannot express yet (Llama 3's
// rope_freqs tensor, experts); InvalidArgument naming the file and key for missing/bad values.
std::string gguf_config_json(const formats::GgufFile& file);

// Every tensor of `file` under its Hugging Face name (unknown GGUF names are kept as they are, so
// that the weight loader reports them as unused). InvalidArgument naming the GGUF tensor when one
// that Llama needs is missing. `num_heads` / `num_kv_heads` undo the q / k permutation.
// Quantized tensors are decoded to F32 and then held as `decoded_dtype` (F32, BF16 or F16):
// F32 keeps gguf-py's values exactly, BF16 halves the memory (--dtype bfloat16).
formats::Checkpoint gguf_checkpoint(const std::shared_ptr<formats::GgufFile>& file,
                                    int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
                                    DType decoded_dtype = DType::F32);

}  // namespace lowbit::models
