// Scalar decoders of ggml's block formats, one function per type, each decoding one block.
// The output equals gguf-py's gguf.quants.dequantize bit for bit, whatever the compiler does with
// the arithmetic: every product here is exact in float32. An fp16 scale has an 11-bit significand
// and the integer factors it meets have at most 12 significant bits together (Q6_K: int8 scale,
// 7 bits, times a quant in [-32, 31], 5 bits; Q8_0: a 7-bit quant), so no product needs more than
// 23 of float32's 24 bits. The final "+ m" / "- min" is then the only rounding, the same one
// numpy does, and neither the order of the products nor a fused multiply-add changes a result
// (checked: the test passes with -march=native -ffp-contract=fast, which emits vfmadd here).
#include "formats/gguf_dequant.h"

#include <cstring>

#include "core/float_convert.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

constexpr int kQK = 256;  // QK_K: elements in a K-quant super-block

float fp16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// Q4_0: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
void decode_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void decode_q4_1(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const float m = fp16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0xF) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1: the nibbles as in Q4_0, plus bit j of the little-endian u32 qh as bit 4 of
// element j.
int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  int low = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1) << 4);
}

uint32_t u32_at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void decode_q5_0(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const uint32_t qh = u32_at(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_value(b + 6, qh, j) - 16);
}

void decode_q5_1(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const float m = fp16_at(b + 2);
  const uint32_t qh = u32_at(b + 4);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_value(b + 8, qh, j)) + m;
}

void decode_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q2_K: element e takes bits 2s..2s+1 of qs[32 * (e / 128) + e % 32], s = (e % 128) / 32; group
// g = e / 16 has scale d * (scales[g] & 15) and min dmin * (scales[g] >> 4).
void decode_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = fp16_at(b + 80);
  const float dmin = fp16_at(b + 82);
  for (int e = 0; e < kQK; ++e) {
    const int g = e / 16;
    const float dl = d * static_cast<float>(scales[g] & 0xF);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K's 16 six-bit scales: the low 4 bits are nibbles of bytes 0-7 (low nibbles first), the
// high 2 bits are 2-bit fields of bytes 8-11 (scale i: byte 8 + i % 4, field i / 4); bias 32.
int q3_k_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Q3_K: 2 low bits as in Q2_K; bit e / 32 of hmask[e % 32] set means no -4 offset.
void decode_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = fp16_at(b + 108);
  for (int e = 0; e < kQK; ++e) {
    const float dl = d * static_cast<float>(q3_k_scale(scales, e / 16));
    const int low = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int high = (hmask[e % 32] >> (e / 32)) & 1;
    y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
  }
}

// Q4_K / Q5_K's 8 six-bit scales and mins in 12 bytes: groups 0-3 use the low 6 bits of bytes
// 0-3 (scale) and 4-7 (min); groups 4-7 take 4 bits from bytes 8-11 (scale: low nibble, min: high
// nibble) and their top 2 bits from the top 2 bits of bytes 0-3 (scale) and 4-7 (min).
void k_scale_min(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: group j = e / 32 reads nibble j % 2 of qs[32 * (j / 2) + e % 32]; Q5_K adds bit j of
// qh[e % 32] as bit 4. x = (d * scale_j) * q - dmin * min_j.
void decode_q45_k(const uint8_t* b, float* y, bool five_bits) {
  const float d = fp16_at(b);
  const float dmin = fp16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = five_bits ? b + 48 : b + 16;
  for (int j = 0; j < 8; ++j) {
    int scale = 0;
    int min = 0;
    k_scale_min(scales, j, &scale, &min);
    const float dl = d * static_cast<float>(scale);
    const float ml = dmin * static_cast<float>(min);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
      if (five_bits) q |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

void decode_q4_k(const uint8_t* b, float* y) { decode_q45_k(b, y, false); }
void decode_q5_k(const uint8_t* b, float* y) { decode_q45_k(b, y, true); }

// Q6_K: codes and group scales from q6_k_codes (below), bias 32.
void decode_q6_k(const uint8_t* b, float* y) {
  uint8_t codes[kQK];
  float scales[kQK / 16];
  q6_k_codes(b, codes, scales);
  for (int e = 0; e < kQK; ++e) y[e] = scales[e / 16] * static_cast<float>(codes[e] - 32);
}

void decode_f32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void decode_f16(const uint8_t* b, float* y) { *y = fp16_at(b); }
void decode_bf16(const uint8_t* b, float* y) {
  *y = bf16_to_f32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
}

using BlockDecoder = void (*)(const uint8_t*, float*);

BlockDecoder decoder_for(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return decode_f32;
    case GgmlType::F16:
      return decode_f16;
    case GgmlType::BF16:
      return decode_bf16;
    case GgmlType::Q4_0:
      return decode_q4_0;
    case GgmlType::Q4_1:
      return decode_q4_1;
    case GgmlType::Q5_0:
      return decode_q5_0;
    case GgmlType::Q5_1:
      return decode_q5_1;
    case GgmlType::Q8_0:
      return decode_q8_0;
    case GgmlType::Q2_K:
      return decode_q2_k;
    case GgmlType::Q3_K:
      return decode_q3_k;
    case GgmlType::Q4_K:
      return decode_q4_k;
    case GgmlType::Q5_K:
      return decode_q5_k;
    case GgmlType::Q6_K:
      return decode_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

// Q6_K: in each half h = e / 128 (r = e % 128), the low 4 bits are nibble r / 64 of
// ql[64 h + r % 64], the high 2 bits are field r / 32 of qh[32 h + e % 32]; group e / 16 has
// scale d * scales[g] (int8).
void q6_k_codes(const uint8_t* block, uint8_t* codes, float* scales) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = fp16_at(block + 208);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128;
    const int r = e % 128;
    const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (qh[32 * h + e % 32] >> (2 * (r / 32))) & 3;
    codes[e] = static_cast<uint8_t>(low | (high << 4));
  }
  for (int g = 0; g < kQK / 16; ++g) scales[g] = d * static_cast<float>(sc[g]);
}

bool gguf_can_dequantize(GgmlType type) { return decoder_for(type) != nullptr; }

void dequantize_gguf(GgmlType type, std::span<const uint8_t> data, std::span<float> out) {
  const GgmlTypeTraits& traits = ggml_type_traits(type);
  BlockDecoder decode = decoder_for(type);
  if (decode == nullptr) {
    throw Unsupported(std::string("dequantizing ggml type ") + traits.name +
                      " is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, "
                      "Q3_K, Q4_K, Q5_K, Q6_K are)");
  }
  if (out.size() % traits.block_size != 0) {
    throw InvalidArgument(std::to_string(out.size()) + " " + traits.name +
                          " elements are not a whole number of " +
                          std::to_string(traits.block_size) + "-element blocks");
  }
  const size_t blocks = out.size() / traits.block_size;
  if (data.size() / traits.type_size != blocks || data.size() % traits.type_size != 0) {
    throw InvalidArgument(std::to_string(out.size()) + " " + traits.name + " elements need " +
                          std::to_string(blocks * traits.type_size) + " bytes, got " +
                          std::to_string(data.size()));
  }
  for (size_t i = 0; i < blocks; ++i) {
    decode(data.data() + i * traits.type_size, out.data() + i * traits.block_size);
  }
}

Tensor dequantize_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info) {
  const std::string where = file.path() + ": tensor " + detail::printable(info.name) + ": ";
  if (!gguf_can_dequantize(info.type)) {
    throw Unsupported(where + "ggml type " + std::string(ggml_type_name(info.type)) +
                      " cannot be dequantized by lowbit yet");
  }
  Tensor out = Tensor::zeros(DType::F32, info.shape());
  try {
    dequantize_gguf(info.type, file.tensor_data(info),
                    std::span<float>(out.data_as<float>(), static_cast<size_t>(info.numel())));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + e.what());
  }
  return out;
}

}  // namespace lowbit::formats
