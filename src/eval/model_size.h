// How big a model is, for `lowbit recommend`'s memory arithmetic: its parameter count and the
// shapes that size its KV cache, read from a checkpoint directory or, for a bare count ("70B"),
// taken from the public config of a typical model of that size (said as an assumption).
#pragma once

#include <cstdint>
#include <string>

namespace lowbit::eval {

struct ModelShape {
  double params = 0;            // every parameter
  double unquantized_params = 0;  // embeddings and LM head: quantize leaves them 16-bit
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t max_context = 0;      // max_position_embeddings (0: unknown)
  std::string dir;              // the checkpoint directory, when one was given
  std::string source;           // "models/x (config.json, 12 safetensors tensors)" or the assumption
  bool assumed_shape = false;   // the shape is a typical one, not this model's
};

// "70B", "8b", "1.5B", "405B", "7M", "1T", "8e9", "8000000000" → a typical shape of that size;
// an existing directory → its config.json and safetensors. InvalidArgument naming `flag` when the
// text is neither.
ModelShape parse_model_params(const std::string& text, const std::string& flag);

// Reads a checkpoint directory: the shape from config.json (lowbit's parser), the parameter count
// from the safetensors headers as `lowbit inspect` counts them (elements of every tensor), or from
// the config's shapes when the checkpoint is already quantized (packed tensors hold several
// weights per element).
ModelShape model_shape_from_dir(const std::string& dir);

// KV-cache bytes per token: K and V for every layer, kv_heads x head_dim values each.
double kv_bytes_per_token(const ModelShape& model, double bytes_per_value);

// Weight bytes once quantized: the quantized parameters at `bits_per_weight`, the rest at 16 bits.
double weight_bytes(const ModelShape& model, double bits_per_weight);

// "70.6 B", "8.03 B", "19.2 M".
std::string format_params(double params);
// "37.1 GB" (GiB, as GPU memory is quoted).
std::string format_bytes(double bytes);

}  // namespace lowbit::eval
