#include "quant/methods/kernel_linear.h"

#include <atomic>
#include <functional>
#include <mutex>

#include "core/float_convert.h"
#include "kernels/fp8_matmul.h"
#include "kernels/matmul.h"
#include "kernels/w8a8_matmul.h"
#include "kernels/wna16_matmul.h"
#include "lowbit/error.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

enum class Family { Wna16, W8a8, Fp8, Dequant };

namespace {
std::atomic<bool> keep_canonical_weights{false};

const char* family_name(Family f) {
  switch (f) {
    case Family::Wna16: return "wna16";
    case Family::W8a8: return "w8a8";
    case Family::Fp8: return "fp8";
    case Family::Dequant: return "dequant";
  }
  return "?";
}
}  // namespace

struct KernelLinear::State {
  Family family = Family::Dequant;
  int64_t rows = 0, cols = 0;
  std::optional<InputQuant> input;
  std::shared_ptr<const kernels::Wna16Packed> wna16;
  std::shared_ptr<const kernels::W8a8Packed> w8a8;
  std::shared_ptr<const kernels::IntWeights>
      w8a8_reference;  // int8 kernels cannot be probed exactly
  kernels::Int8Activations int8_act;
  std::shared_ptr<const kernels::Fp8Packed> fp8;
  Tensor dense;  // dequant: the weight in the model dtype
  std::string name;
  // Only with set_keep_canonical_weights(true): the weights as the format decoded them.
  std::shared_ptr<const kernels::IntWeights> canonical_int;
  std::shared_ptr<const kernels::Fp8Weights> canonical_fp8;
  // With the canonical weights kept (a model loaded for the GPU), the CPU kernel's own packing
  // waits for the layer's first CPU use: a GPU process never makes it, and for an 8B W4A16 model it
  // was a large share of the server's start (a second copy of every weight, reordered). The layer's
  // checks and the kernel choice still happen at load, so bad weights fail there as before.
  std::function<void(State&)> deferred_pack;  // set until packed
  std::atomic<bool> packed{true};
  std::mutex pack_mutex;  // guards deferred_pack and name while packing is deferred

  void ensure_packed() {
    if (packed.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(pack_mutex);
    if (packed.load(std::memory_order_relaxed)) return;
    deferred_pack(*this);
    deferred_pack = nullptr;
    packed.store(true, std::memory_order_release);
  }
  // Packs now; or, with the canonical weights kept, runs `check` (the checks packing starts with)
  // and leaves `pack` to the first use.
  void pack_when_needed(Family f, const std::function<void()>& check,
                        std::function<void(State&)> pack) {
    if (!keep_canonical_weights.load()) {
      pack(*this);
      return;
    }
    check();
    name = std::string(family_name(f)) + " (CPU layout packed on first CPU use)";
    deferred_pack = std::move(pack);
    packed.store(false, std::memory_order_release);
  }
};

namespace {

KernelSpec spec(const char* name, const char* implements) {
  KernelSpec k;
  k.name = name;
  k.isa = KernelSpec::Isa::Portable;  // each family dispatches scalar / AVX2 / AVX-512 inside
  k.implements = implements;
  return k;
}

KernelSpec dequant_spec() {
  return spec("dequant", "any scheme: weight dequantized at load, dense matmul, activations "
                         "fake-quantized in fp32 (the reference)");
}

// Picks the first family of `chain` that the layer's backend request allows and that builds.
// `build` throws Unsupported when the family cannot implement the layer.
template <typename Build>
void select(const LayerParams& layer, const std::vector<Family>& chain, Build build) {
  const std::string& wanted = layer.info().backend;
  std::string tried;
  for (Family f : chain) {
    if (!wanted.empty() && wanted != family_name(f)) continue;
    try {
      build(f);
      return;
    } catch (const Unsupported& e) {
      if (!wanted.empty()) {
        throw Unsupported("--linear-backend " + wanted + " cannot run " + layer.info().prefix +
                          ": " + e.what());
      }
      tried += std::string(tried.empty() ? "" : "; ") + family_name(f) + ": " + e.what();
    }
  }
  if (!wanted.empty()) {
    std::string names;
    for (Family f : chain) names += std::string(names.empty() ? "" : ", ") + family_name(f);
    throw Unsupported("--linear-backend " + wanted + " does not implement " +
                      layer.info().prefix + "'s scheme; its kernels are: " + names);
  }
  throw Unsupported("no kernel can run " + layer.info().prefix + " (" + tried + ")");
}

kernels::Int8Activations int8_activations(const InputQuant& in) {
  const QuantArgs& a = in.args;
  if (a.type != QuantType::Int || a.num_bits != 8) {
    throw Unsupported("activations are not int8");
  }
  kernels::Int8Activations act;
  if (a.is_dynamic()) {
    if (a.strategy != Strategy::Token || !a.symmetric) {
      throw Unsupported("dynamic int8 activations must be symmetric per token");
    }
    act.dynamic = true;
  } else {
    if (a.strategy != Strategy::Tensor) throw Unsupported("static activations must be per tensor");
    act.dynamic = false;
    act.static_scale = in.static_scale;
    act.static_zero = static_cast<int32_t>(in.static_zero);
  }
  return act;
}

// W = (Wᵀ)ᵀ read back through the kernel with an identity input: exact for weight-only kernels,
// whose single non-zero product per output is x = 1 times the decoded weight.
Tensor probe_weight(int64_t rows, int64_t cols,
                    const std::function<void(const float*, int64_t, float*)>& run) {
  std::vector<float> identity(static_cast<size_t>(cols * cols), 0.0f);
  for (int64_t i = 0; i < cols; ++i) identity[static_cast<size_t>(i * cols + i)] = 1.0f;
  std::vector<float> t(static_cast<size_t>(cols * rows));
  run(identity.data(), cols, t.data());
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      w[static_cast<size_t>(r * cols + c)] = t[static_cast<size_t>(c * rows + r)];
    }
  }
  return Tensor::from_f32(w.data(), {rows, cols}, DType::F32);
}

// The fastest wna16 kernel this CPU runs that keeps weights and inputs in fp32.
kernels::cpu::Wna16Kernel exact_wna16_kernel() {
  using kernels::cpu::Wna16Kernel;
  for (Wna16Kernel k : {Wna16Kernel::AVX512, Wna16Kernel::AVX2}) {
    if (kernels::cpu::wna16_kernel_supported(k)) return k;
  }
  return Wna16Kernel::SCALAR;
}

std::vector<float> dequantize_int(const kernels::IntWeights& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const int64_t g = w.group_of(c);
      out[static_cast<size_t>(r * w.cols + c)] =
          (static_cast<float>(w.codes[static_cast<size_t>(r * w.cols + c)]) - w.zero(r, g)) *
          w.scales[static_cast<size_t>(r * w.groups() + g)];
    }
  }
  return out;
}

std::vector<float> dequantize_fp8(const kernels::Fp8Weights& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const size_t i = static_cast<size_t>(r * w.cols + c);
      out[i] = fp8_e4m3_to_f32(w.codes[i]) * w.scale(r, c);
    }
  }
  return out;
}

}  // namespace

std::vector<KernelSpec> int_weight_kernels() {
  return {spec("wna16", "int 2-8 bit weights, group / channel, zero points, g_idx; fp32 inputs"),
          spec("w8a8", "int8 / int4 weights (no g_idx) x int8 inputs, dynamic per token or static"),
          dequant_spec()};
}
std::vector<KernelSpec> fp8_weight_kernels() {
  return {spec("fp8", "fp8 e4m3 weights, tensor / channel / group / block scales; fp32 inputs, "
                      "fp8 input quantization emulated in fp32"),
          dequant_spec()};
}
std::vector<KernelSpec> dequant_kernels() { return {dequant_spec()}; }

KernelLinear::KernelLinear() : state_(std::make_unique<State>()) {}
KernelLinear::~KernelLinear() = default;

void KernelLinear::finish_int(const LayerParams& layer, kernels::IntWeights weights,
                              std::optional<InputQuant> input, bool fake_quantized_inputs) {
  State& s = *state_;
  s.rows = weights.rows;
  s.cols = weights.cols;
  s.input = input;
  // Shared by the GPU backend (canonical_int) and a deferred CPU packing; otherwise packed and
  // dropped.
  const auto shared = std::make_shared<const kernels::IntWeights>(std::move(weights));
  if (keep_canonical_weights.load()) s.canonical_int = shared;
  // Inputs quantized to something other than int8 (W4AFP8: fp8) run on wna16 with the input
  // quantization emulated, like every other non-int8 input.
  const std::vector<Family> chain =
      input ? std::vector<Family>{Family::W8a8, Family::Wna16, Family::Dequant}
            : std::vector<Family>{Family::Wna16, Family::Dequant};
  select(layer, chain, [&](Family f) {
    if (f == Family::Wna16) {
      // Emulated input quantization (W4AFP8, LLM.int8()) keeps the kernels that compute in fp32:
      // rounding its grid inputs to bf16 (the bf16-dot kernel) or int16 (the i16-dot kernel)
      // would move them off the grid it emulates, and the next layer's rounding decisions with
      // them (measured: 0.05 on the bnb_int8 fixture's logits, against 1e-4).
      const bool exact = input || fake_quantized_inputs;
      s.pack_when_needed(
          f, [&] { kernels::cpu::check_wna16_weights(*shared); },
          [shared, exact](State& st) {
            st.wna16 = exact ? kernels::cpu::pack_wna16_with(exact_wna16_kernel(), *shared)
                             : kernels::pack_wna16(*shared);
            st.name = st.wna16->kernel_name();
          });
    } else if (f == Family::W8a8) {
      s.int8_act = int8_activations(*input);
      s.pack_when_needed(
          f, [&] { kernels::cpu::check_w8a8_weights(*shared); },
          [shared](State& st) {
            st.w8a8 = kernels::pack_w8a8(*shared);
            st.name = st.w8a8->kernel_name();
            st.w8a8_reference = shared;
          });
    } else {
      finish_dequant(layer, dequantize_int(*shared), input);
      return;
    }
    s.family = f;
  });
}

void KernelLinear::finish_fp8(const LayerParams& layer, kernels::Fp8Weights weights,
                              std::optional<InputQuant> input) {
  State& s = *state_;
  s.rows = weights.rows;
  s.cols = weights.cols;
  s.input = input;
  const auto shared = std::make_shared<const kernels::Fp8Weights>(std::move(weights));
  if (keep_canonical_weights.load()) s.canonical_fp8 = shared;
  select(layer, {Family::Fp8, Family::Dequant}, [&](Family f) {
    if (f == Family::Fp8) {
      s.pack_when_needed(
          f, [&] { kernels::cpu::check_fp8_weights(*shared); },
          [shared](State& st) {
            st.fp8 = kernels::pack_fp8(*shared);
            st.name = st.fp8->kernel_name();
          });
      s.family = f;
    } else {
      finish_dequant(layer, dequantize_fp8(*shared), input);
    }
  });
}

void KernelLinear::finish_dequant(const LayerParams& layer, const std::vector<float>& values,
                                  std::optional<InputQuant> input) {
  State& s = *state_;
  const LayerInfo& info = layer.info();
  if (!info.backend.empty() && info.backend != "dequant") {
    throw Unsupported("--linear-backend " + info.backend + " does not implement " + info.prefix +
                      "'s scheme; its only kernel is dequant");
  }
  s.rows = info.out_features;
  s.cols = info.in_features;
  s.input = std::move(input);
  s.dense = Tensor::from_f32(values.data(), {s.rows, s.cols}, info.params_dtype);
  s.family = Family::Dequant;
  s.name = std::string("dequant_") + kernels::matmul_kernel_name();
}

void KernelLinear::apply(const float* x, int64_t rows, const float* bias, float* y) const {
  state_->ensure_packed();
  const State& s = *state_;
  const float* in = x;
  thread_local std::vector<float> quantized;
  // int8 kernels quantize their input themselves; the others see fake-quantized fp32 inputs.
  if (s.input && s.family != Family::W8a8) {
    quantized.resize(static_cast<size_t>(rows * s.cols));
    fake_quantize_input(x, rows, s.cols, *s.input, quantized.data());
    in = quantized.data();
  }
  switch (s.family) {
    case Family::Wna16: kernels::matmul_wna16(in, rows, *s.wna16, bias, y); return;
    case Family::W8a8: kernels::matmul_w8a8(in, rows, *s.w8a8, s.int8_act, bias, y); return;
    case Family::Fp8: kernels::matmul_fp8(in, rows, *s.fp8, bias, y); return;
    case Family::Dequant: kernels::matmul(in, rows, s.cols, s.dense, bias, y); return;
  }
}

std::string KernelLinear::kernel_name() const {
  std::lock_guard<std::mutex> lock(state_->pack_mutex);
  return state_->name;
}

void KernelLinear::set_keep_canonical_weights(bool keep) { keep_canonical_weights.store(keep); }
const kernels::IntWeights* KernelLinear::int_weights() const { return state_->canonical_int.get(); }
const kernels::Fp8Weights* KernelLinear::fp8_weights() const { return state_->canonical_fp8.get(); }
const std::optional<InputQuant>& KernelLinear::input_quant() const { return state_->input; }

Tensor KernelLinear::dequantized_weight() const {
  state_->ensure_packed();
  const State& s = *state_;
  switch (s.family) {
    case Family::Wna16:
      // x in fp32 and (q - z) · s as ref forms it, on every kernel (the bf16-dot kernel's
      // blocked path rounds the weights to bf16, the i16-dot kernel quantizes x: a probe would
      // read either back).
      return probe_weight(s.rows, s.cols, [&](const float* x, int64_t m, float* y) {
        kernels::cpu::matmul_wna16_exact(x, m, *s.wna16, nullptr, y);
      });
    case Family::Fp8:
      return probe_weight(s.rows, s.cols, [&](const float* x, int64_t m, float* y) {
        kernels::matmul_fp8(x, m, *s.fp8, nullptr, y);
      });
    case Family::W8a8: {
      const std::vector<float> w = dequantize_int(*s.w8a8_reference);
      return Tensor::from_f32(w.data(), {s.rows, s.cols}, DType::F32);
    }
    case Family::Dequant: return s.dense.to_f32();
  }
  return Tensor();
}

size_t KernelLinear::weight_bytes() const {
  state_->ensure_packed();
  const State& s = *state_;
  switch (s.family) {
    case Family::Wna16: return s.wna16->bytes();
    case Family::W8a8: return s.w8a8->bytes();
    case Family::Fp8: return s.fp8->bytes();
    case Family::Dequant: return s.dense.nbytes();
  }
  return 0;
}

}  // namespace lowbit::quant
