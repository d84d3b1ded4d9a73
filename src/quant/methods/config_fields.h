// Typed reads of a method's quantization_config fields (GPTQ, AWQ, FP8 configs are free-form JSON
// written by many tools): the first present key of a list, checked, with InvalidArgument naming
// `where` and the key on a wrong type, never a JSON library exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit::quant {

bool bool_field(const nlohmann::json& j, const std::vector<std::string>& keys, bool fallback,
                const std::string& where);
std::string string_field(const nlohmann::json& j, const std::vector<std::string>& keys,
                         const std::string& fallback, const std::string& where);
// Required integer field.
int64_t int_field(const nlohmann::json& j, const std::vector<std::string>& keys,
                  const std::string& where);
// A list of strings; null or absent → empty.
std::vector<std::string> string_list_field(const nlohmann::json& j,
                                           const std::vector<std::string>& keys,
                                           const std::string& where);

// Shell-style (fnmatch) match of a module name, as ModelOpt's and Quark's exclude / layer lists
// are written: `*` any run of characters, `?` one character, everything else literal.
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace lowbit::quant
