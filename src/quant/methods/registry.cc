// The method registry: name → (config factory, description). Filled by static initialisers of the
// built-in method files and of plugins (loaded before any model is built); read afterwards. This is
// one of the registries STYLE.md allows as global state.
#include <algorithm>
#include <mutex>

#include "core/log.h"
#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

struct Entry {
  ConfigFactory factory;
  DescriptionFactory describe;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
};

Registry& registry() {
  // Constructed on first use, so registration order across files and plugins does not matter.
  static Registry instance;
  return instance;
}

Entry find_entry(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    std::string known;
    for (const auto& [n, e] : r.entries) known += (known.empty() ? "" : ", ") + n;
    throw Unsupported("unknown quantization method '" + name + "' (registered: " + known +
                      "; `lowbit methods` lists them, --plugin adds more)");
  }
  return it->second;
}

}  // namespace

void register_quantization_config(const std::string& name, ConfigFactory factory,
                                  DescriptionFactory describe) {
  if (name.empty() || !factory || !describe) {
    throw InvalidArgument("register_quantization_config: empty name or factory");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.entries.count(name) != 0) {
    // vLLM's rule: a later registration (a plugin) replaces the built-in, said at debug level.
    log_debug("quantization method '" + name + "' already exists and will be overwritten");
  }
  r.entries[name] = Entry{std::move(factory), std::move(describe)};
}

bool is_registered_quantization(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries.count(name) != 0;
}

std::vector<std::string> registered_quantizations() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, entry] : r.entries) names.push_back(name);
  return names;  // std::map keeps them sorted
}

MethodDescription describe_quantization(const std::string& name) {
  return find_entry(name).describe();
}

std::unique_ptr<QuantizationConfig> make_quantization_config(const std::string& name,
                                                             const nlohmann::json& config,
                                                             const std::string& where) {
  std::unique_ptr<QuantizationConfig> made = find_entry(name).factory(config, where);
  if (!made) throw Internal("quantization method '" + name + "' returned no config");
  return made;
}

nlohmann::json get_from_keys(const nlohmann::json& config, const std::vector<std::string>& keys,
                             const std::string& where) {
  if (config.is_object()) {
    for (const std::string& key : keys) {
      if (config.contains(key)) return config.at(key);
    }
  }
  std::string list;
  for (const std::string& key : keys) list += (list.empty() ? "'" : ", '") + key + "'";
  throw InvalidArgument(where + ": none of the keys " + list + " is present");
}

nlohmann::json get_from_keys_or(const nlohmann::json& config, const std::vector<std::string>& keys,
                                const nlohmann::json& fallback) {
  if (config.is_object()) {
    for (const std::string& key : keys) {
      if (config.contains(key)) return config.at(key);
    }
  }
  return fallback;
}

}  // namespace lowbit::quant
