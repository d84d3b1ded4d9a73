// Loads Linear layers of a compressed-tensors checkpoint by dequantizing them at load time (to the
// model's float dtype), with their activation quantization emulated (fake-quantized inputs). This is
// the reference path every quantized format has; the method registry's kernels run the packed
// weights directly.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "formats/safetensors.h"
#include "models/layers/linear.h"
#include "models/model_config.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::models {

class CompressedLinearLoader {
 public:
  // Null when the checkpoint is not quantized. Throws Unsupported for a quant_method other than
  // compressed-tensors and InvalidArgument for a quantization_config that does not parse.
  static std::unique_ptr<CompressedLinearLoader> from_config(const ModelConfig& config);

  // The scheme of `module` (full dotted name), or null when it is stored unquantized.
  const quant::QuantScheme* scheme_of(const std::string& module) const;

  // Dequantizes `module`'s weight ([out, in], to `model_dtype`) and sets its input quantization;
  // records every tensor it reads in `used`. Throws InvalidArgument naming the tensor on a
  // missing, mis-typed or mis-shaped one.
  Linear load(const formats::Checkpoint& checkpoint, const std::string& module, int64_t out,
              int64_t in, DType model_dtype, std::set<std::string>& used) const;

  const quant::QuantizationConfig& config() const { return config_; }

 private:
  quant::QuantizationConfig config_;
  std::string source_;
};

}  // namespace lowbit::models
