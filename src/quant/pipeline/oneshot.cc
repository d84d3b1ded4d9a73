#include "quant/pipeline/oneshot.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "core/log.h"
#include "core/memory_usage.h"
#include "eval/perplexity.h"
#include "lowbit/error.h"
#include "models/layer_runner.h"
#include "quant/pipeline/calibration_backend.h"
#include "quant/pipeline/module_plan.h"
#include "quant/pipeline/output_writer.h"
#include "quant/pipeline/progress.h"
#include "quant/pipeline/quantize_pass.h"
#include "quant/pipeline/resume_store.h"
#include "quant/pipeline/smoothing_pass.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t weight_bytes(const fs::path& dir) {
  int64_t total = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path a = fs::weakly_canonical(inner), b = fs::weakly_canonical(outer);
  auto it = a.begin();
  for (const fs::path& part : b) {
    if (it == a.end() || *it != part) return false;
    ++it;
  }
  return true;
}

// Refuses outputs that would clobber the input or a user's files; prepares OUT.tmp.
void check_paths(const OneshotOptions& o) {
  if (o.output_dir.empty()) throw InvalidArgument("no output directory given (-o OUT)");
  if (is_within(o.output_dir, o.model_dir)) {
    throw InvalidArgument(o.output_dir + ": the output must not be inside the input model directory " +
                          o.model_dir);
  }
  if (is_within(o.model_dir, o.output_dir)) {
    throw InvalidArgument(o.output_dir + ": the output must not contain the input model directory");
  }
  const fs::path out(o.output_dir);
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)) && !o.overwrite) {
    throw InvalidArgument(o.output_dir + ": exists and is not empty; pass --overwrite to replace it");
  }
  const fs::path tmp = o.output_dir + ".tmp";
  if (fs::exists(tmp) && !o.resume) {
    if (!o.overwrite) {
      throw InvalidArgument(tmp.string() + ": an unfinished run is there; pass --resume to continue "
                            "it or --overwrite to start over");
    }
    fs::remove_all(tmp);
  }
}

std::string run_fingerprint(const OneshotOptions& o, const CalibrationSet& samples) {
  std::string data = read_text(fs::path(o.model_dir) / "config.json") + "\n" + o.recipe_yaml + "\n";
  for (const std::vector<int32_t>& s : samples) {
    data.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
    data.push_back('\n');
  }
  return fingerprint_of(data);
}

const QuantArgs& first_weight_args(const QuantizeStep& q) {
  for (const auto& [name, scheme] : q.groups) {
    if (scheme.weights) return *scheme.weights;
  }
  throw InvalidArgument("AWQ needs a following quantization step with weight quantization");
}

void evaluate(const OneshotOptions& o, const models::Model& model, OneshotReport& report) {
  const Tokenizer tok = Tokenizer::from_dir(o.model_dir);
  std::string text = read_text(o.eval_text);
  // Python's text mode, as `lowbit ppl` and the reference numbers read it: CRLF and CR → LF.
  std::string lf;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      lf.push_back(text[i]);
    } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
      lf.push_back('\n');
    }
  }
  eval::PerplexityOptions po;
  po.context = o.eval_ctx;
  po.max_windows = o.eval_windows;
  const eval::PerplexityResult r = eval::perplexity(model, tok.encode(lf, false), po);
  report.perplexity = r.perplexity;
  report.perplexity_tokens = r.scored_tokens;
}

// Writes each finished layer's resume state (its quantized weights: ~0.4 GB for an 8B layer,
// fsynced) on a thread of its own while the next layer computes; one write in flight at a time,
// in layer order, each marked done after it is written. A failed write is rethrown by the next
// save() or by finish(). The writer reads only the finished layer's Linears (which the pipeline
// no longer touches) and its own copy of the layer's outcome.
class ResumeWriter {
 public:
  ResumeWriter(const ResumeStore& store, const ModulePlan& plan) : store_(store), plan_(plan) {}
  ~ResumeWriter() {
    if (pending_.valid()) pending_.wait();  // an error is already on its way out
  }
  ResumeWriter(const ResumeWriter&) = delete;
  ResumeWriter& operator=(const ResumeWriter&) = delete;

  void save(int layer, const QuantizeOutcome& outcome) {
    finish();
    QuantizeOutcome snapshot;
    for (int index : plan_.of_layer(layer)) {
      const auto it = outcome.modules.find(index);
      if (it != outcome.modules.end()) snapshot.modules.emplace(index, it->second);
    }
    if (const auto kv = outcome.kv.find(layer); kv != outcome.kv.end()) snapshot.kv.insert(*kv);
    pending_ = std::async(std::launch::async, [this, layer, s = std::move(snapshot)] {
      store_.save_layer(layer, plan_, s);
      store_.mark_done(layer + 1);
    });
  }
  void finish() {
    if (pending_.valid()) pending_.get();
  }

 private:
  const ResumeStore& store_;
  const ModulePlan& plan_;
  std::future<void> pending_;
};

}  // namespace

OneshotReport run_oneshot(const OneshotOptions& o) {
  const auto start = Clock::now();
  if (o.plan.steps.empty() || !std::holds_alternative<QuantizeStep>(o.plan.steps.back())) {
    throw InvalidArgument("the recipe has no quantization modifier (GPTQModifier or "
                          "QuantizationModifier) at its end");
  }
  if (!o.eval_text.empty() && !fs::exists(o.eval_text)) {
    throw InvalidArgument(o.eval_text + ": evaluation text not found");
  }
  check_paths(o);
  std::unique_ptr<models::Model> model = models::Model::load(o.model_dir);
  const QuantizeStep& quantize = o.plan.quantize();
  ModulePlan plan = plan_modules(*model, quantize.groups, quantize.ignore);
  const DType compute = model->weights().embed.dtype();
  OneshotReport report;
  report.input_bytes = weight_bytes(o.model_dir);

  bool needs_data = needs_calibration(quantize);
  for (const PlanStep& s : o.plan.steps) {
    if (std::holds_alternative<QuantizeStep>(s)) continue;
    check_smoothable(*model);  // SmoothQuant and AWQ fold scales into the norms
    needs_data = true;
  }
  // The backend does the calibrated work; data-free round-to-nearest never needs one.
  CalibrationBackend* backend = needs_data ? o.backend : nullptr;
  if (backend != nullptr) {
    const std::string why = backend->unsupported(*model, o.plan);
    if (!why.empty()) throw Unsupported("--device " + backend->name() + ": " + why);
  } else if (o.backend != nullptr) {
    log_info("round-to-nearest without calibration data: quantizing on the CPU");
  }
  CalibrationSet samples;
  if (needs_data) {
    if (o.calibration.path.empty()) {
      throw InvalidArgument("this recipe needs calibration data: pass --dataset FILE");
    }
    samples = load_calibration(o.calibration, o.model_dir);
    if (!o.save_calibration_ids.empty()) {
      save_calibration_ids(samples, o.calibration.seq_len, o.save_calibration_ids);
    }
  }
  report.calibration_samples = static_cast<int64_t>(samples.size());
  for (const auto& s : samples) report.calibration_tokens += static_cast<int64_t>(s.size());

  const std::string tmp = o.output_dir + ".tmp";
  ResumeStore store((fs::path(tmp) / ".lowbit-resume").string(), run_fingerprint(o, samples));
  const int resumable = store.completed_layers();
  const int layers = static_cast<int>(model->config().num_layers);
  models::LayerRunner runner(*model);
  Progress progress(o.progress);

  double algorithm = 0.0;
  for (const PlanStep& step : o.plan.steps) {
    if (std::holds_alternative<QuantizeStep>(step)) break;
    ActivationCache cache = embed_samples(runner, samples, model->config().hidden_size);
    const SmoothingContext sctx{model.get(), compute};
    const bool awq = std::holds_alternative<AwqStep>(step);
    progress.start(awq ? "AWQ" : "SmoothQuant", layers);
    for (int l = 0; l < layers; ++l) {
      const auto t = Clock::now();
      if (awq) {
        awq_layer(sctx, std::get<AwqStep>(step), first_weight_args(quantize), l, runner, cache);
      } else {
        smoothquant_layer(sctx, std::get<SmoothQuantStep>(step), l, runner, cache);
      }
      algorithm += since(t);
      progress.layer_done(l);
    }
    progress.finish();
  }

  QuantizeOutcome outcome;
  const QuantizeContext ctx{model.get(), &plan, &quantize, compute, backend};
  progress.start(quantize.gptq ? "GPTQ" : "quantize", layers);
  if (backend != nullptr) {
    log_info("calibration forwards and GPTQ on " + backend->name());
    backend->begin(*model, samples);
    ResumeWriter writer(store, plan);
    for (int l = 0; l < layers; ++l) {
      if (l < resumable) {
        store.load_layer(l, plan, outcome);
        backend->propagate(l);
        ++report.resumed_layers;
      } else {
        quantize_layer_on(ctx, l, outcome);
        writer.save(l, outcome);
      }
      progress.layer_done(l);
    }
    writer.finish();
    outcome.forward_seconds = backend->forward_seconds();
    outcome.hessian_seconds = backend->hessian_seconds();
  } else if (needs_calibration(quantize)) {
    ActivationCache cache = embed_samples(runner, samples, model->config().hidden_size);
    log_info("calibration on the CPU: cache " + std::to_string(cache.bytes() >> 20) + " MiB for " +
             std::to_string(cache.tokens()) + " tokens");
    for (int l = 0; l < layers; ++l) {
      if (l < resumable) {
        store.load_layer(l, plan, outcome);
        propagate_layer(ctx, l, runner, cache, outcome);
        ++report.resumed_layers;
      } else {
        quantize_layer(ctx, l, runner, cache, outcome);
        store.save_layer(l, plan, outcome);
        store.mark_done(l + 1);
      }
      progress.layer_done(l);
    }
  } else {
    for (int l = 0; l < layers; ++l) {
      quantize_layer_rtn(ctx, l, outcome);
      progress.layer_done(l);
    }
  }
  quantize_layer_rtn(ctx, -1, outcome);  // lm_head, when a user targets it
  for (const auto& [index, m] : outcome.modules) enable_input_quantization(ctx, index, m);
  progress.finish();
  report.quantized_modules = static_cast<int64_t>(outcome.modules.size());
  report.seconds_calibration_forward = outcome.forward_seconds;
  report.seconds_hessian = outcome.hessian_seconds;
  report.seconds_algorithm = algorithm + outcome.algorithm_seconds;

  const OutputRequest request{model.get(), &plan, &quantize, &outcome, compute, o.recipe_yaml};
  if (!o.eval_text.empty()) {
    load_written_weights(request);  // evaluate exactly what gets written
    evaluate(o, *model, report);
  }

  const auto write_start = Clock::now();
  write_quantized_checkpoint(request, tmp);
  fs::remove_all(store.dir());
  if (fs::exists(o.output_dir)) fs::remove_all(o.output_dir);
  fs::rename(tmp, o.output_dir);
  report.seconds_writing = since(write_start);
  report.output_bytes = weight_bytes(o.output_dir);
  report.output_dir = o.output_dir;
  report.peak_rss_bytes = peak_rss_bytes();
  report.seconds_total = since(start);
  return report;
}

}  // namespace lowbit::quant
