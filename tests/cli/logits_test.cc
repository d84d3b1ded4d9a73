// `lowbit logits` writes what transformers computes: the golden prompt's logits at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "formats/safetensors.h"

namespace lowbit::testing {
namespace {

TEST(LogitsCliTest, MatchesTransformersAtEveryPosition) {
  auto golden = formats::SafetensorsFile::open(repo_path("tests/golden/ref-llama-19m/reference_logits.safetensors"));
  Tensor ids = golden->get("prompt0.input_ids");
  Tensor expected = golden->get("prompt0.logits");
  std::string id_list;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    id_list += (i ? "," : "") + std::to_string(ids.data_as<const int64_t>()[i]);
  }
  std::filesystem::path out = std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "logits.safetensors";
  std::filesystem::create_directories(out.parent_path());
  auto r = run_lowbit("logits " + repo_path("models/ref-llama-19m") + " --prompt-ids " + id_list +
                      " -o '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto written = formats::SafetensorsFile::open(out.string());
  Tensor logits = written->get("logits");
  ASSERT_EQ(logits.dtype(), DType::F32);
  ASSERT_EQ(logits.numel(), expected.numel());
  ASSERT_EQ(logits.dim(0), ids.numel());
  const float* got = logits.data_as<const float>();
  const float* want = expected.data_as<const float>();
  float max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(want[i]));
    max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
  }
  // The bound: both sides compute in fp32 from the same bf16 weights, so only summation
  // order differs (~1e-6 relative); 1e-3 of the largest logit leaves room for nothing else.
  EXPECT_LE(max_diff, 1e-3f * max_abs);
  EXPECT_FALSE(std::filesystem::exists(out.string() + ".tmp"));
}

// --dump-linear-io writes each decoder Linear's real input and output under its Hugging Face
// name: every output is that module's own weight applied to the recorded input.
TEST(LogitsCliTest, DumpsEachLinearsInputAndOutput) {
  std::filesystem::path dir = std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch";
  std::filesystem::create_directories(dir);
  const std::string dump = (dir / "linear-io.safetensors").string();
  auto r = run_lowbit("logits " + repo_path("models/ref-llama-19m") + " --prompt-ids 0,534,3418,286" +
                      " -o '" + (dir / "logits-io.safetensors").string() + "' --dump-linear-io '" +
                      dump + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto io = formats::SafetensorsFile::open(dump);
  ASSERT_EQ(io->names().size(), 8u * 7u * 2u);  // 8 layers × q k v o gate up down × in, out

  std::vector<std::shared_ptr<formats::SafetensorsFile>> shards;
  for (const auto& entry : std::filesystem::directory_iterator(repo_path("models/ref-llama-19m"))) {
    if (entry.path().extension() == ".safetensors") shards.push_back(formats::SafetensorsFile::open(entry.path().string()));
  }
  auto weight_of = [&](const std::string& name) {
    for (const auto& s : shards) {
      if (s->has(name + ".weight")) return s->get(name + ".weight").to_f32();
    }
    ADD_FAILURE() << name << ".weight not in the checkpoint";
    return Tensor();
  };
  for (const std::string name : {"model.layers.0.self_attn.q_proj", "model.layers.3.self_attn.v_proj",
                                 "model.layers.7.mlp.down_proj"}) {
    Tensor x = io->get(name + ".input"), y = io->get(name + ".output"), w = weight_of(name);
    ASSERT_EQ(x.dim(0), 4) << name;  // one row per prompt token
    ASSERT_EQ(x.dim(1), w.dim(1)) << name;
    ASSERT_EQ(y.dim(1), w.dim(0)) << name;
    float max_abs = 0, max_diff = 0;
    for (int64_t t = 0; t < x.dim(0); ++t) {
      for (int64_t o = 0; o < w.dim(0); ++o) {
        double dot = 0;
        for (int64_t i = 0; i < w.dim(1); ++i) {
          dot += static_cast<double>(x.data_as<const float>()[t * x.dim(1) + i]) *
                 w.data_as<const float>()[o * w.dim(1) + i];
        }
        const float got = y.data_as<const float>()[t * y.dim(1) + o];
        max_abs = std::max(max_abs, std::fabs(static_cast<float>(dot)));
        max_diff = std::max(max_diff, std::fabs(got - static_cast<float>(dot)));
      }
    }
    // fp32 accumulation against double over <= 1024 products: ~1e-6 of the largest output; a
    // wrong pairing (another module's weight or input) is off by the output's own size.
    EXPECT_LE(max_diff, 1e-4f * max_abs) << name;
  }
}

}  // namespace
}  // namespace lowbit::testing
