// What a checkpoint costs on disk, for `lowbit compare`'s size and bits-per-weight columns.
#pragma once

#include <cstdint>
#include <string>

namespace lowbit::eval {

struct CheckpointSize {
  int64_t size_bytes = 0;       // bytes of the directory's *.safetensors files
  double bits_per_weight = 0;   // stored bits per weight of the quantized Linear modules
  int64_t quantized_modules = 0;
};

// Sizes `dir` against the unquantized `baseline_dir` it was made from. A module counts as quantized
// when `dir` stores "<module>.weight_scale" (every compressed-tensors preset writes one); its stored
// bits are those of every "<module>.weight*" tensor (codes, scales, zero points, g_idx, global
// scales) divided by the elements of the baseline's "<module>.weight". With no quantized module
// (the baseline itself) the figure is the storage width of the decoder layers' 2-D weights (16 for
// BF16). IoError / InvalidArgument naming the directory when a checkpoint cannot be read or a
// module's baseline weight is missing.
CheckpointSize measure_checkpoint(const std::string& dir, const std::string& baseline_dir);

}  // namespace lowbit::eval
