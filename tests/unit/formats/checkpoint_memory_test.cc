// Checkpoint::from_tensors: tensors made in memory (the GGUF model source) behind the Checkpoint
// interface.
#include <gtest/gtest.h>

#include "formats/safetensors.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

TEST(CheckpointFromTensors, ServesTheGivenTensorsByName) {
  const float values[] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  std::map<std::string, Tensor> tensors;
  tensors["b.weight"] = Tensor::from_f32(values, {2, 3}, DType::F32);
  tensors["a.weight"] = Tensor::from_f32(values, {6}, DType::BF16);
  const Checkpoint checkpoint = Checkpoint::from_tensors("model.gguf", tensors);
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"a.weight", "b.weight"}));
  EXPECT_TRUE(checkpoint.has("b.weight"));
  EXPECT_FALSE(checkpoint.has("c.weight"));
  const Tensor b = checkpoint.get("b.weight");
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.data_as<const float>()[5], 6.0f);
  EXPECT_EQ(checkpoint.get("a.weight").dtype(), DType::BF16);
  EXPECT_EQ(checkpoint.file_of("a.weight"), "model.gguf");
  EXPECT_EQ(checkpoint.path(), "model.gguf");
  EXPECT_TRUE(checkpoint.files().empty());
  EXPECT_THROW(checkpoint.get("c.weight"), InvalidArgument);
  EXPECT_THROW(checkpoint.file_of("c.weight"), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::formats
