// group_attention compiled for AVX2 + FMA (flags from src/CMakeLists.txt by file name).
#include "kernels/ref/attention_group_impl.h"

namespace lowbit::kernels::detail {

void group_attention_avx2(const GroupAttentionArgs& args) { group_attention_impl(args); }

}  // namespace lowbit::kernels::detail
