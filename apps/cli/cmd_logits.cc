// lowbit logits MODEL --prompt TEXT -o OUT.safetensors: fp32 logits of every position, for
// comparing lowbit with other engines; --dump-linear-io FILE also writes every decoder Linear's
// input and output, so that a reference can run each module on lowbit's own inputs (a check of the
// quantized Linears that float32 rounding upstream cannot blur).
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "command.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "lowbit/error.h"
#include "models/layers/linear.h"
#include "options.h"
#include "quant/pipeline/module_plan.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct LogitsOptions {
  ModelLoadOptions load;
  std::string model;
  PromptOptions prompt;
  std::string output;
  std::string dump_linear_io;
  int threads = 0;
};

// Keeps one Linear's inputs and outputs (rows appended call by call: one prompt runs its tokens
// in order).
class LinearIoRecorder : public models::LinearInputObserver {
 public:
  void observe(const float* x, int64_t rows, int64_t cols) override {
    in_cols_ = cols;
    in_.insert(in_.end(), x, x + rows * cols);
  }
  void observe_output(const float* y, int64_t rows, int64_t cols) override {
    out_cols_ = cols;
    out_.insert(out_.end(), y, y + rows * cols);
  }
  bool empty() const { return in_.empty(); }
  Tensor input() const { return matrix(in_, in_cols_); }
  Tensor output() const { return matrix(out_, out_cols_); }

 private:
  static Tensor matrix(const std::vector<float>& v, int64_t cols) {
    return Tensor::from_f32(v.data(), {static_cast<int64_t>(v.size()) / cols, cols}, DType::F32);
  }
  std::vector<float> in_, out_;
  int64_t in_cols_ = 1, out_cols_ = 1;
};

int run_logits(const LogitsOptions& options) {
  apply_threads(options.threads);
  auto model = models::Model::load(options.model, prepare_model_load(options.load));
  auto tokenizer = load_tokenizer_if_present(options.model);
  std::vector<int32_t> ids = resolve_prompt(options.prompt, options.model, tokenizer.get());
  // The decoder layers' Linears (not lm_head: the logits are written anyway), under their
  // Hugging Face names.
  std::vector<std::pair<std::string, std::unique_ptr<LinearIoRecorder>>> recorders;
  if (!options.dump_linear_io.empty()) {
    for (const quant::PlannedLinear& p : quant::plan_modules(*model, {}, {}).linears) {
      if (p.layer < 0) continue;
      recorders.emplace_back(p.name, std::make_unique<LinearIoRecorder>());
      p.linear->observer = recorders.back().second.get();
    }
  }
  auto cache = model->new_cache(static_cast<int64_t>(ids.size()));
  Tensor logits = model->forward(ids, cache, /*all_logits=*/true);
  if (!options.dump_linear_io.empty()) {
    std::map<std::string, Tensor> tensors;
    for (const auto& [name, recorder] : recorders) {
      if (recorder->empty()) {
        throw Unsupported("--dump-linear-io: " + name + " did not run on the CPU forward (the "
                          "dump needs the CPU path: leave --device at cpu)");
      }
      tensors.emplace(name + ".input", recorder->input());
      tensors.emplace(name + ".output", recorder->output());
    }
    formats::write_safetensors(options.dump_linear_io, tensors,
                               {{"model", options.model}, {"producer", "lowbit logits"}});
    std::printf("wrote %s: inputs and outputs of %zu Linear modules\n",
                options.dump_linear_io.c_str(), recorders.size());
  }

  Tensor input_ids = Tensor::zeros(DType::I64, {static_cast<int64_t>(ids.size())});
  for (size_t i = 0; i < ids.size(); ++i) input_ids.data_as<int64_t>()[i] = ids[i];
  formats::write_safetensors(options.output, {{"logits", logits}, {"input_ids", input_ids}},
                             {{"model", options.model}, {"producer", "lowbit logits"}});
  std::printf("wrote %s: logits %s (fp32), input_ids [%zu]\n", options.output.c_str(),
              logits.shape_string().c_str(), ids.size());
  return 0;
}

}  // namespace

void add_logits_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<LogitsOptions>();
  CLI::App* sub = app.add_subcommand(
      "logits", "Write fp32 logits of every prompt position to a safetensors file");
  sub->add_option("model", options->model, "Model directory")->required();
  add_prompt_options(sub, options->prompt, /*chat_flags=*/true);
  sub->add_option("-o,--output", options->output, "Output .safetensors file")->required();
  sub->add_option("--dump-linear-io", options->dump_linear_io,
                  "Also write each decoder Linear's input and output (fp32, '<module>.input' / "
                  "'<module>.output') to this .safetensors file")
      ->type_name("FILE");
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  commands.push_back({sub, [options] { return run_logits(*options); }});
}

}  // namespace lowbit::cli
