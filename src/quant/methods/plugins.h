// Out-of-tree quantization methods: shared libraries whose static initialisers register methods
// (LOWBIT_REGISTER_QUANTIZATION_CONFIG) when loaded. Loaded before any model is built, from
// --plugin PATH (repeatable) and the LOWBIT_PLUGINS environment variable (paths separated by ':').
#pragma once

#include <string>
#include <vector>

namespace lowbit::quant {

// Loads each path once (a path already loaded is skipped). Throws InvalidArgument naming the file
// and the loader's reason when one cannot be loaded. Returns the paths loaded by this call.
std::vector<std::string> load_plugins(const std::vector<std::string>& paths);

// The paths in LOWBIT_PLUGINS (empty entries skipped).
std::vector<std::string> plugins_from_environment();

}  // namespace lowbit::quant
