// lowbit quantize MODEL -o OUT: llm-compressor's oneshot (src/quant/pipeline/oneshot.h), from a
// recipe file or from shorthand flags that build the recipe llm-compressor's examples use.
#include <cstdio>

#include "command.h"
#include "device.h"
#include "lowbit/error.h"
#include "options.h"
#include "quant/pipeline/calibration_backend.h"
#include "quant/pipeline/oneshot.h"
#include "quant/pipeline/recipe_plan.h"
#include "quant/recipe/recipe.h"

namespace lowbit::cli {
namespace {

struct QuantizeCliOptions {
  std::string model;
  std::string output;
  std::string recipe_file;
  quant::QuantizeFlags flags;
  std::string smoothquant;  // strength, as text so that "absent" is visible
  std::string dataset;
  std::string calibration_ids;
  std::string save_calibration_ids;
  int64_t num_samples = 512;
  int64_t seq_len = 2048;
  bool overwrite = false;
  bool resume = false;
  std::string eval_text;
  int64_t eval_windows = 0;
  bool json = false;
  bool no_progress = false;
  int threads = 0;
  DeviceOptions device;
};

void print_report(const quant::OneshotReport& r, bool json) {
  const double mb = 1024.0 * 1024.0;
  if (json) {
    std::printf(
        "{\"output\": \"%s\", \"quantized_modules\": %lld, \"calibration_samples\": %lld, "
        "\"calibration_tokens\": %lld, \"seconds\": %.3f, \"seconds_forward\": %.3f, "
        "\"seconds_hessian\": %.3f, "
        "\"seconds_algorithm\": %.3f, \"seconds_writing\": %.3f, \"peak_rss_bytes\": %lld, "
        "\"input_bytes\": %lld, \"output_bytes\": %lld, \"resumed_layers\": %d",
        r.output_dir.c_str(), static_cast<long long>(r.quantized_modules),
        static_cast<long long>(r.calibration_samples), static_cast<long long>(r.calibration_tokens),
        r.seconds_total, r.seconds_calibration_forward, r.seconds_hessian, r.seconds_algorithm,
        r.seconds_writing,
        static_cast<long long>(r.peak_rss_bytes), static_cast<long long>(r.input_bytes),
        static_cast<long long>(r.output_bytes), r.resumed_layers);
    if (r.perplexity) {
      std::printf(", \"perplexity\": %.6f, \"perplexity_tokens\": %lld", *r.perplexity,
                  static_cast<long long>(r.perplexity_tokens));
    }
    std::printf("}\n");
    return;
  }
  std::printf("wrote %s: %lld Linear modules quantized\n", r.output_dir.c_str(),
              static_cast<long long>(r.quantized_modules));
  std::printf("size on disk: %.2f MiB -> %.2f MiB (%.2fx smaller)\n", r.input_bytes / mb,
              r.output_bytes / mb, r.output_bytes > 0 ? double(r.input_bytes) / r.output_bytes : 0.0);
  std::printf("time: %.1f s (layer forwards %.1f s, of which Hessians %.1f s; algorithms %.1f s; "
              "writing %.1f s); peak RSS %.0f MiB\n",
              r.seconds_total, r.seconds_calibration_forward, r.seconds_hessian,
              r.seconds_algorithm, r.seconds_writing, r.peak_rss_bytes / mb);
  if (r.calibration_samples > 0) {
    std::printf("calibration: %lld samples, %lld tokens\n",
                static_cast<long long>(r.calibration_samples),
                static_cast<long long>(r.calibration_tokens));
  }
  if (r.resumed_layers > 0) std::printf("resumed: %d layers reused\n", r.resumed_layers);
  if (r.perplexity) {
    std::printf("perplexity of the quantized model: %.4f over %lld tokens\n", *r.perplexity,
                static_cast<long long>(r.perplexity_tokens));
  }
}

int run_quantize(QuantizeCliOptions o) {
  apply_threads(o.threads);
  quant::Recipe recipe;
  if (!o.recipe_file.empty()) {
    recipe = quant::read_recipe_file(o.recipe_file);
  } else {
    if (!o.smoothquant.empty()) {
      try {
        o.flags.smoothquant = std::stod(o.smoothquant);
      } catch (const std::exception&) {
        throw InvalidArgument("--smoothquant: '" + o.smoothquant + "' is not a number");
      }
    }
    recipe = quant::recipe_from_flags(o.flags);
  }
  quant::OneshotOptions options;
  options.model_dir = o.model;
  options.output_dir = o.output;
  options.plan = quant::plan_from_recipe(recipe);
  options.recipe_yaml = quant::recipe_to_yaml(recipe);
  options.calibration.path = o.calibration_ids.empty() ? o.dataset : o.calibration_ids;
  options.calibration.ids_file = !o.calibration_ids.empty();
  options.calibration.num_samples = o.num_samples;
  options.calibration.seq_len = o.seq_len;
  options.overwrite = o.overwrite;
  options.resume = o.resume;
  options.save_calibration_ids = o.save_calibration_ids;
  options.eval_text = o.eval_text;
  options.eval_windows = o.eval_windows;
  options.progress = !o.no_progress;
  const std::unique_ptr<quant::CalibrationBackend> backend = make_calibration_backend(o.device);
  options.backend = backend.get();
  print_report(quant::run_oneshot(options), o.json);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, CommandList& commands) {
  auto o = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Quantize a Hugging Face checkpoint (RTN, GPTQ, AWQ, SmoothQuant) into a compressed-tensors "
      "checkpoint that vLLM loads; --device cuda runs GPTQ's calibration forwards and column loop "
      "on the GPU");
  cmd->add_option("model", o->model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("-o,--output", o->output, "Output directory (written as OUT.tmp, then renamed)")
      ->required();
  cmd->add_option("--recipe", o->recipe_file,
                  "llm-compressor recipe YAML (instead of --scheme/--algo/--smoothquant)");
  cmd->add_option("--scheme", o->flags.scheme,
                  "Preset: W4A16, W4A16_ASYM, W8A16, W8A8, W4A8, W4A8_CHANNEL, W4AFP8, FP8, "
                  "FP8_DYNAMIC, FP8_BLOCK, NVFP4A16, NVFP4, MXFP4A16, MXFP4")
      ->capture_default_str();
  cmd->add_option("--algo", o->flags.algo, "rtn, gptq or awq")->capture_default_str();
  cmd->add_option("--smoothquant", o->smoothquant,
                  "Run SmoothQuant first with this smoothing strength (0.8 for W8A8)");
  cmd->add_option("--ignore", o->flags.ignore,
                  "Modules left unquantized (exact names or re:regex); --ignore \"\" quantizes "
                  "lm_head too (a tied one is untied, as llm-compressor does)")
      ->capture_default_str();
  cmd->add_option("--targets", o->flags.targets, "What to quantize (class name, names, re:regex)")
      ->capture_default_str();
  cmd->add_option("--kv-cache", o->flags.kv_cache, "fp8: calibrate FP8 k_scale / v_scale")
      ->check(CLI::IsMember({"", "fp8"}));
  cmd->add_option("--dataset", o->dataset,
                  "Calibration data: .txt (cut into windows), .jsonl / .json rows with text or "
                  "messages");
  cmd->add_option("--calibration-ids", o->calibration_ids,
                  "Use these token-id samples ({\"samples\": [[...]]}) instead of --dataset");
  cmd->add_option("--save-calibration-ids", o->save_calibration_ids,
                  "Also write the calibration samples used to this JSON file");
  cmd->add_option("--num-samples", o->num_samples, "Calibration samples")->capture_default_str();
  cmd->add_option("--seq-len", o->seq_len, "Tokens per calibration sample")->capture_default_str();
  cmd->add_option("--dampening-frac", o->flags.gptq_dampening_frac, "GPTQ dampening fraction")
      ->capture_default_str();
  cmd->add_option("--block-size", o->flags.gptq_block_size, "GPTQ block size")->capture_default_str();
  cmd->add_option("--actorder", o->flags.gptq_actorder, "GPTQ activation order: static (default), weight, group or none")
      ->capture_default_str();
  cmd->add_flag("--overwrite", o->overwrite, "Replace a non-empty output directory");
  cmd->add_flag("--resume", o->resume, "Continue an interrupted run from OUT.tmp");
  cmd->add_option("--eval", o->eval_text,
                  "Report the quantized model's perplexity on this text (512-token windows)");
  cmd->add_option("--eval-windows", o->eval_windows, "Evaluate only the first N windows");
  cmd->add_flag("--json", o->json, "Print the report as JSON");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->add_option("--device", o->device.device,
                  "Where GPTQ's calibration forwards (bf16 activations, as llm-compressor on a "
                  "GPU) and column loop run: cpu, or cuda (GPU 0; --tp for more). SmoothQuant, "
                  "AWQ, static activation scales and KV-cache scales run on the cpu only; "
                  "round-to-nearest needs no calibration and always runs on the cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size,--tp", o->device.tensor_parallel_size,
                  "With --device cuda: calibrate on GPUs 0..N-1 at once, each over its share of "
                  "the samples (data parallel; Hessians summed, GPTQ on GPU 0)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  add_threads_option(cmd, o->threads);
  commands.push_back({cmd, [o] { return run_quantize(*o); }});
}

}  // namespace lowbit::cli
