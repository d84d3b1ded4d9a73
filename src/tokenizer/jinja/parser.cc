#include "tokenizer/jinja/parser_impl.h"
#include "tokenizer/jinja/scoping.h"

namespace lowbit::jinja::detail {

Body Parser::subparse(Names end_tokens) {
  DepthGuard guard(*this);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::kData) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::kText, t.offset);
      s->text = t.text;
      body.push_back(std::move(s));
      advance();
    } else if (t.type == TokenType::kVariableBegin) {
      advance();
      auto s = std::make_unique<Stmt>(Stmt::Kind::kPrint, t.offset);
      s->expr = parse_tuple();
      expect(TokenType::kVariableEnd, "end of print statement");
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      advance();
      if (end_tokens.size() != 0 && is_name_in(cur(), end_tokens)) return body;
      body.push_back(parse_statement());
      expect(TokenType::kBlockEnd, "end of statement block");
    } else {
      if (end_tokens.size() != 0) {
        std::string tags;
        for (const char* n : end_tokens)
          tags += (tags.empty() ? "'" : " or '") + std::string(n) + "'";
        fail_here("Unexpected end of template. Jinja was looking for the following tags: " + tags);
      }
      return body;
    }
  }
}

Body Parser::parse_statements(Names end_tokens, bool drop_needle) {
  skip_op(":");
  expect(TokenType::kBlockEnd, "end of statement block");
  Body body = subparse(end_tokens);
  if (drop_needle) advance();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::kName) fail_here("tag name expected");
  const std::string& n = t.text;
  if (n == "for") return parse_for();
  if (n == "if") return parse_if();
  if (n == "set") return parse_set();
  if (n == "macro" || n == "call") return parse_macro_or_call(n == "call");
  if (n == "with") return parse_with();
  if (n == "break" || n == "continue") {
    advance();
    return std::make_unique<Stmt>(n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue,
                                  t.offset);
  }
  if (n == "print") {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kPrint, advance().offset);
    s->expr = parse_tuple();
    return s;
  }
  if (n == "filter" || n == "generation") {
    auto s = std::make_unique<Stmt>(n == "filter" ? Stmt::Kind::kFilterBlock : Stmt::Kind::kScope,
                                    advance().offset);
    if (s->kind == Stmt::Kind::kFilterBlock) {
      s->filter = parse_filter(nullptr, true);
      s->body = parse_statements({"endfilter"}, true);
    } else {
      s->body = parse_statements({"endgeneration"}, true);
    }
    return s;
  }
  if (n == "block" || n == "extends" || n == "include" || n == "import" || n == "from" ||
      n == "autoescape") {
    fail_here("the '" + n + "' tag is not supported in chat templates");
  }
  fail_here("Encountered unknown tag '" + n + "'.");
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kFor, advance().offset);
  s->target = parse_assign_target({"in"}, false);
  if (!skip_name("in")) fail_here("expected 'in', got '" + describe(cur()) + "'");
  s->expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s->condition = parse_expression();
  if (is_name(cur(), "recursive")) fail_here("recursive loops are not supported in chat templates");
  s->body = parse_statements({"endfor", "else"}, false);
  if (advance().text != "endfor") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kIf, advance().offset);
  while (true) {
    ExprPtr test = parse_tuple(false, false);
    Body body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(test), std::move(body));
    const Token& t = advance();
    if (t.text == "elif") continue;
    if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  return s;
}

StmtPtr Parser::parse_set() {
  size_t offset = advance().offset;
  Target target = parse_assign_target({}, true);
  if (skip_op("=")) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kSet, offset);
    s->target = std::move(target);
    s->expr = parse_tuple();
    return s;
  }
  auto s = std::make_unique<Stmt>(Stmt::Kind::kSetBlock, offset);
  s->target = std::move(target);
  s->filter = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

StmtPtr Parser::parse_macro_or_call(bool is_call) {
  auto s = std::make_unique<Stmt>(is_call ? Stmt::Kind::kCallBlock : Stmt::Kind::kMacro,
                                  advance().offset);
  if (is_call) {
    if (is_op(cur(), "(")) parse_signature(*s);
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::kCall) fail("expected call", s->offset);
    s->body = parse_statements({"endcall"}, true);
  } else {
    s->name = expect_name();
    parse_signature(*s);
    s->body = parse_statements({"endmacro"}, true);
  }
  return s;
}

void Parser::parse_signature(Stmt& stmt) {
  expect_op("(");
  while (!is_op(cur(), ")")) {
    if (!stmt.params.empty()) expect_op(",");
    stmt.params.push_back(expect_name());
    if (skip_op("=")) {
      stmt.defaults.push_back(parse_expression());
    } else if (!stmt.defaults.empty()) {
      fail_here("non-default argument follows default argument");
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kWith, advance().offset);
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->with_targets.empty()) expect_op(",");
    s->with_targets.push_back(parse_assign_target({}, false));
    expect_op("=");
    s->with_values.push_back(parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

Target Parser::parse_assign_target(Names extra_end_rules, bool with_namespace) {
  ExprPtr e = parse_tuple(true, true, extra_end_rules, false, with_namespace);
  return to_target(*e, with_namespace);
}

Target Parser::to_target(const Expr& e, bool allow_namespace) const {
  Target t;
  if (e.kind == Expr::Kind::kName) {
    t.name = static_cast<const NameExpr&>(e).name;
    return t;
  }
  if (e.kind == Expr::Kind::kGetAttr && allow_namespace) {
    const auto& g = static_cast<const GetAttrExpr&>(e);
    if (g.object->kind == Expr::Kind::kName) {
      t.kind = Target::Kind::kNamespaceAttr;
      t.name = static_cast<const NameExpr&>(*g.object).name;
      t.attr = g.attr;
      return t;
    }
  }
  if (e.kind == Expr::Kind::kList && static_cast<const ListExpr&>(e).is_tuple) {
    t.kind = Target::Kind::kTuple;
    for (const auto& item : static_cast<const ListExpr&>(e).items)
      t.items.push_back(to_target(*item, false));
    return t;
  }
  fail("can't assign to this expression", e.offset);
}

}  // namespace lowbit::jinja::detail

namespace lowbit::jinja {

ParsedTemplate parse(const std::string& source) {
  ParsedTemplate tpl = detail::Parser(tokenize(source)).run();
  analyze_scopes(tpl);
  return tpl;
}

}  // namespace lowbit::jinja
