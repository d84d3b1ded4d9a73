// A parsed Jinja template and its renderer, in the environment transformers builds for chat
// templates (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// tojson override, raise_exception and strftime_now globals).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

class Template {
 public:
  // Parses; throws InvalidArgument with line:column on syntax errors.
  explicit Template(const std::string& source);

  // Renders with the members of `variables` (a JSON object) as template variables. Throws
  // TemplateError (an InvalidArgument) for anything jinja raises at render time.
  std::string render(const nlohmann::ordered_json& variables) const;
  std::string render(const std::vector<std::pair<std::string, Value>>& variables) const;

 private:
  ParsedTemplate parsed_;
};

}  // namespace lowbit::jinja
