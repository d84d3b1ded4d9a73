// Decoding of ggml's tensor types to fp32: the plain F32 / F16 / BF16 and the block-quantized
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. This is the scalar
// reference (what gguf-py's gguf.quants.dequantize computes, bit for bit): a loader converts GGUF
// weights with it, and faster kernels that work on the blocks directly are checked against it.
//
// It lives in formats/ rather than kernels/ because it decodes a storage layout (like the dtype
// conversions of a safetensors reader), needs nothing from kernels, and lets the GGUF fuzzer cover
// the parser and the decoder with lowbit_formats alone.
//
// Block layouts (ggml-common.h; all little-endian, fp16 scales; QK_K = 256 elements):
//   Q4_0  32 el, 18 B: d, qs[16]            x = d * (q - 8), q = 4 bits
//   Q4_1  32 el, 20 B: d, m, qs[16]         x = d * q + m
//   Q5_0  32 el, 22 B: d, qh[4], qs[16]     x = d * (q - 16), q = 4 low bits | 1 high bit
//   Q5_1  32 el, 24 B: d, m, qh[4], qs[16]  x = d * q + m
//   Q8_0  32 el, 34 B: d, qs[32] (int8)     x = d * q
//   Q2_K  84 B: scales[16] (4-bit scale | 4-bit min), qs[64], d, dmin; 16 groups of 16
//   Q3_K  110 B: hmask[32], qs[64], scales[12] (16 x 6 bits), d; 16 groups of 16
//   Q4_K  144 B: d, dmin, scales[12] (8 x 6-bit scale + 8 x 6-bit min), qs[128]; 8 groups of 32
//   Q5_K  176 B: d, dmin, scales[12], qh[32], qs[128]; 8 groups of 32
//   Q6_K  210 B: ql[128], qh[64], scales[16] (int8), d; 16 groups of 16
// Element order within each block is spelled out next to each decoder in gguf_dequant.cc.
#pragma once

#include <cstdint>
#include <span>

#include "formats/gguf.h"
#include "lowbit/tensor.h"

namespace lowbit::formats {

// Whether dequantize_gguf handles `type`.
bool gguf_can_dequantize(GgmlType type);

// Decodes `out.size()` elements (a multiple of the type's block size) from `data`, which must hold
// exactly out.size() / block_size * type_size bytes. Throws Unsupported for a type not handled
// here and InvalidArgument on a size mismatch.
void dequantize_gguf(GgmlType type, std::span<const uint8_t> data, std::span<float> out);

// One Q6_K super-block (210 bytes) as its 256 codes q in [0, 64), element order, and its 16 group
// scales d · scales[g] (exact in fp32): element e is scales[e / 16] · (q[e] - 32). The float
// decoder and the int kernels' loader (quant/methods/gguf.cc) both read blocks through this.
void q6_k_codes(const uint8_t* block, uint8_t* codes, float* scales);

// A tensor of `file` decoded into a new F32 Tensor of shape info.shape() (row-major).
// Errors name the file and the tensor.
Tensor dequantize_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info);

}  // namespace lowbit::formats
