// The row of the seed's hardware matrix that lowbit only lists (src/quant/methods/listed_only.cc):
// fp8_vit_attn is listed as unsupported and every way of asking for it fails with the reason.
// (gguf, which no quantization_config selects either, is tested in gguf_method_test.cc.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/resolve.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

const std::string kReason = "outside a text-only engine";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ListedOnly, Fp8VitAttentionIsListedAsUnsupportedWithItsReason) {
  ASSERT_TRUE(is_registered_quantization("fp8_vit_attn"));
  const MethodDescription d = describe_quantization("fp8_vit_attn");
  EXPECT_EQ(d.name, "fp8_vit_attn");
  EXPECT_NE(d.unsupported.find(kReason), std::string::npos) << d.unsupported;
  EXPECT_TRUE(d.kernels.empty());
  // As a checkpoint's method, asked for by name, or checked against any hardware.
  EXPECT_NE(error_of([] { make_quantization_config("fp8_vit_attn", {}, "cfg"); }).find(kReason),
            std::string::npos);
  const fs::path dir = fs::temp_directory_path() / "lowbit-listed-only-test";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  const std::string asked =
      error_of([&] { resolve_quantization(dir.string(), "", "cfg", {"fp8_vit_attn"}); });
  EXPECT_NE(asked.find("quantization method fp8_vit_attn is not supported by lowbit: " + kReason),
            std::string::npos)
      << asked;
  EXPECT_THROW(resolve_quantization(dir.string(), "", "cfg", {"fp8_vit_attn"}), Unsupported);
  Platform hopper;
  hopper.cuda_capability = 90;
  EXPECT_NE(error_of([&] { require_supported(d, hopper); }).find(kReason), std::string::npos);
}

}  // namespace
}  // namespace lowbit::quant
