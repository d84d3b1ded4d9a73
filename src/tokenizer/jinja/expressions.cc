// Expression evaluation.
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/operators.h"

namespace lowbit::jinja {
namespace {

void require_hashable(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      fail("TypeError: unhashable type: '" + key.type_name() + "'");
    default:
      return;
  }
}

// Python comparison of two operands; numbers and strings directly (so NaN behaves), the rest
// through `<` and `==`.
bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_number() && b.is_number() && !(a.is_integral() && b.is_integral())) {
    double x = a.as_float(), y = b.as_float();
    return op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
  }
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || equals(a, b);
  return less_than(b, a) || equals(a, b);
}

}  // namespace

Value Evaluator::call(const Value& callee, const CallArgs& args) {
  if (callee.kind() == Value::Kind::kCallable) return callee.callable_ref().fn(args);
  require_defined(callee);
  fail("TypeError: '" + callee.type_name() + "' object is not callable");
}

CallArgs Evaluator::eval_args(const Arguments& a, const ScopePtr& scope) {
  CallArgs out;
  for (const ExprPtr& e : a.positional) out.positional.push_back(eval(*e, scope));
  for (const auto& [key, e] : a.keyword) out.keyword.emplace_back(key, eval(*e, scope));
  if (a.star_args) {
    for (Value& v : iterate(eval(*a.star_args, scope))) out.positional.push_back(std::move(v));
  }
  if (a.star_kwargs) {
    Value d = eval(*a.star_kwargs, scope);
    if (!d.is_mapping())
      fail("TypeError: argument after ** must be a mapping, not " + d.type_name());
    for (const auto& [k, v] : d.dict_ref().entries) {
      if (!k.is_string()) fail("TypeError: keywords must be strings");
      out.keyword.emplace_back(k.as_string(), v);
    }
  }
  return out;
}

Value Evaluator::eval_compare(const CompareExpr& e, const ScopePtr& scope) {
  Value left = eval(*e.first, scope);
  for (const auto& [op, expr] : e.ops) {
    Value right = eval(*expr, scope);
    if (!compare(op, left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Evaluator::eval_getitem(const GetItemExpr& e, const ScopePtr& scope) {
  Value obj = eval(*e.object, scope);
  if (e.key->kind != Expr::Kind::kSlice) return get_item(obj, eval(*e.key, scope));
  const auto& s = static_cast<const SliceExpr&>(*e.key);
  auto bound = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
  Value start = bound(s.start), stop = bound(s.stop), step = bound(s.step);
  return get_slice(obj, start, stop, step);
}

Value Evaluator::eval(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return static_cast<const ConstExpr&>(e).value;
    case Expr::Kind::kName: {
      const auto& name = static_cast<const NameExpr&>(e).name;
      const Value* v = scope->find(name);
      return v ? *v : Value::undefined("'" + name + "' is undefined");
    }
    case Expr::Kind::kList: {
      const auto& l = static_cast<const ListExpr&>(e);
      ValueList items;
      for (const ExprPtr& item : l.items) items.push_back(eval(*item, scope));
      return l.is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::kDict: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k, scope);
        require_hashable(key);
        d->set(std::move(key), eval(*v, scope));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      return get_attr(eval(*g.object, scope), g.attr);
    }
    case Expr::Kind::kGetItem:
      return eval_getitem(static_cast<const GetItemExpr&>(e), scope);
    case Expr::Kind::kSlice:
      fail("internal: slice outside a subscript");
    case Expr::Kind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value callee = eval(*c.callee, scope);
      return call(callee, eval_args(c.args, scope));
    }
    case Expr::Kind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      Value subject = eval(*f.subject, scope);
      return apply_filter(f.name, subject, eval_args(f.args, scope));
    }
    case Expr::Kind::kTest: {
      const auto& t = static_cast<const FilterExpr&>(e);
      Value subject = eval(*t.subject, scope);
      return Value(apply_test(t.name, subject, eval_args(t.args, scope)));
    }
    case Expr::Kind::kNot:
      return Value(!eval(*static_cast<const UnaryExpr&>(e).operand, scope).truthy());
    case Expr::Kind::kNeg:
      return negate(eval(*static_cast<const UnaryExpr&>(e).operand, scope));
    case Expr::Kind::kPos:
      return unary_plus(eval(*static_cast<const UnaryExpr&>(e).operand, scope));
    case Expr::Kind::kBinary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value lhs = eval(*b.lhs, scope);
      Value rhs = eval(*b.rhs, scope);
      return binary_op(b.op, lhs, rhs);
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value lhs = eval(*b.lhs, scope);
      if (lhs.truthy() == (e.kind == Expr::Kind::kOr))
        return lhs;  // Python returns the deciding operand
      return eval(*b.rhs, scope);
    }
    case Expr::Kind::kConcat: {
      std::string out;
      for (const ExprPtr& part : static_cast<const ConcatExpr&>(e).parts)
        out += to_str(eval(*part, scope));
      return Value(std::move(out));
    }
    case Expr::Kind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e), scope);
    case Expr::Kind::kCondExpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (eval(*c.test, scope).truthy()) return eval(*c.then, scope);
      if (c.otherwise) return eval(*c.otherwise, scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined.");
    }
  }
  fail("internal: unknown expression");
}

}  // namespace lowbit::jinja
