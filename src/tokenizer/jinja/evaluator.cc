// Statement execution and the Template entry points.
#include "tokenizer/jinja/evaluator.h"

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/template.h"

namespace lowbit::jinja {
namespace {

// Deep enough for any real template, shallow enough that the C++ stack never overflows.
constexpr int kMaxMacroDepth = 100;

Value make_loop(const ValueList& items, size_t i) {
  auto d = std::make_shared<Dict>();
  auto n = static_cast<int64_t>(items.size());
  auto k = static_cast<int64_t>(i);
  d->set(Value("index"), Value(k + 1));
  d->set(Value("index0"), Value(k));
  d->set(Value("revindex"), Value(n - k));
  d->set(Value("revindex0"), Value(n - k - 1));
  d->set(Value("first"), Value(i == 0));
  d->set(Value("last"), Value(k == n - 1));
  d->set(Value("length"), Value(n));
  d->set(Value("depth"), Value(int64_t{1}));
  d->set(Value("depth0"), Value(int64_t{0}));
  if (i > 0) d->set(Value("previtem"), items[i - 1]);
  if (k + 1 < n) d->set(Value("nextitem"), items[i + 1]);
  d->set(Value("cycle"), Value::callable("cycle", [k](const CallArgs& args) {
           if (args.positional.empty()) fail("TypeError: no items for cycling given");
           return args.positional[static_cast<size_t>(k) % args.positional.size()];
         }));
  return Value::dict(std::move(d));
}

}  // namespace

std::string Evaluator::render(const ScopePtr& root) {
  std::string out;
  exec_body(tpl_.body, root, out);
  return out;
}

Evaluator::Flow Evaluator::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    return exec_inner(s, scope, out);
  } catch (const TemplateError& e) {
    if (e.located()) throw;
    throw TemplateError(std::string(e.what()) + " (template position " +
                            describe_position(tpl_.source, s.offset) + ")",
                        true);
  }
}

Evaluator::Flow Evaluator::exec_inner(const Stmt& s, const ScopePtr& scope, std::string& out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      out += s.text;
      break;
    case Stmt::Kind::kPrint:
      out += to_str(eval(*s.expr, scope));
      break;
    case Stmt::Kind::kIf:
      return exec_if(s, scope, out);
    case Stmt::Kind::kFor:
      exec_for(s, scope, out);
      break;
    case Stmt::Kind::kSet:
      assign(s.target, eval(*s.expr, scope), *scope);
      break;
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      exec_body(s.body, child_scope(scope, s.body_undefined), captured);
      assign(s.target, apply_filter_chain(s.filter.get(), Value(std::move(captured)), scope),
             *scope);
      break;
    }
    case Stmt::Kind::kMacro:
      scope->vars[s.name] = make_macro(s, scope, s.name);
      break;
    case Stmt::Kind::kCallBlock:
      exec_call_block(s, scope, out);
      break;
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      exec_body(s.body, child_scope(scope, s.body_undefined), captured);
      out += to_str(apply_filter_chain(s.filter.get(), Value(std::move(captured)), scope));
      break;
    }
    case Stmt::Kind::kWith: {
      ScopePtr inner = child_scope(scope, s.body_undefined);
      for (size_t i = 0; i < s.with_targets.size(); ++i)
        assign(s.with_targets[i], eval(*s.with_values[i], scope), *inner);
      return exec_body(s.body, inner, out);
    }
    case Stmt::Kind::kScope:
      return exec_body(s.body, child_scope(scope, s.body_undefined), out);
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_if(const Stmt& s, const ScopePtr& scope, std::string& out) {
  for (const auto& [test, body] : s.branches) {
    if (eval(*test, scope).truthy()) return exec_body(body, scope, out);
  }
  return exec_body(s.else_body, scope, out);
}

void Evaluator::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  ValueList items = iterate(eval(*s.expr, scope));
  if (s.condition) {
    // The loop filter runs first, so loop.length/index/last count only the kept items.
    ValueList kept;
    for (Value& item : items) {
      ScopePtr probe = child_scope(scope);
      assign(s.target, item, *probe);
      if (eval(*s.condition, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, child_scope(scope, s.else_undefined), out);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    ScopePtr frame = child_scope(scope, s.body_undefined);
    frame->vars["loop"] = make_loop(items, i);
    assign(s.target, items[i], *frame);
    if (exec_body(s.body, frame, out) == Flow::kBreak) break;
  }
}

void Evaluator::assign(const Target& t, const Value& v, Scope& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope.vars[t.name] = v;
      return;
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope.find(t.name);
      if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
        fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      }
      ns->dict_ref().set(Value(t.attr), v);
      return;
    }
    case Target::Kind::kTuple: {
      ValueList parts = iterate(v);
      if (parts.size() != t.items.size()) {
        std::string expected = std::to_string(t.items.size());
        fail(parts.size() > t.items.size()
                 ? "ValueError: too many values to unpack (expected " + expected + ")"
                 : "ValueError: not enough values to unpack (expected " + expected + ", got " +
                       std::to_string(parts.size()) + ")");
      }
      for (size_t i = 0; i < parts.size(); ++i) assign(t.items[i], parts[i], scope);
      return;
    }
  }
}

Value Evaluator::make_macro(const Stmt& s, const ScopePtr& scope, const std::string& name) {
  const Stmt* stmt = &s;
  std::weak_ptr<Scope> weak_scope = scope;  // the macro lives in this scope; avoid a cycle
  return Value::callable(name, [this, stmt, weak_scope, name](const CallArgs& args) {
    ScopePtr defining = weak_scope.lock();
    if (defining == nullptr)
      fail("macro '" + name + "' called after the scope that defined it ended");
    // An exception abandons the whole render, so depth_ needs no unwinding on error paths.
    if (++depth_ > kMaxMacroDepth) fail("RecursionError: macro '" + name + "' recursed too deeply");
    ScopePtr frame = child_scope(defining, stmt->body_undefined);
    const size_t n = stmt->params.size();
    const size_t first_default = n - stmt->defaults.size();
    std::vector<bool> bound(n, false);
    ValueList varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < n) {
        frame->vars[stmt->params[i]] = args.positional[i];
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    auto kwargs = std::make_shared<Dict>();
    for (const auto& [key, value] : args.keyword) {
      auto it = std::find(stmt->params.begin(), stmt->params.end(), key);
      if (it != stmt->params.end()) {
        frame->vars[key] = value;
        bound[static_cast<size_t>(it - stmt->params.begin())] = true;
      } else if (key == "caller") {
        frame->vars["caller"] = value;
      } else {
        kwargs->set(Value(key), value);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (bound[i]) continue;
      frame->vars[stmt->params[i]] =
          i >= first_default ? eval(*stmt->defaults[i - first_default], frame)
                             : Value::undefined("'" + stmt->params[i] + "' is undefined");
    }
    frame->vars["varargs"] = Value::list(std::move(varargs));
    frame->vars["kwargs"] = Value::dict(std::move(kwargs));
    std::string out;
    exec_body(stmt->body, frame, out);
    --depth_;
    return Value(std::move(out));
  });
}

void Evaluator::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const auto& call_expr = static_cast<const CallExpr&>(*s.expr);
  Value caller = make_macro(s, scope, "caller");
  CallArgs args = eval_args(call_expr.args, scope);
  args.keyword.emplace_back("caller", caller);
  out += to_str(call(eval(*call_expr.callee, scope), args));
}

Value Evaluator::apply_filter_chain(const Expr* filter, Value subject, const ScopePtr& scope) {
  if (filter == nullptr) return subject;
  const auto& f = static_cast<const FilterExpr&>(*filter);
  Value inner = apply_filter_chain(f.subject.get(), std::move(subject), scope);
  return apply_filter(f.name, inner, eval_args(f.args, scope));
}

Template::Template(const std::string& source) : parsed_(parse(source)) {}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& variables) const {
  auto globals = std::make_shared<Scope>();
  add_globals(globals->vars);
  ScopePtr root = child_scope(globals);
  for (const auto& [name, value] : variables) root->vars[name] = value;
  // jinja starts these template-level locals undefined, even when the caller passed the name.
  for (const std::string& name : parsed_.body_undefined)
    root->vars[name] = Value::undefined("'" + name + "' is undefined");
  Evaluator evaluator(parsed_);
  return evaluator.render(root);
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    throw InvalidArgument("chat template: template variables must be a JSON object");
  std::vector<std::pair<std::string, Value>> vars;
  for (auto it = variables.begin(); it != variables.end(); ++it)
    vars.emplace_back(it.key(), from_json(it.value()));
  return render(vars);
}

}  // namespace lowbit::jinja
