#include "models/config_reader.h"

#include <cmath>
#include <limits>
#include <memory>

#include "lowbit/error.h"
#include "models/strings.h"

namespace lowbit::models {

namespace {

std::string type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json* object, std::string file, std::string prefix)
    : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

ConfigReader ConfigReader::parse(const std::string& text, const std::string& file) {
  auto document = std::make_shared<nlohmann::json>();
  try {
    *document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(file + ": not valid JSON: " + e.what());
  }
  if (!document->is_object()) {
    throw InvalidArgument(file + ": the top level must be a JSON object, got " +
                          type_name(*document));
  }
  ConfigReader reader(document.get(), file, "");
  reader.owned_ = std::move(document);
  return reader;
}

void ConfigReader::fail(const std::string& key, const std::string& what) const {
  throw InvalidArgument(file_ + ": " + path(key) + " " + what);
}

const nlohmann::json* ConfigReader::find(const std::string& key) const {
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigReader::has_key(const std::string& key) const { return object_->contains(key); }

bool ConfigReader::has(const std::string& key) const { return find(key) != nullptr; }

std::optional<int64_t> ConfigReader::optional_int(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_integer()) {
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(key, "is too large");
    }
    return value->get<int64_t>();
  }
  // Some tools write integers as 4096.0; accept those, not 4096.5.
  if (value->is_number_float()) {
    const double d = value->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  fail(key, "must be an integer, got " + type_name(*value) + " " + value->dump());
}

std::optional<double> ConfigReader::optional_number(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) fail(key, "must be a number, got " + type_name(*value));
  const double d = value->get<double>();
  if (!std::isfinite(d)) fail(key, "must be finite");
  return d;
}

std::optional<bool> ConfigReader::optional_bool(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) fail(key, "must be true or false, got " + type_name(*value));
  return value->get<bool>();
}

std::optional<std::string> ConfigReader::optional_string(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) fail(key, "must be a string, got " + type_name(*value));
  return value->get<std::string>();
}

int64_t ConfigReader::int_or(const std::string& key, int64_t fallback) const {
  return optional_int(key).value_or(fallback);
}

double ConfigReader::number_or(const std::string& key, double fallback) const {
  return optional_number(key).value_or(fallback);
}

bool ConfigReader::bool_or(const std::string& key, bool fallback) const {
  return optional_bool(key).value_or(fallback);
}

std::string ConfigReader::string_or(const std::string& key, const std::string& fallback) const {
  return optional_string(key).value_or(fallback);
}

int64_t ConfigReader::required_int(const std::string& key) const {
  std::optional<int64_t> value = optional_int(key);
  if (!value) fail(key, "is required");
  return *value;
}

std::optional<std::vector<int64_t>> ConfigReader::optional_int_list(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number()) return std::vector<int64_t>{*optional_int(key)};
  if (!value->is_array()) fail(key, "must be an integer or a list of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& item = (*value)[i];
    if (!item.is_number_integer()) {
      fail(key, cat("[", i, "] must be an integer, got ", type_name(item)));
    }
    if (item.is_number_unsigned() &&
        item.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(key, cat("[", i, "] is too large"));
    }
    out.push_back(item.get<int64_t>());
  }
  return out;
}

std::optional<std::vector<double>> ConfigReader::optional_number_list(
    const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array()) fail(key, "must be a list of numbers, got " + type_name(*value));
  std::vector<double> out;
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& item = (*value)[i];
    if (!item.is_number() || !std::isfinite(item.get<double>())) {
      fail(key, cat("[", i, "] must be a finite number, got ", type_name(item)));
    }
    out.push_back(item.get<double>());
  }
  return out;
}

std::optional<std::vector<std::string>> ConfigReader::optional_string_list(
    const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array()) fail(key, "must be a list of strings, got " + type_name(*value));
  std::vector<std::string> out;
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& item = (*value)[i];
    if (!item.is_string()) {
      fail(key, cat("[", i, "] must be a string, got ", type_name(item)));
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<ConfigReader> ConfigReader::optional_object(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_object()) fail(key, "must be a JSON object, got " + type_name(*value));
  ConfigReader nested(value, file_, path(key) + ".");
  nested.owned_ = owned_;
  return nested;
}

}  // namespace lowbit::models
