// `lowbit synth --no-data`: checkpoints with a real model's shapes whose tensors are holes (sparse
// files that read as zeros), for `lowbit bench --device cuda --random-weights` on shapes no disk
// holds. The parameter count is checked against the published one.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>

#include "eval/synthetic_model.h"
#include "formats/safetensors.h"

namespace lowbit::eval {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  return fs::path(LOWBIT_BINARY_DIR) / "synth-scratch" / name;
}

TEST(SyntheticModel, NoDataWritesTheShapesAsHolesThatReadAsZeros) {
  SynthOptions o;
  o.like = "llama-3.1-70b";
  o.output_dir = scratch("70b").string();
  o.tokenizer_from = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";
  o.overwrite = true;
  o.no_data = true;
  // Meta's Llama-3.1-70B: 70,553,706,496 parameters (its safetensors index: total_size 141107412992
  // bytes of bf16).
  EXPECT_EQ(write_synthetic_model(o), 70553706496LL);
  const fs::path dir = o.output_dir;
  std::ifstream index(dir / "model.safetensors.index.json");
  EXPECT_EQ(nlohmann::json::parse(index).at("metadata").at("total_size").get<long long>(),
            141107412992LL);
  // The whole checkpoint takes almost no disk: headers only.
  uintmax_t apparent = 0, allocated = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    struct stat st {};
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    apparent += static_cast<uintmax_t>(st.st_size);
    allocated += static_cast<uintmax_t>(st.st_blocks) * 512;
  }
  EXPECT_GT(apparent, 140e9);
  EXPECT_LT(allocated, uintmax_t{64} << 20);
  // A real checkpoint to the reader: shapes and dtype, and zeros.
  const formats::Checkpoint checkpoint = formats::Checkpoint::open(dir.string());
  const Tensor norm = checkpoint.get("model.layers.79.input_layernorm.weight");
  EXPECT_EQ(norm.shape(), (Shape{8192}));
  EXPECT_EQ(norm.dtype(), DType::BF16);
  const uint16_t* bits = norm.data_as<const uint16_t>();
  for (int64_t i = 0; i < norm.numel(); ++i) ASSERT_EQ(bits[i], 0) << i;
  EXPECT_EQ(checkpoint.get("model.layers.0.mlp.down_proj.weight").shape(), (Shape{8192, 28672}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit::eval
