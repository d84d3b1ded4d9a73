#include "gpu/tensor_parallel.h"

#include "lowbit/error.h"
#include "models/model_config.h"

namespace lowbit::gpu {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The scale rows / columns [first, last) that cover elements [s.begin, s.end) of a dimension of
// `size` elements in blocks of `block`; Unsupported when a block would be split between GPUs.
void covered_blocks(int64_t size, int64_t block, const Split& s, const std::string& what,
                    int64_t& first, int64_t& last) {
  const bool aligned = s.begin % block == 0 && (s.end % block == 0 || s.end == size);
  if (!aligned) {
    throw Unsupported("--tensor-parallel-size: " + what + ": elements [" + str(s.begin) + ", " +
                      str(s.end) + ") of this GPU do not start and end on a quantization " +
                      "block of " + str(block) + ": a block cannot be split between GPUs " +
                      "(use fewer GPUs, or a checkpoint with smaller groups)");
  }
  first = s.begin / block;
  last = (s.end + block - 1) / block;
}

bool trivial_g_idx(const kernels::IntWeights& w) {
  for (size_t c = 0; c < w.g_idx.size(); ++c) {
    if (w.g_idx[c] != static_cast<int32_t>(static_cast<int64_t>(c) / w.group_size)) return false;
  }
  return true;
}

}  // namespace

TpPlan plan_tensor_parallel(const models::ModelConfig& c, int64_t intermediate, int rank,
                            int world) {
  LOWBIT_CHECK(world >= 1 && rank >= 0 && rank < world,
               "--tensor-parallel-size must be >= 1 (got " + str(world) + ")");
  const std::string at = "--tensor-parallel-size " + str(world) + ": " + c.source + ": ";
  LOWBIT_CHECK(c.num_heads % world == 0,
               at + "num_attention_heads " + str(c.num_heads) + " is not divisible by " + str(world));
  LOWBIT_CHECK(c.num_kv_heads % world == 0 || world % c.num_kv_heads == 0,
               at + "num_key_value_heads " + str(c.num_kv_heads) + " neither divides nor is " +
                   "divisible by " + str(world));
  LOWBIT_CHECK(intermediate % world == 0,
               at + "intermediate_size " + str(intermediate) + " is not divisible by " + str(world));
  TpPlan p;
  p.rank = rank;
  p.world = world;
  p.heads = c.num_heads / world;
  p.head_begin = rank * p.heads;
  if (c.num_kv_heads >= world) {
    p.kv_heads = c.num_kv_heads / world;
    p.kv_head_begin = rank * p.kv_heads;
  } else {  // replicated: ranks r .. r + world / kv_heads - 1 share one KV head
    p.kv_heads = 1;
    p.kv_head_begin = rank / (world / c.num_kv_heads);
  }
  p.intermediate = intermediate / world;
  p.intermediate_begin = rank * p.intermediate;
  const int64_t per_rank = (c.vocab_size + world - 1) / world;
  p.vocab_begin = std::min(c.vocab_size, rank * per_rank);
  p.vocab_rows = std::min(c.vocab_size, p.vocab_begin + per_rank) - p.vocab_begin;
  return p;
}

std::vector<float> slice_bias(const std::vector<float>& bias, const Split& s, int rank) {
  if (bias.empty() || s.is_whole()) return bias;
  if (s.dim == Split::Dim::COLS) return rank == 0 ? bias : std::vector<float>{};
  return std::vector<float>(bias.begin() + s.begin, bias.begin() + s.end);
}

kernels::IntWeights slice_int_weights(const kernels::IntWeights& w, const Split& s,
                                      const std::string& name) {
  if (s.is_whole()) return w;
  kernels::IntWeights out;
  out.bits = w.bits;
  const int64_t groups = w.groups();
  if (s.dim == Split::Dim::ROWS) {
    out.rows = s.end - s.begin;
    out.cols = w.cols;
    out.group_size = w.group_size;
    out.codes = slice_matrix(w.codes, w.rows, w.cols, s);
    out.scales = slice_matrix(w.scales, w.rows, groups, s);
    if (!w.zeros.empty()) out.zeros = slice_matrix(w.zeros, w.rows, groups, s);
    out.g_idx = w.g_idx;
    return out;
  }
  if (!trivial_g_idx(w)) {
    throw Unsupported("--tensor-parallel-size: " + name + " has activation order (g_idx): its " +
                      "input columns cannot be split between GPUs yet (run it on one GPU, or " +
                      "quantize without act-order / with --actorder static)");
  }
  out.rows = w.rows;
  out.cols = s.end - s.begin;
  out.codes = slice_matrix(w.codes, w.rows, w.cols, s);
  if (groups == 1) {  // per-channel: every column shares its row's scale
    out.group_size = out.cols;
    out.scales = w.scales;
    out.zeros = w.zeros;
    return out;
  }
  int64_t first = 0, last = 0;
  covered_blocks(w.cols, w.group_size, s, name + " (group_size " + str(w.group_size) + ")", first,
                 last);
  out.group_size = w.group_size;
  out.scales = slice_matrix(w.scales, w.rows, groups, Split::cols(first, last));
  if (!w.zeros.empty()) out.zeros = slice_matrix(w.zeros, w.rows, groups, Split::cols(first, last));
  return out;
}

kernels::Fp8Weights slice_fp8_weights(const kernels::Fp8Weights& w, const Split& s,
                                      const std::string& name) {
  if (s.is_whole()) return w;
  kernels::Fp8Weights out;
  const int64_t scale_rows = (w.rows + w.block_rows - 1) / w.block_rows;
  const int64_t scale_cols = w.scale_cols();
  const bool rows = s.dim == Split::Dim::ROWS;
  out.rows = rows ? s.end - s.begin : w.rows;
  out.cols = rows ? w.cols : s.end - s.begin;
  out.block_rows = w.block_rows;
  out.block_cols = w.block_cols;
  out.codes = slice_matrix(w.codes, w.rows, w.cols, s);
  const int64_t size = rows ? w.rows : w.cols;
  const int64_t block = rows ? w.block_rows : w.block_cols;
  if ((rows ? scale_rows : scale_cols) == 1) {  // one scale along the split dimension
    (rows ? out.block_rows : out.block_cols) = rows ? out.rows : out.cols;
    out.scales = w.scales;
    return out;
  }
  int64_t first = 0, last = 0;
  covered_blocks(size, block, s, name + " (fp8 scale blocks of " + str(w.block_rows) + " x " +
                                     str(w.block_cols) + ")",
                 first, last);
  out.scales = slice_matrix(w.scales, scale_rows, scale_cols,
                            rows ? Split::rows(first, last) : Split::cols(first, last));
  return out;
}

}  // namespace lowbit::gpu
