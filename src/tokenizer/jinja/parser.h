// Recursive-descent parser following jinja2's parser.py: same precedence climbing
// (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filters),
// same statement set minus template inheritance and imports, which chat templates never use.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace lowbit::jinja {

struct ParsedTemplate {
  std::string source;  // normalized source, for error positions
  Body body;
  std::vector<std::string> body_undefined;  // see scoping.h
};

// Throws InvalidArgument ("chat template: syntax error at L:C: ...").
ParsedTemplate parse(const std::string& source);

}  // namespace lowbit::jinja
