// lowbit recommend: which quantization scheme to use for a model on a GPU (or this CPU), why, and
// the command lines that produce and serve it (src/eval/recommend.h; docs/recommend.md).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.h"
#include "eval/recommend.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

struct RecommendOptions {
  std::string gpu = "auto";
  int num_gpus = 0;  // 0: as detected (auto) or 1
  double gpu_memory = 0;
  std::string model_params;
  std::string workload = "chat";
  int64_t context = 0;
  int64_t concurrency = 32;
  std::string accuracy = "balanced";
  std::string scheme;
  std::string compare;
  bool json = false;
};

// --gpu NAME|auto|none → the target GPU (nullopt: this CPU) and how many were detected.
std::optional<eval::GpuSpec> resolve_gpu(const RecommendOptions& o, int* detected,
                                         std::string* note) {
  *detected = 0;
  if (o.gpu == "none" || o.gpu == "cpu") return std::nullopt;
  if (o.gpu == "auto") {
    const std::vector<eval::GpuSpec> gpus = eval::detect_gpus();
    if (gpus.empty()) {
      *note = "--gpu auto: no GPU found (nvidia-smi absent or failing), so this recommends for "
              "this machine's CPU";
      return std::nullopt;
    }
    *detected = static_cast<int>(gpus.size());
    *note = "--gpu auto: " + std::to_string(gpus.size()) + " x " + gpus[0].full_name +
            " detected by nvidia-smi";
    return gpus[0];
  }
  std::optional<eval::GpuSpec> gpu = eval::find_gpu(o.gpu);
  if (!gpu) {
    throw InvalidArgument("--gpu: unknown GPU '" + o.gpu + "'; known: " + eval::known_gpu_names() +
                          " (or auto, none; --gpu-memory overrides a known GPU's memory)");
  }
  return gpu;
}

int run_recommend(const RecommendOptions& o) {
  eval::RecommendRequest req;
  req.workload = eval::parse_workload(o.workload, "--workload");
  req.accuracy = eval::parse_accuracy(o.accuracy, "--accuracy");
  LOWBIT_CHECK(o.context >= 0, "--context must be positive");
  LOWBIT_CHECK(o.concurrency >= 1, "--concurrency must be at least 1");
  LOWBIT_CHECK(o.num_gpus >= 0, "--num-gpus must be at least 1");
  LOWBIT_CHECK(o.gpu_memory >= 0, "--gpu-memory must be positive (GB)");
  req.context = o.context;
  req.concurrency = o.concurrency;
  if (!o.scheme.empty()) {
    try {
      req.scheme = eval::scheme_facts(o.scheme).name;
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("--scheme: ") + e.what());
    }
  }
  if (!o.compare.empty()) {
    req.compare = eval::read_compare_result(o.compare);
    req.compare_path = o.compare;
  }

  std::string model = o.model_params;
  if (model.empty() && req.compare && std::filesystem::is_directory(req.compare->model)) {
    model = req.compare->model;  // the model compare measured
  }
  LOWBIT_CHECK(!model.empty(), "--model-params is required: a parameter count (70B, 8e9) or a "
                               "model directory");
  req.model = eval::parse_model_params(model, "--model-params");

  int detected = 0;
  std::string note;
  req.gpu = resolve_gpu(o, &detected, &note);
  if (req.gpu && o.gpu_memory > 0) req.gpu->memory_gb = o.gpu_memory;
  req.num_gpus = o.num_gpus > 0 ? o.num_gpus : std::max(1, detected);

  eval::Recommendation rec = eval::recommend(req);
  if (!note.empty()) rec.assumptions.insert(rec.assumptions.begin(), note);
  if (o.json) {
    std::printf("%s\n", eval::recommendation_to_json(rec).dump(2).c_str());
  } else {
    std::printf("%s", eval::recommendation_to_text(rec).c_str());
  }
  return 0;
}

}  // namespace

void add_recommend_command(CLI::App& app, CommandList& commands) {
  auto o = std::make_shared<RecommendOptions>();
  CLI::App* sub = app.add_subcommand(
      "recommend",
      "Recommend a quantization scheme for a model on a GPU (or this CPU): seed 004's decision "
      "tree with its reasons, the quantize command and the serve command");
  sub->add_option("--gpu", o->gpu,
                  "Target GPU: a name (H100, A100, L40S, B200, GB300, RTX 4090, MI300X, ...), "
                  "auto (nvidia-smi) or none (this CPU)")
      ->capture_default_str();
  sub->add_option("--num-gpus", o->num_gpus, "GPUs available (default: as detected, else 1)");
  sub->add_option("--gpu-memory", o->gpu_memory, "Memory per GPU in GB (overrides the catalogue)");
  sub->add_option("--model-params", o->model_params,
                  "Parameter count (70B, 1.5B, 8e9) or a model directory (its config and "
                  "safetensors)");
  sub->add_option("--workload", o->workload, "chat, batch or long-context")->capture_default_str();
  sub->add_option("--context", o->context,
                  "Tokens per sequence (default: 8192; 131072 for long-context)");
  sub->add_option("--concurrency", o->concurrency, "Sequences served at once")
      ->capture_default_str();
  sub->add_option("--accuracy", o->accuracy, "Accuracy budget: strict, balanced or aggressive")
      ->capture_default_str();
  sub->add_option("--scheme", o->scheme, "Check this scheme on the target (a preset name)");
  sub->add_option("--compare", o->compare,
                  "A `lowbit compare` result (compare.json): choose by its measurements");
  sub->add_flag("--json", o->json, "Print JSON");
  commands.push_back({sub, [o] { return run_recommend(*o); }});
}

}  // namespace lowbit::cli
