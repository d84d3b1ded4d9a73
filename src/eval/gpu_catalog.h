// GPUs `lowbit recommend` knows by name: architecture, compute capability and memory from the
// vendors' public specifications (NVIDIA's CUDA compute-capability table, product datasheets), and
// the detection of the GPUs present through nvidia-smi. Capabilities are major*10+minor, as in
// quant::Platform (80 Ampere, 89 Ada, 90 Hopper, 100/103 Blackwell, 120 consumer Blackwell).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lowbit/quant_method.h"

namespace lowbit::eval {

enum class GpuVendor { Nvidia, Amd };

struct GpuSpec {
  std::string name;          // "H100"
  std::string full_name;     // "NVIDIA H100 SXM 80GB"
  GpuVendor vendor = GpuVendor::Nvidia;
  std::string architecture;  // "Hopper", "CDNA 3"
  int capability = -1;       // NVIDIA compute capability (major*10+minor); -1 for AMD
  double memory_gb = 0;      // per GPU, as the vendor states it (GB, treated as GiB)
  // AMD GPUs have no compute capability: what their matrix cores do, from the CDNA whitepapers.
  bool amd_fp8 = false;      // FP8 matrix cores (CDNA 3: MI300 series and later)
  bool amd_mx = false;       // MXFP4 / MXFP8 matrix cores (CDNA 4: MI350 series)
  std::string note;          // where a number comes from when it is not obvious
};

// Every GPU in the catalogue, in display order.
const std::vector<GpuSpec>& gpu_catalog();

// "H100", "h100-sxm", "NVIDIA A100 80GB", "rtx4090", "mi300x": the entry whose name or alias
// matches (case, spaces, dashes and the NVIDIA/GeForce/Tesla/AMD/Instinct prefixes ignored), or
// nullopt.
std::optional<GpuSpec> find_gpu(const std::string& name);

// The catalogue's names, comma-separated, for error messages and --help.
std::string known_gpu_names();

// "Hopper", "Ada", ... for an NVIDIA compute capability.
std::string nvidia_architecture(int capability);

// The quant::Platform of a target GPU, for KernelSpec::runs_on checks against the registry.
quant::Platform gpu_platform(const GpuSpec& gpu);

// "NVIDIA H100 (Hopper, sm_90, 80 GB)".
std::string describe_gpu(const GpuSpec& gpu);

// Parses `nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits`
// output (one GPU per line: "NVIDIA H100 80GB HBM3, 81559, 9.0"). The detected capability and
// memory win over the catalogue's; the catalogue supplies the short name when it knows the GPU.
// Throws InvalidArgument naming the line it cannot read.
std::vector<GpuSpec> parse_nvidia_smi(const std::string& csv);

// Runs nvidia-smi (from PATH) and parses its answer; empty when it is absent or fails.
std::vector<GpuSpec> detect_gpus();

}  // namespace lowbit::eval
