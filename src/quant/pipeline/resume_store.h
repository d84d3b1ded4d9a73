// Checkpoints of a oneshot run in progress, so that a crash loses at most one layer: after each
// quantized layer, its Linears' fake-quantized weights and quantization results are saved under
// OUT.tmp/.lowbit-resume (layer-NNNNN.safetensors, then progress.json naming how many layers are
// done and a fingerprint of the run's inputs, both written atomically).
#pragma once

#include <cstdint>
#include <string>

#include "quant/pipeline/module_plan.h"
#include "quant/pipeline/quantize_pass.h"

namespace lowbit::quant {

class ResumeStore {
 public:
  ResumeStore(std::string dir, std::string fingerprint);

  // Layers completed by an earlier run with the same fingerprint (0 when there is none). Throws
  // InvalidArgument when the directory belongs to a run with different inputs.
  int completed_layers() const;

  void save_layer(int layer, const ModulePlan& plan, const QuantizeOutcome& outcome) const;
  // Restores the layer's Linear weights (and input quantization) and its outcome entries.
  void load_layer(int layer, ModulePlan& plan, QuantizeOutcome& outcome) const;
  void mark_done(int layers) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string layer_file(int layer) const;
  std::string dir_;
  std::string fingerprint_;
};

// A stable 64-bit FNV-1a hash, hex: the run's fingerprint is built from it.
std::string fingerprint_of(const std::string& data);

}  // namespace lowbit::quant
