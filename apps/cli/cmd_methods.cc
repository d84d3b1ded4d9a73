// lowbit methods: every registered quantization method (plugins included), what it declares, and
// where it runs: a support matrix over GPU generations and CPUs derived from the kernels each
// method declares, plus this machine.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "lowbit/quant_method.h"
#include "options.h"
#include "quant/methods/gpu_linear_kernels.h"

#ifdef LOWBIT_CUDA_BACKEND
#include "kernels/cuda/device_info.h"
#endif

namespace lowbit::cli {
namespace {

#ifdef LOWBIT_CUDA_BACKEND
// The first CUDA device's compute capability (-1: none), for Platform::current().
int first_cuda_device() {
  const std::vector<kernels::cuda::DeviceInfo> devices = kernels::cuda::list_devices();
  return devices.empty() ? -1 : devices.front().compute_capability;
}
#endif

struct Column {
  const char* name;
  quant::Platform platform;
};

std::vector<Column> matrix_columns() {
  auto gpu = [](int cc) {
    quant::Platform p;
    p.cuda_capability = cc;
    return p;
  };
  quant::Platform amd;
  amd.rocm = true;
  quant::Platform x86;
  x86.x86 = x86.avx2 = x86.avx512 = x86.avx512_vnni = x86.avx512_bf16 = true;
  quant::Platform arm;
  arm.arm = true;
  return {{"Volta", gpu(70)},  {"Turing", gpu(75)},    {"Ampere", gpu(80)},
          {"Ada", gpu(89)},    {"Hopper", gpu(90)},    {"Blackwell", gpu(100)},
          {"AMD GPU", amd},    {"x86 CPU", x86},       {"Arm CPU", arm},
          {"this machine", quant::Platform::current()}};
}

bool runs_on(const quant::MethodDescription& d, const quant::Platform& p) {
  for (const quant::KernelSpec& k : d.kernels) {
    if (k.runs_on(p)) return true;
  }
  return false;
}

std::string join_dtypes(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : ",") + std::string(dtype_name(d));
  return s;
}

std::string join_layers(const std::vector<quant::LayerKind>& kinds) {
  std::string s;
  for (quant::LayerKind k : kinds) s += (s.empty() ? "" : ", ") + std::string(quant::layer_kind_name(k));
  return s;
}

nlohmann::json to_json(const quant::MethodDescription& d, const std::vector<Column>& columns) {
  nlohmann::json j;
  j["name"] = d.name;
  j["summary"] = d.summary;
  j["min_capability"] = d.min_capability;
  j["act_dtypes"] = join_dtypes(d.act_dtypes);
  j["layers"] = join_layers(d.layers);
  j["online"] = d.online;
  j["config_filenames"] = d.config_filenames;
  if (!d.unsupported.empty()) j["unsupported"] = d.unsupported;
  for (const Column& c : columns) j["support"][c.name] = runs_on(d, c.platform);
  j["kernels"] = nlohmann::json::array();
  for (const quant::KernelSpec& k : d.kernels) {
    nlohmann::json kj = {{"name", k.name},
                         {"implements", k.implements},
                         {"runs_here", k.runs_on(quant::Platform::current())},
                         {"missing_here", k.missing_on(quant::Platform::current())}};
    if (k.isa == quant::KernelSpec::Isa::Cuda) {
      kj["isa"] = "cuda";
      kj["min_capability"] = k.min_capability;
    } else {
      kj["isa"] = "cpu";
    }
    j["kernels"].push_back(kj);
  }
  return j;
}

// What the GPU columns mean for this binary: which compiled architectures it holds, the
// generations they run on, and how to build for the others.
std::string gpu_footer(const std::vector<Column>& columns) {
  if (!quant::cuda_backend_built()) {
    return "This lowbit was built without the CUDA backend: no method declares a GPU kernel and no "
           "GPU is probed, so the GPU columns say \"-\" (configure with -DLOWBIT_CUDA=ON on a "
           "machine with nvcc; docs/gpu.md).\n";
  }
  std::string runs, lacks;
  for (const Column& c : columns) {
    const int cc = c.platform.cuda_capability;
    // Volta and Turing: no kernel's code runs there, whatever the build.
    if (cc < 80 || &c == &columns.back()) continue;
    const bool has = quant::cuda_code_capability(cc, quant::cuda_architectures()) >= 0;
    std::string& list = has ? runs : lacks;
    list += (list.empty() ? "" : ", ") + std::string(c.name);
  }
  std::string s =
      "A GPU column says yes when one of the method's CUDA kernels (the GPU backend: bf16 "
      "activations, sm_80 and later; FP8 W8A8 on e4m3 tensor cores, sm_89 and later) runs on that "
      "generation; unquantized layers run on bf16_cuda. This binary holds GPU code for " +
      quant::cuda_architectures_text() + " (CMAKE_CUDA_ARCHITECTURES), which runs on " +
      (runs.empty() ? std::string("none of these generations") : runs);
  if (!lacks.empty()) {
    s += "; for " + lacks + ", configure with -DCMAKE_CUDA_ARCHITECTURES=\"80;89;90a\" (their "
         "PTX also JIT-compiles for newer GPUs)";
  }
  s += ". \"this machine\" counts only code this binary holds.\n";
  return s;
}

int run_methods(const std::vector<std::string>& plugins, bool json) {
#ifdef LOWBIT_CUDA_BACKEND
  quant::set_cuda_device_probe(&first_cuda_device);
#endif
  load_cli_plugins(plugins);
  const std::vector<Column> columns = matrix_columns();
  std::vector<std::pair<std::string, quant::MethodDescription>> methods;
  for (const std::string& name : quant::registered_quantizations()) {
    methods.emplace_back(name, quant::describe_quantization(name));
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [name, d] : methods) {
      nlohmann::json j = to_json(d, columns);
      j["registered_as"] = name;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("This machine: %s\n\n", quant::Platform::current().describe().c_str());
  // The first column fits the longest "alias (= method)" name, so every row stays aligned.
  int name_width = 6;
  for (const auto& [name, d] : methods) {
    const size_t shown = name == d.name ? name.size() : name.size() + d.name.size() + 5;
    name_width = std::max(name_width, static_cast<int>(shown));
  }
  std::printf("%-*s %7s", name_width, "method", "min cap");
  for (const Column& c : columns) std::printf(" %-9.9s", c.name);
  std::printf("\n");
  for (const auto& [name, d] : methods) {
    const std::string shown = name == d.name ? name : name + " (= " + d.name + ")";
    std::printf("%-*s %7s", name_width, shown.c_str(),
                d.min_capability < 0 ? "-" : std::to_string(d.min_capability).c_str());
    for (const Column& c : columns) std::printf(" %-9s", runs_on(d, c.platform) ? "yes" : "-");
    std::printf("\n");
  }
  std::printf("\n");
  for (const auto& [name, d] : methods) {
    if (name != d.name) continue;
    if (!d.unsupported.empty()) {
      std::printf("%s: %s\n  not supported: %s\n", d.name.c_str(), d.summary.c_str(),
                  d.unsupported.c_str());
      continue;
    }
    std::printf("%s: %s\n  activations: %s; layers: %s%s\n", d.name.c_str(), d.summary.c_str(),
                join_dtypes(d.act_dtypes).c_str(), join_layers(d.layers).c_str(),
                d.online ? "; online quantization of unquantized checkpoints" : "");
    for (const quant::KernelSpec& k : d.kernels) {
      const std::string missing = k.missing_on(quant::Platform::current());
      std::printf("  kernel %-14s %s%s\n", k.name.c_str(), k.implements.c_str(),
                  missing.empty() ? "" : (" [not here: " + missing + "]").c_str());
    }
  }
  std::printf("\nThe matrix is derived from the kernels each method declares. %s",
              gpu_footer(columns).c_str());
  return 0;
}

}  // namespace

void add_methods_command(CLI::App& app, CommandList& commands) {
  CLI::App* sub = app.add_subcommand(
      "methods", "List quantization methods (plugins included) and the hardware each runs on");
  auto plugins = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  add_plugin_option(sub, *plugins);
  sub->add_flag("--json", *json, "Print JSON instead of tables");
  commands.push_back({sub, [plugins, json] { return run_methods(*plugins, *json); }});
}

}  // namespace lowbit::cli
