// The GPU catalogue and nvidia-smi detection. Capabilities are NVIDIA's CUDA compute-capability
// table (developer.nvidia.com/cuda-gpus and its legacy page); memory is the datasheet figure per
// GPU. Where a system is sold rather than a board (GB200, GB300), the figure is the rack's HBM
// divided by its GPUs, as the note says.
#include "eval/gpu_catalog.h"

#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

struct Entry {
  GpuSpec spec;
  std::vector<std::string> aliases;
};

Entry nvidia(const char* name, const char* full, int capability, double memory,
             std::vector<std::string> aliases = {}, const char* note = "") {
  GpuSpec s;
  s.name = name;
  s.full_name = full;
  s.vendor = GpuVendor::Nvidia;
  s.capability = capability;
  s.architecture = nvidia_architecture(capability);
  s.memory_gb = memory;
  s.note = note;
  return {s, std::move(aliases)};
}

Entry amd(const char* name, const char* full, const char* arch, double memory, bool fp8, bool mx,
          std::vector<std::string> aliases = {}) {
  GpuSpec s;
  s.name = name;
  s.full_name = full;
  s.vendor = GpuVendor::Amd;
  s.architecture = arch;
  s.memory_gb = memory;
  s.amd_fp8 = fp8;
  s.amd_mx = mx;
  return {s, std::move(aliases)};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      // Blackwell: FP4 tensor cores (sm_100 data centre, sm_103 Blackwell Ultra, sm_120 RTX).
      nvidia("B200", "NVIDIA B200", 100, 180, {"hgxb200", "dgxb200"},
             "HGX B200: 1,440 GB HBM3e over 8 GPUs"),
      nvidia("GB200", "NVIDIA GB200 (Grace Blackwell)", 100, 186, {"gb200nvl72"},
             "GB200 NVL72: 13.4 TB HBM3e over 72 GPUs"),
      nvidia("B100", "NVIDIA B100", 100, 192, {"hgxb100"}, "announced HGX B100 figure"),
      nvidia("B300", "NVIDIA B300 (Blackwell Ultra)", 103, 288, {"hgxb300"}),
      nvidia("GB300", "NVIDIA GB300 (Grace Blackwell Ultra)", 103, 288, {"gb300nvl72"},
             "GB300 NVL72: 288 GB HBM3e per GPU"),
      nvidia("RTX 5090", "NVIDIA GeForce RTX 5090", 120, 32, {"5090"}),
      nvidia("RTX PRO 6000", "NVIDIA RTX PRO 6000 Blackwell", 120, 96,
             {"rtxpro6000blackwell", "pro6000"}),
      // Hopper: FP8 tensor cores.
      nvidia("H100", "NVIDIA H100 80GB", 90, 80,
             {"h100sxm", "h100pcie", "h10080gb", "h10080gbhbm3", "h100sxm580gb"}),
      nvidia("H100 NVL", "NVIDIA H100 NVL 94GB", 90, 94, {"h100nvl94gb"}),
      nvidia("H800", "NVIDIA H800 80GB", 90, 80, {"h80080gb"}),
      nvidia("H200", "NVIDIA H200 141GB", 90, 141, {"h200sxm", "h200nvl", "h200141gb"}),
      nvidia("GH200", "NVIDIA GH200 Grace Hopper (96 GB HBM3)", 90, 96, {"gh200480gb"},
             "the 144 GB HBM3e GH200: pass --gpu-memory 144"),
      nvidia("H20", "NVIDIA H20 96GB", 90, 96, {"h2096gb"}),
      // Ada: FP8 tensor cores.
      nvidia("L40S", "NVIDIA L40S 48GB", 89, 48),
      nvidia("L40", "NVIDIA L40 48GB", 89, 48),
      nvidia("L4", "NVIDIA L4 24GB", 89, 24),
      nvidia("RTX 4090", "NVIDIA GeForce RTX 4090", 89, 24, {"4090"}),
      nvidia("RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation", 89, 48, {"rtx6000adageneration"}),
      // Ampere: INT8 tensor cores, no FP8.
      nvidia("A100", "NVIDIA A100 80GB", 80, 80,
             {"a10080gb", "a10080", "a100sxm480gb", "a100pcie80gb", "a100sxm80gb"}),
      nvidia("A100-40GB", "NVIDIA A100 40GB", 80, 40,
             {"a10040gb", "a10040", "a100sxm440gb", "a100pcie40gb"}),
      nvidia("A800", "NVIDIA A800 80GB", 80, 80, {"a80080gb"}),
      nvidia("A30", "NVIDIA A30 24GB", 80, 24),
      nvidia("A40", "NVIDIA A40 48GB", 86, 48),
      nvidia("A10", "NVIDIA A10 24GB", 86, 24),
      nvidia("A10G", "NVIDIA A10G 24GB", 86, 24),
      nvidia("RTX A6000", "NVIDIA RTX A6000", 86, 48, {"a6000"}),
      nvidia("RTX 3090", "NVIDIA GeForce RTX 3090", 86, 24, {"3090"}),
      // Older: Turing has INT8 tensor cores; Volta and Pascal neither INT8 nor FP8 ones.
      nvidia("T4", "NVIDIA T4 16GB", 75, 16),
      nvidia("V100", "NVIDIA V100 32GB", 70, 32, {"v10032gb", "v100sxm232gb"}),
      nvidia("V100-16GB", "NVIDIA V100 16GB", 70, 16, {"v10016gb"}),
      nvidia("P100", "NVIDIA P100 16GB", 60, 16, {"teslap100"}),
      // AMD Instinct (ROCm).
      amd("MI355X", "AMD Instinct MI355X", "CDNA 4", 288, true, true),
      amd("MI325X", "AMD Instinct MI325X", "CDNA 3", 256, true, false),
      amd("MI300X", "AMD Instinct MI300X", "CDNA 3", 192, true, false),
      amd("MI250X", "AMD Instinct MI250X", "CDNA 2", 128, false, false),
  };
  return table;
}

// Lower case, letters and digits only, vendor and family prefixes dropped.
std::string normalize(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  for (const char* prefix : {"nvidia", "geforce", "tesla", "amd", "instinct"}) {
    const std::string p = prefix;
    if (s.rfind(p, 0) == 0) s = s.substr(p.size());
  }
  return s;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::string nvidia_architecture(int capability) {
  if (capability >= 120) return "Blackwell (RTX)";
  if (capability >= 103) return "Blackwell Ultra";
  if (capability >= 100) return "Blackwell";
  if (capability >= 90) return "Hopper";
  if (capability == 89) return "Ada";
  if (capability >= 80) return "Ampere";
  if (capability >= 75) return "Turing";
  if (capability >= 70) return "Volta";
  if (capability >= 60) return "Pascal";
  return "pre-Pascal";
}

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> specs = [] {
    std::vector<GpuSpec> out;
    for (const Entry& e : entries()) out.push_back(e.spec);
    return out;
  }();
  return specs;
}

std::optional<GpuSpec> find_gpu(const std::string& name) {
  const std::string key = normalize(name);
  if (key.empty()) return std::nullopt;
  for (const Entry& e : entries()) {
    if (normalize(e.spec.name) == key) return e.spec;
    for (const std::string& alias : e.aliases) {
      if (normalize(alias) == key) return e.spec;
    }
  }
  return std::nullopt;
}

std::string known_gpu_names() {
  std::string names;
  for (const GpuSpec& g : gpu_catalog()) names += (names.empty() ? "" : ", ") + g.name;
  return names;
}

quant::Platform gpu_platform(const GpuSpec& gpu) {
  quant::Platform p;
  if (gpu.vendor == GpuVendor::Nvidia) {
    p.cuda_capability = gpu.capability;
  } else {
    p.rocm = true;
  }
  return p;
}

std::string describe_gpu(const GpuSpec& gpu) {
  std::ostringstream s;
  s << (gpu.vendor == GpuVendor::Nvidia ? "NVIDIA " : "AMD ") << gpu.name << " ("
    << gpu.architecture;
  if (gpu.vendor == GpuVendor::Nvidia) s << ", sm_" << gpu.capability;
  s << ", " << static_cast<long long>(gpu.memory_gb + 0.5) << " GB)";
  return s.str();
}

std::vector<GpuSpec> parse_nvidia_smi(const std::string& csv) {
  std::vector<GpuSpec> gpus;
  std::istringstream lines(csv);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (trim(line).empty()) continue;
    std::vector<std::string> fields;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) fields.push_back(trim(cell));
    const std::string where = "nvidia-smi output line " + std::to_string(number) + " ('" +
                              trim(line) + "')";
    LOWBIT_CHECK(fields.size() >= 2, where + ": expected 'name, memory MiB, compute capability'");
    GpuSpec gpu;
    if (std::optional<GpuSpec> known = find_gpu(fields[0])) {
      gpu = *known;
    } else {
      gpu.name = fields[0];
      gpu.full_name = fields[0];
    }
    try {
      gpu.memory_gb = std::stod(fields[1]) / 1024.0;  // MiB
    } catch (const std::exception&) {
      throw InvalidArgument(where + ": memory.total '" + fields[1] + "' is not a number");
    }
    if (fields.size() >= 3 && !fields[2].empty() && fields[2][0] != '[') {
      try {
        gpu.capability = static_cast<int>(std::stod(fields[2]) * 10 + 0.5);
      } catch (const std::exception&) {
        throw InvalidArgument(where + ": compute_cap '" + fields[2] + "' is not a number");
      }
    }
    LOWBIT_CHECK(gpu.capability > 0, where + ": no compute capability (a driver too old for " +
                                         "compute_cap and a GPU lowbit does not know by name)");
    gpu.vendor = GpuVendor::Nvidia;
    gpu.architecture = nvidia_architecture(gpu.capability);
    gpu.note = "detected by nvidia-smi";
    gpus.push_back(gpu);
  }
  return gpus;
}

std::vector<GpuSpec> detect_gpus() {
  FILE* pipe = popen(
      "nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits "
      "2>/dev/null",
      "r");
  if (pipe == nullptr) return {};
  std::string output;
  std::array<char, 1024> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return parse_nvidia_smi(output);
}

}  // namespace lowbit::eval
