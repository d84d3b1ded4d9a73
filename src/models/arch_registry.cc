#include "models/arch_registry.h"

#include <algorithm>

#include "lowbit/error.h"

namespace lowbit::models {

ArchRegistry& ArchRegistry::instance() {
  // Constructed on first use, so registration order across files does not matter.
  static ArchRegistry registry;
  return registry;
}

void ArchRegistry::add(ArchSpec spec) {
  if (find(spec.architecture) != nullptr) {
    throw Internal("architecture " + spec.architecture + " is registered twice");
  }
  specs_.push_back(std::move(spec));
}

const ArchSpec* ArchRegistry::find(const std::string& architecture) const {
  for (const ArchSpec& spec : specs_) {
    if (spec.architecture == architecture) return &spec;
  }
  return nullptr;
}

const ArchSpec* ArchRegistry::find_by_model_type(const std::string& model_type) const {
  for (const ArchSpec& spec : specs_) {
    if (spec.model_type == model_type) return &spec;
  }
  return nullptr;
}

std::vector<std::string> ArchRegistry::names() const {
  std::vector<std::string> out;
  for (const ArchSpec& spec : specs_) out.push_back(spec.architecture);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace lowbit::models
