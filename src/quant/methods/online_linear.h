// Online quantization of one Linear: its float checkpoint weight is quantized at load
// (round-to-nearest with a min-max observer, compressed-tensors' math in fp32) and then runs on the
// same kernels as a checkpoint of that scheme. Used by the online names (online.cc) and by `fp8` on
// an unquantized checkpoint (fp8.cc).
#pragma once

#include <optional>

#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {

class OnlineLinear : public KernelLinear {
 public:
  OnlineLinear(QuantArgs weights, std::optional<QuantArgs> inputs)
      : weights_(std::move(weights)), inputs_(std::move(inputs)) {}

  void create_weights(LayerParams& layer) override;
  void process_weights_after_loading(LayerParams& layer) override;
  bool uses_meta_device() const override { return true; }

 private:
  QuantArgs weights_;
  std::optional<QuantArgs> inputs_;  // dynamic activation quantization, or none
};

// Argument bundles for the online schemes.
QuantArgs fp8_weight_args(Strategy strategy);  // tensor, channel, or block 128x128
QuantArgs fp8_dynamic_input_args(Strategy strategy, int64_t group_size = 0);
QuantArgs int8_channel_weight_args();

}  // namespace lowbit::quant
