// Expression grammar, one function per precedence level as in jinja2's parser.py.
#include "tokenizer/jinja/parser_impl.h"

namespace lowbit::jinja::detail {

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, Names extra_end_rules,
                            bool explicit_parentheses, bool with_namespace) {
  size_t offset = cur().offset;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    const Token& t = cur();
    bool at_end = t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
                  is_op(t, ")") || is_name_in(t, extra_end_rules);
    if (at_end) break;
    args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
    if (!is_op(cur(), ",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) fail_here("Expected an expression, got '" + describe(cur()) + "'");
  }
  auto tuple = std::make_unique<ListExpr>(true, offset);
  tuple->items = std::move(args);
  return tuple;
}

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(*this);
  size_t offset = cur().offset;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    ExprPtr expr2 = parse_or();
    ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
    expr1 =
        std::make_unique<CondExpr>(std::move(expr2), std::move(expr1), std::move(expr3), offset);
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name(cur(), "or")) {
    size_t offset = advance().offset;
    left =
        std::make_unique<BinaryExpr>(Expr::Kind::kOr, "or", std::move(left), parse_and(), offset);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name(cur(), "and")) {
    size_t offset = advance().offset;
    left =
        std::make_unique<BinaryExpr>(Expr::Kind::kAnd, "and", std::move(left), parse_not(), offset);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  DepthGuard guard(*this);
  if (is_name(cur(), "not")) {
    size_t offset = advance().offset;
    return std::make_unique<UnaryExpr>(Expr::Kind::kNot, parse_not(), offset);
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  size_t offset = cur().offset;
  ExprPtr expr = parse_math1();
  std::vector<std::pair<std::string, ExprPtr>> ops;
  while (true) {
    const Token& t = cur();
    std::string op;
    if (t.type == TokenType::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      advance();
    } else if (is_name(t, "in")) {
      op = "in";
      advance();
    } else if (is_name(t, "not") && is_name(peek(), "in")) {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    ops.emplace_back(op, parse_math1());
  }
  if (ops.empty()) return expr;
  auto cmp = std::make_unique<CompareExpr>(std::move(expr), offset);
  cmp->ops = std::move(ops);
  return cmp;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op(cur(), "+") || is_op(cur(), "-")) {
    const Token& t = advance();
    std::string op = t.text;
    left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, op, std::move(left), parse_concat(),
                                        t.offset);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  size_t offset = cur().offset;
  ExprPtr first = parse_math2();
  if (!is_op(cur(), "~")) return first;
  auto concat = std::make_unique<ConcatExpr>(offset);
  concat->parts.push_back(std::move(first));
  while (skip_op("~")) concat->parts.push_back(parse_math2());
  return concat;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op(cur(), "*") || is_op(cur(), "/") || is_op(cur(), "//") || is_op(cur(), "%")) {
    const Token& t = advance();
    std::string op = t.text;
    left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, op, std::move(left), parse_pow(),
                                        t.offset);
  }
  return left;
}

// Left-associative, as in jinja (2 ** 3 ** 2 == 64).
ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op(cur(), "**")) {
    size_t offset = advance().offset;
    left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, "**", std::move(left), parse_unary(),
                                        offset);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  size_t offset = cur().offset;
  ExprPtr node;
  if (skip_op("-")) {
    node = std::make_unique<UnaryExpr>(Expr::Kind::kNeg, parse_unary(false), offset);
  } else if (skip_op("+")) {
    node = std::make_unique<UnaryExpr>(Expr::Kind::kPos, parse_unary(false), offset);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary(bool with_namespace) {
  const Token& t = cur();
  size_t offset = t.offset;
  if (t.type == TokenType::kName) {
    std::string name = advance().text;
    if (name == "true" || name == "True") return std::make_unique<ConstExpr>(Value(true), offset);
    if (name == "false" || name == "False")
      return std::make_unique<ConstExpr>(Value(false), offset);
    if (name == "none" || name == "None") return std::make_unique<ConstExpr>(Value::none(), offset);
    if (with_namespace && is_op(cur(), ".")) {
      advance();
      std::string attr = expect_name();
      return std::make_unique<GetAttrExpr>(std::make_unique<NameExpr>(name, offset), attr, offset);
    }
    return std::make_unique<NameExpr>(name, offset);
  }
  if (t.type == TokenType::kString) {
    std::string s;
    while (cur().type == TokenType::kString) s += advance().text;
    return std::make_unique<ConstExpr>(Value(std::move(s)), offset);
  }
  if (t.type == TokenType::kInteger)
    return std::make_unique<ConstExpr>(Value(advance().int_value), offset);
  if (t.type == TokenType::kFloat)
    return std::make_unique<ConstExpr>(Value(advance().float_value), offset);
  if (is_op(t, "(")) {
    advance();
    ExprPtr inner = parse_tuple(false, true, {}, true);
    expect_op(")");
    return inner;
  }
  if (is_op(t, "[")) return parse_list();
  if (is_op(t, "{")) return parse_dict();
  fail_here("unexpected '" + describe(t) + "'");
}

ExprPtr Parser::parse_list() {
  auto list = std::make_unique<ListExpr>(false, advance().offset);
  while (!is_op(cur(), "]")) {
    if (!list->items.empty()) expect_op(",");
    if (is_op(cur(), "]")) break;
    list->items.push_back(parse_expression());
  }
  expect_op("]");
  return list;
}

ExprPtr Parser::parse_dict() {
  auto dict = std::make_unique<DictExpr>(advance().offset);
  while (!is_op(cur(), "}")) {
    if (!dict->items.empty()) expect_op(",");
    if (is_op(cur(), "}")) break;
    ExprPtr key = parse_expression();
    expect_op(":");
    dict->items.emplace_back(std::move(key), parse_expression());
  }
  expect_op("}");
  return dict;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(cur(), ".") || is_op(cur(), "[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op(cur(), "(")) {
      auto call = std::make_unique<CallExpr>(std::move(node), cur().offset);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op(cur(), "|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name(cur(), "is")) {
      node = parse_test(std::move(node));
    } else if (is_op(cur(), "(")) {
      auto call = std::make_unique<CallExpr>(std::move(node), cur().offset);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = advance();
  size_t offset = t.offset;
  if (t.text == ".") {
    const Token& attr = advance();
    if (attr.type == TokenType::kName)
      return std::make_unique<GetAttrExpr>(std::move(node), attr.text, offset);
    if (attr.type != TokenType::kInteger) fail("expected name or number", attr.offset);
    auto key = std::make_unique<ConstExpr>(Value(attr.int_value), attr.offset);
    return std::make_unique<GetItemExpr>(std::move(node), std::move(key), offset);
  }
  std::vector<ExprPtr> args;
  while (!is_op(cur(), "]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    auto tuple = std::make_unique<ListExpr>(true, offset);
    tuple->items = std::move(args);
    key = std::move(tuple);
  }
  return std::make_unique<GetItemExpr>(std::move(node), std::move(key), offset);
}

ExprPtr Parser::parse_subscribed() {
  size_t offset = cur().offset;
  auto slice = std::make_unique<SliceExpr>(offset);
  if (!skip_op(":")) {
    ExprPtr node = parse_expression();
    if (!skip_op(":")) return node;
    slice->start = std::move(node);
  }
  if (!is_op(cur(), ":") && !is_op(cur(), "]") && !is_op(cur(), ","))
    slice->stop = parse_expression();
  if (skip_op(":")) {
    if (!is_op(cur(), "]") && !is_op(cur(), ",")) slice->step = parse_expression();
  }
  return slice;
}

Arguments Parser::parse_call_args() {
  Arguments a;
  size_t offset = cur().offset;
  expect_op("(");
  bool require_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail("invalid syntax for function call expression", offset);
  };
  while (!is_op(cur(), ")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(cur(), ")")) break;  // trailing comma
    }
    if (skip_op("*")) {
      ensure(a.star_args == nullptr && a.star_kwargs == nullptr);
      a.star_args = parse_expression();
    } else if (skip_op("**")) {
      ensure(a.star_kwargs == nullptr);
      a.star_kwargs = parse_expression();
    } else if (cur().type == TokenType::kName && is_op(peek(), "=")) {
      ensure(a.star_kwargs == nullptr);
      std::string key = advance().text;
      advance();
      a.keyword.emplace_back(key, parse_expression());
    } else {
      ensure(a.star_args == nullptr && a.star_kwargs == nullptr && a.keyword.empty());
      a.positional.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
  return a;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op(cur(), "|") || start_inline) {
    if (!start_inline) advance();
    size_t offset = cur().offset;
    std::string name = expect_name();
    while (skip_op(".")) name += cat(".", expect_name());
    auto filter = std::make_unique<FilterExpr>(Expr::Kind::kFilter, std::move(node), name, offset);
    if (is_op(cur(), "(")) filter->args = parse_call_args();
    node = std::move(filter);
    start_inline = false;
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  size_t offset = advance().offset;
  bool negated = skip_name("not");
  std::string name = expect_name();
  while (skip_op(".")) name += cat(".", expect_name());
  auto test = std::make_unique<FilterExpr>(Expr::Kind::kTest, std::move(node), name, offset);
  const Token& t = cur();
  bool arg_start = t.type == TokenType::kName || t.type == TokenType::kString ||
                   t.type == TokenType::kInteger || t.type == TokenType::kFloat || is_op(t, "[") ||
                   is_op(t, "{");
  if (is_op(t, "(")) {
    test->args = parse_call_args();
  } else if (arg_start && !is_name_in(t, {"else", "or", "and"})) {
    if (is_name(t, "is")) fail_here("You cannot chain multiple tests with is");
    test->args.positional.push_back(parse_postfix(parse_primary()));
  }
  if (!negated) return test;
  return std::make_unique<UnaryExpr>(Expr::Kind::kNot, std::move(test), offset);
}

}  // namespace lowbit::jinja::detail
