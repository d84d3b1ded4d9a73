// The tree-walking renderer behind jinja::Template. Scoping follows jinja2: each `for` iteration
// and each macro call gets a fresh frame whose parent is the enclosing one, `if` does not, so a
// `set` inside a loop body never leaks out of it while one inside a top-level `if` does.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

// A frame whose `undefined` names (scoping.h) start out undefined, hiding outer values.
inline ScopePtr child_scope(const ScopePtr& parent,
                            const std::vector<std::string>& undefined = {}) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  for (const std::string& name : undefined)
    s->vars[name] = Value::undefined("'" + name + "' is undefined");
  return s;
}

class Evaluator {
 public:
  explicit Evaluator(const ParsedTemplate& t) : tpl_(t) {}

  std::string render(const ScopePtr& root);
  Value eval(const Expr& e, const ScopePtr& scope);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_inner(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_if(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  void assign(const Target& t, const Value& v, Scope& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const std::string& name);
  Value apply_filter_chain(const Expr* filter, Value subject, const ScopePtr& scope);

  CallArgs eval_args(const Arguments& a, const ScopePtr& scope);
  Value eval_compare(const CompareExpr& e, const ScopePtr& scope);
  Value eval_getitem(const GetItemExpr& e, const ScopePtr& scope);
  static Value call(const Value& callee, const CallArgs& args);

  const ParsedTemplate& tpl_;
  int depth_ = 0;  // macro call depth, bounded like Python's recursion limit
};

}  // namespace lowbit::jinja
