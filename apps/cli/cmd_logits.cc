// lowbit logits MODEL --prompt TEXT -o OUT.safetensors: fp32 logits of every position, for
// comparing lowbit with other engines.
#include <cstdio>
#include <map>

#include "command.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "options.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct LogitsOptions {
  ModelLoadOptions load;
  std::string model;
  PromptOptions prompt;
  std::string output;
  int threads = 0;
};

int run_logits(const LogitsOptions& options) {
  apply_threads(options.threads);
  auto model = models::Model::load(options.model, prepare_model_load(options.load));
  auto tokenizer = load_tokenizer_if_present(options.model);
  std::vector<int32_t> ids = resolve_prompt(options.prompt, options.model, tokenizer.get());
  auto cache = model->new_cache(static_cast<int64_t>(ids.size()));
  Tensor logits = model->forward(ids, cache, /*all_logits=*/true);

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
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  commands.push_back({sub, [options] { return run_logits(*options); }});
}

}  // namespace lowbit::cli
