#include "formats/safetensors_json.h"

#include <set>
#include <vector>

#include "lowbit/error.h"

namespace lowbit::formats::detail {

using nlohmann::json;

nlohmann::json parse_json_strict(std::string_view text, const std::string& file,
                                 const std::string& what) {
  // One set of keys per object currently open; the parser reports keys before their values, so a
  // repeat is caught when it is read.
  std::vector<std::set<std::string>> open_objects;
  auto check_keys = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second) {
          throw InvalidArgument(file + ": " + what + ": key " + printable(key) +
                                " appears twice in one object");
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check_keys);
  } catch (const json::exception& e) {
    throw InvalidArgument(file + ": " + what + " is not valid JSON: " + e.what());
  }
}

std::string json_quote(const std::string& s, const std::string& file, const std::string& what) {
  try {
    // nlohmann escapes '"', '\\' and control characters (as \b \f \n \r \t or lowercase \u00xx)
    // and leaves everything else as UTF-8, which is serde_json's rule too.
    return json(s).dump();
  } catch (const json::exception&) {
    throw InvalidArgument(file + ": " + what + " " + printable(s) + " is not valid UTF-8");
  }
}

std::string printable(const std::string& s) {
  constexpr size_t kMaxChars = 200;  // a fuzzed name can be megabytes long
  std::string head = s.size() > kMaxChars ? s.substr(0, kMaxChars) : s;
  std::string quoted = json(head).dump(-1, ' ', false, json::error_handler_t::replace);
  if (head.size() < s.size()) quoted += "...";
  return quoted;
}

std::string json_type(const nlohmann::json& value) { return value.type_name(); }

}  // namespace lowbit::formats::detail
