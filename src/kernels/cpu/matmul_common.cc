// ISA-neutral parts of the CPU matmul: threading plan, per-thread scratch and operand packing.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/float_convert.h"
#include "kernels/cpu/matmul_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// Below this many multiply-adds one thread finishes before a team is woken and synchronised
// (a few microseconds with libgomp, whose idle threads spin briefly). Measured on the tiny
// reference model's decode (bench/NOTES.md): 2 threads already win at 128×384 (49 K MACs).
constexpr double kMinParallelMacs = 32.0 * 1024.0;
// Each extra thread should get at least this much work.
constexpr double kMinMacsPerThread = 16.0 * 1024.0;

struct Scratch {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data;
  size_t floats = 0;
};

thread_local Scratch t_scratch[3];

}  // namespace

void throw_bad_dtype(const char* kernel, DType dtype) {
  throw Internal(std::string("matmul: ") + kernel + " got weight dtype " +
                 std::string(dtype_name(dtype)));
}

int matmul_thread_count(int64_t m, int64_t n, int64_t k) {
  if (omp_in_parallel()) return 1;  // a caller's parallel region already owns the cores
  int max_threads = omp_get_max_threads();
  double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (max_threads <= 1 || macs < kMinParallelMacs) return 1;
  double by_work = macs / kMinMacsPerThread;
  return static_cast<int>(std::max(1.0, std::min(static_cast<double>(max_threads), by_work)));
}

Range split_range(int64_t total, int parts, int index, int64_t align) {
  int64_t units = (total + align - 1) / align;
  int64_t base = units / parts;
  int64_t extra = units % parts;
  int64_t first = index * base + std::min<int64_t>(index, extra);
  int64_t count = base + (index < extra ? 1 : 0);
  Range r;
  r.begin = std::min(total, first * align);
  r.end = std::min(total, (first + count) * align);
  return r;
}

float* thread_scratch(int slot, size_t floats) {
  if (slot < 0 || slot >= 3) throw Internal("matmul: scratch slot " + std::to_string(slot));
  Scratch& s = t_scratch[slot];
  if (s.floats < floats) {
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw OutOfMemory("matmul: cannot allocate " + std::to_string(bytes) + " bytes");
    s.data.reset(p);
    s.floats = floats;
  }
  return s.data.get();
}

namespace {

// Rows that are k apart often share an L1 set (k·2 bytes a multiple of 4 KiB): reading them one
// element each per step would miss on every read, so each row is read kBlock elements at a time.
constexpr int64_t kBlock = 16;

template <typename T, typename Decode>
void pack_panels(const T* w, int64_t k, int64_t rows, int64_t k0, int64_t kc, int nr, float* dst,
                 Decode decode) {
  for (int64_t panel_row = 0; panel_row < rows; panel_row += nr) {
    const int64_t valid = std::min<int64_t>(nr, rows - panel_row);
    const T* src = w + panel_row * k + k0;
    for (int64_t p0 = 0; p0 < kc; p0 += kBlock) {
      const int64_t count = std::min(kBlock, kc - p0);
      for (int64_t r = 0; r < valid; ++r) {
        for (int64_t p = 0; p < count; ++p) dst[(p0 + p) * nr + r] = decode(src[r * k + p0 + p]);
      }
      for (int64_t p = 0; p < count; ++p) {
        std::fill(dst + (p0 + p) * nr + valid, dst + (p0 + p + 1) * nr, 0.0f);
      }
    }
    dst += kc * nr;
  }
}

}  // namespace

void pack_weight_panels(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0, int64_t kc,
                        int nr, float* dst) {
  const int64_t k = args.k;
  switch (args.w_dtype) {
    case DType::BF16:
      pack_panels(static_cast<const uint16_t*>(args.w) + row0 * k, k, rows, k0, kc, nr, dst,
                  [](uint16_t v) { return bf16_to_f32(v); });
      return;
    case DType::F16:
      pack_panels(static_cast<const uint16_t*>(args.w) + row0 * k, k, rows, k0, kc, nr, dst,
                  [](uint16_t v) { return f16_to_f32(v); });
      return;
    case DType::F32:
      pack_panels(static_cast<const float*>(args.w) + row0 * k, k, rows, k0, kc, nr, dst,
                  [](float v) { return v; });
      return;
    default:
      throw Internal("matmul: pack_weight_panels got dtype " + std::string(dtype_name(args.w_dtype)));
  }
}

void pack_activation_slivers(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                             int64_t kc, int mr, float* dst) {
  for (int64_t sliver = 0; sliver < rows; sliver += mr) {
    const int64_t valid = std::min<int64_t>(mr, rows - sliver);
    pack_panels(args.x + (row0 + sliver) * args.k, args.k, valid, k0, kc, mr, dst,
                [](float v) { return v; });
    dst += kc * mr;
  }
}

void pack_activation_rows(const MatmulArgs& args, int64_t row0, int64_t rows, int chunk,
                          bool deinterleave, int64_t padded_k, float* dst) {
  const int64_t k = args.k;
  const int half = chunk / 2;
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = args.x + (row0 + i) * k;
    float* out = dst + i * padded_k;
    if (!deinterleave) {
      std::memcpy(out, src, static_cast<size_t>(k) * sizeof(float));
      std::fill(out + k, out + padded_k, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < padded_k; c += chunk) {
      for (int j = 0; j < half; ++j) {
        int64_t even = c + 2 * j;
        out[c + j] = even < k ? src[even] : 0.0f;
        out[c + half + j] = even + 1 < k ? src[even + 1] : 0.0f;
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
