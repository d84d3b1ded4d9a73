// Internal to the CPU matmul: the argument bundle every kernel variant takes, the per-ISA entry
// points, and the ISA-neutral helpers they share (threading plan, packing, scratch memory).
//
// ISA safety: the helpers live in baseline-ISA files (matmul_common.cc, matmul_driver.cc). Files
// compiled with -mavx2/-mavx512* keep their code in anonymous namespaces and must not instantiate
// any inline or template function that other files also use (std::string, exception types...):
// the linker keeps one copy of such a function for the whole program, possibly the one with
// AVX-512 instructions, which would then crash an AVX2-only CPU far from any kernel. Check with
// `nm -C --defined-only <isa>.o | grep " W "`, which should print nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/dtype.h"

namespace lowbit::kernels::cpu::detail {

// A validated matmul call: y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); w is F32, F16 or BF16.
struct MatmulArgs {
  const float* x = nullptr;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  const void* w = nullptr;
  DType w_dtype = DType::F32;
  const float* bias = nullptr;
  float* y = nullptr;
};

// Each ISA has two paths. gemv_*: few rows of x (decode); streams each weight row once, decoding
// it in registers, several rows of W and of x per step. gemm_*: many rows of x (prefill); decodes
// a block of W to fp32 once into a cache-resident panel and reuses it for every row of x through
// a register-blocked outer-product micro-kernel. Both handle any m; dispatch picks by m.
void gemv_scalar(const MatmulArgs& args);
void gemm_scalar(const MatmulArgs& args);
void gemv_avx2(const MatmulArgs& args);  // needs AVX2 + FMA + F16C
void gemm_avx2(const MatmulArgs& args);
void gemv_avx512(const MatmulArgs& args);  // needs AVX-512 F/BW/VL/DQ (+ the AVX2 set)
void gemm_avx512(const MatmulArgs& args);
// The opt-in lossy path (x rounded to bf16, vdpbf16ps); BF16 weights; needs AVX512_BF16.
void gemm_bf16_dot_avx512(const MatmulArgs& args);

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
};

// ---- drivers: threading and blocking, shared by every ISA ---------------------------------------

// y[i][j] (+)= sum_p xs[p][i] · wp[p][j] over one kc block, for i < rows and j < columns of a
// micro-tile (xs: packed x sliver, wp: packed W panel, y with row stride ldy). The first k block
// starts from the bias (or zero), later ones from the partial sums already in y.
using MicroKernel = void (*)(const float* xs, const float* wp, int64_t kc, float* y, int64_t ldy,
                             int rows, int64_t columns, const float* bias, bool first);

// Packs W as pack_weight_panels does (same arguments and layout); ISA files may provide a faster one.
using PackWeights = void (*)(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                             int64_t kc, int nr, float* dst);
// Packs x as pack_activation_slivers does (same arguments and layout).
using PackActivations = void (*)(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                                 int64_t kc, int mr, float* dst);

struct BlockedKernel {
  int mr = 0;         // rows of x per micro-tile
  int nr = 0;         // columns of y per micro-tile
  int64_t kc = 0;     // k per block (x sliver mr·kc floats should sit in L1)
  int64_t nc = 0;     // W rows per block (nc·kc floats should sit in L2); a multiple of nr
  MicroKernel micro = nullptr;
  PackWeights pack = nullptr;        // null: pack_weight_panels
  PackActivations pack_x = nullptr;  // null: pack_activation_slivers
};

// The blocked (prefill) path around a micro-kernel: threads, blocking, packing. Needs k > 0.
void run_blocked(const MatmulArgs& args, const BlockedKernel& kernel);

// Each ISA's blocked kernel (micro-kernel, blocking, x packing; pack left null), for weight formats
// that bring their own PackWeights and reuse the rest (wna16). nr is a multiple of 8, kc of 32.
BlockedKernel blocked_kernel_scalar();
BlockedKernel blocked_kernel_avx2();
BlockedKernel blocked_kernel_avx512();
// The AVX-512 bf16-dot blocking (x packed as bf16 pairs, one vdpbf16ps per two k; pack left null:
// the weight format's PackWeights must write bf16 pairs). Needs AVX512_BF16.
BlockedKernel blocked_kernel_bf16_dot_avx512();

// y for rows [rows) of W and all m rows of x; xp holds x packed by pack_activation_rows.
using StreamingRows = void (*)(const MatmulArgs& args, Range rows, const float* xp,
                               int64_t padded_k);

// The streaming (decode) path: packs x once (chunk, deinterleave as in pack_activation_rows),
// splits W's rows between threads and runs `rows_fn` on each share. Needs k > 0.
void run_streaming(const MatmulArgs& args, int chunk, bool deinterleave, StreamingRows rows_fn);

// Throws Internal naming `kernel` and `dtype` (for a dtype the dispatcher should have rejected).
// Out of line, in a baseline file, so that ISA files never build std::string code.
[[noreturn]] void throw_bad_dtype(const char* kernel, DType dtype);

// ---- threading ---------------------------------------------------------------------------------

// How many OpenMP threads a call of this size should use: all of omp_get_max_threads() for big
// products, 1 when the work is too small to pay for waking a team (tiny-model decode).
int matmul_thread_count(int64_t m, int64_t n, int64_t k);

// The part [begin, end) of [0, total) that `index` of `parts` owns; cuts fall on multiples of
// `align` (so threads never write the same cache line of y) except at total.
Range split_range(int64_t total, int parts, int index, int64_t align);

// A 64-byte aligned per-thread buffer of at least `floats` floats; slot 0..2 are independent
// buffers. Valid until the same thread asks for a bigger one in the same slot.
float* thread_scratch(int slot, size_t floats);

// ---- packing for the register-blocked (prefill) kernels ---------------------------------------

// W rows [row0, row0 + rows) × columns [k0, k0 + kc), decoded to fp32 and laid out k-major in
// panels of `nr` rows: dst[(panel * kc + p) * nr + r] = w[row0 + panel * nr + r][k0 + p].
// Rows past `rows` up to a multiple of nr are zero.
void pack_weight_panels(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0, int64_t kc,
                        int nr, float* dst);

// x rows [row0, row0 + rows) × columns [k0, k0 + kc) in slivers of `mr` rows, k-major:
// dst[(sliver * kc + p) * mr + i] = x[row0 + sliver * mr + i][k0 + p]; missing rows are zero.
void pack_activation_slivers(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                             int64_t kc, int mr, float* dst);

// ---- packing for the streaming (decode) kernels -----------------------------------------------

// x rows [row0, row0 + rows) copied to rows of `padded_k` floats (padded_k a multiple of `chunk`,
// zero beyond k). When `deinterleave` is set, each chunk of `chunk` values is stored evens first,
// then odds: the order in which bf16 weights come out of one vector load split by shift/mask.
void pack_activation_rows(const MatmulArgs& args, int64_t row0, int64_t rows, int chunk,
                          bool deinterleave, int64_t padded_k, float* dst);

}  // namespace lowbit::kernels::cpu::detail
