// Writes the quantized model as a compressed-tensors checkpoint: every tensor of the input under
// its name (quantized Linears replaced by weight_packed / weight_scale / ... ; smoothed norms and
// weights as they now are), k_scale / v_scale, config.json with `quantization_config`, the
// tokenizer and generation files copied, and recipe.yaml. Shards are at most as large as the
// input's largest shard. Everything goes into `dir` (the caller's temporary directory).
#pragma once

#include <string>

#include "models/model.h"
#include "quant/pipeline/module_plan.h"
#include "quant/pipeline/plan.h"
#include "quant/pipeline/quantize_pass.h"
#include "quant/scheme/compressed_tensor.h"

namespace lowbit::quant {

struct OutputRequest {
  const models::Model* model;
  const ModulePlan* plan;
  const QuantizeStep* step;
  QuantizeOutcome* outcome;
  DType compute;
  std::string recipe_yaml;
};

// The tensors one quantized Linear is written as (plan index `index`).
std::vector<NamedTensor> compress_module(const OutputRequest& r, int index);

// Replaces every quantized Linear's weight by exactly what a loader reads back from the written
// tensors (compress, then decompress): compressed-tensors quantizes the fake-quantized bf16
// weight again, which can move an int8 code by one, so the evaluated model must be the written one.
void load_written_weights(const OutputRequest& r);

// The quantization_config block this run writes.
CompressedTensorsConfig output_quantization_config(const OutputRequest& r);

void write_quantized_checkpoint(const OutputRequest& r, const std::string& dir);

}  // namespace lowbit::quant
