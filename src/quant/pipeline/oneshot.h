// lowbit's oneshot: a Hugging Face checkpoint in, a compressed-tensors checkpoint out, the steps of
// an llm-compressor recipe in between (SmoothQuant, AWQ, GPTQ or round-to-nearest), one decoder
// layer at a time so that memory holds the model's mapped weights, one layer's work and the
// cached calibration activations.
//
// Output safety: everything is written under OUT.tmp and renamed to OUT at the end; the input is
// only read; a non-empty OUT needs `overwrite`. Resumable: after each quantized layer the layer's
// results are saved in OUT.tmp/.lowbit-resume; `resume` reloads them and continues, giving the same
// checkpoint byte for byte as a run that was never interrupted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "quant/pipeline/calibration_data.h"
#include "quant/pipeline/plan.h"

namespace lowbit::quant {

class CalibrationBackend;  // quant/pipeline/calibration_backend.h

struct OneshotOptions {
  std::string model_dir;
  std::string output_dir;
  OneshotPlan plan;
  std::string recipe_yaml;  // written next to the checkpoint as recipe.yaml
  CalibrationOptions calibration;
  bool overwrite = false;
  bool resume = false;
  std::string save_calibration_ids;  // non-empty: also write the samples used (JSON)
  // Heldout perplexity of the quantized model (in memory, before writing): text file, windows.
  std::string eval_text;
  int64_t eval_ctx = 512;
  int64_t eval_windows = 0;  // 0: all
  bool progress = true;      // the progress bar on stderr
  // Where GPTQ's calibration forwards and column loop run (not owned): null, the CPU; else the
  // backend (`--device cuda`), which refuses (Unsupported, before any work) the plans and models
  // it cannot run. Data-free round-to-nearest never needs it and stays on the CPU.
  CalibrationBackend* backend = nullptr;
};

struct OneshotReport {
  int64_t quantized_modules = 0;
  int64_t calibration_samples = 0;
  int64_t calibration_tokens = 0;
  double seconds_total = 0.0;
  double seconds_calibration_forward = 0.0;  // layer forward passes (calibrate + propagate)
  double seconds_hessian = 0.0;              // of which: GPTQ Hessian accumulation
  double seconds_algorithm = 0.0;            // GPTQ / RTN / smoothing searches
  double seconds_writing = 0.0;
  int64_t peak_rss_bytes = 0;
  int64_t input_bytes = 0;   // size on disk of the input's weight files
  int64_t output_bytes = 0;  // same for the output
  int resumed_layers = 0;
  std::optional<double> perplexity;  // when eval_text was given
  int64_t perplexity_tokens = 0;
  std::string output_dir;
};

OneshotReport run_oneshot(const OneshotOptions& options);

}  // namespace lowbit::quant
