#include "eval/checkpoint_size.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string_view>

#include "formats/safetensors.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace fs = std::filesystem;

namespace {

int64_t safetensors_bytes(const std::string& dir) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) throw IoError(dir + ": cannot list the checkpoint directory: " + error.message());
  int64_t total = 0;
  for (const fs::directory_entry& entry : it) {
    if (entry.path().extension() == ".safetensors") total += static_cast<int64_t>(entry.file_size());
  }
  LOWBIT_CHECK(total > 0, dir + ": no *.safetensors files");
  return total;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Storage width of the decoder layers' 2-D ".weight" tensors of an unquantized checkpoint.
double dense_bits(const formats::Checkpoint& checkpoint, const std::string& dir) {
  double bits = 0, elements = 0;
  for (const std::string& name : checkpoint.names()) {
    if (name.find(".layers.") == std::string::npos || !ends_with(name, ".weight")) continue;
    const Tensor t = checkpoint.get(name);
    if (t.ndim() != 2) continue;
    bits += 8.0 * static_cast<double>(t.nbytes());
    elements += static_cast<double>(t.numel());
  }
  LOWBIT_CHECK(elements > 0, dir + ": no 2-D decoder-layer weights to size");
  return bits / elements;
}

}  // namespace

CheckpointSize measure_checkpoint(const std::string& dir, const std::string& baseline_dir) {
  CheckpointSize size;
  size.size_bytes = safetensors_bytes(dir);
  const formats::Checkpoint checkpoint = formats::Checkpoint::open(dir);
  const std::vector<std::string> names = checkpoint.names();
  constexpr std::string_view kScale = ".weight_scale";
  double stored_bits = 0, weights = 0;
  std::unique_ptr<formats::Checkpoint> baseline;
  for (const std::string& name : names) {
    if (!ends_with(name, kScale)) continue;
    const std::string module = name.substr(0, name.size() - kScale.size());
    if (!baseline) baseline = std::make_unique<formats::Checkpoint>(formats::Checkpoint::open(baseline_dir));
    const std::string weight = module + ".weight";
    const Tensor original = baseline->get(weight);  // names baseline_dir when absent
    weights += static_cast<double>(original.numel());
    // Every tensor of the module's weight: "<module>.weight", ".weight_packed", ".weight_scale",
    // ".weight_zero_point", ".weight_g_idx", ".weight_shape" (tiny), ".weight_global_scale".
    for (auto it = std::lower_bound(names.begin(), names.end(), weight);
         it != names.end() && it->compare(0, weight.size(), weight) == 0; ++it) {
      stored_bits += 8.0 * static_cast<double>(checkpoint.get(*it).nbytes());
    }
    ++size.quantized_modules;
  }
  size.bits_per_weight = size.quantized_modules > 0 ? stored_bits / weights
                                                    : dense_bits(checkpoint, dir);
  return size;
}

}  // namespace lowbit::eval
