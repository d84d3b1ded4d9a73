#include "quant/methods/plugins.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/log.h"
#include "lowbit/error.h"

namespace lowbit::quant {

std::vector<std::string> load_plugins(const std::vector<std::string>& paths) {
  // Handles stay open for the life of the process: the registered factories live in them.
  static std::mutex mutex;
  static std::set<std::string> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> done;
  for (const std::string& path : paths) {
    std::error_code ec;
    const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
    const std::string key = ec ? path : canonical;
    if (loaded.count(key) != 0) continue;
    if (!std::filesystem::exists(path)) {
      throw InvalidArgument("plugin " + path + ": no such file");
    }
    // RTLD_GLOBAL: a plugin's types (exceptions, registrations) unify with lowbit's own.
    void* handle = dlopen(key.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      throw InvalidArgument("plugin " + path + ": cannot be loaded (" +
                            std::string(why != nullptr ? why : "unknown reason") + ")");
    }
    loaded.insert(key);
    done.push_back(path);
    log_debug("loaded plugin " + path);
  }
  return done;
}

std::vector<std::string> plugins_from_environment() {
  std::vector<std::string> paths;
  const char* env = std::getenv("LOWBIT_PLUGINS");
  if (env == nullptr) return paths;
  std::string s(env);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(':', start);
    const std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) paths.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return paths;
}

}  // namespace lowbit::quant
