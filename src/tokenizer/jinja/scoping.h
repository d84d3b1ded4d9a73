// jinja2 compiles every frame (template body, loop body, macro body, ...) to Python locals, and
// its identifier tracking (idtracking.py) decides how each local starts: resolved from the
// enclosing frames, or *undefined* when the frame's first use of the name is an assignment and
// no enclosing frame knows the name. The latter hides a same-named outer or context variable
// from the frame, and from loops and macros inside it, until the assignment runs:
//   {% for i in x %}{{ y }}{% endfor %}{% set y = 1 %}   prints nothing for y, even if the
//   caller passed y. analyze_scopes() replays that analysis on lowbit's tree and records, per
//   frame, the names to bind to Undefined on entry; the evaluator does the rest dynamically.
#pragma once

#include "tokenizer/jinja/parser.h"

namespace lowbit::jinja {

void analyze_scopes(ParsedTemplate& tpl);

}  // namespace lowbit::jinja
