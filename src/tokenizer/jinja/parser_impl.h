// The parser class, shared by parser.cc (statements) and parser_expr.cc (expressions).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>

#include "lowbit/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace lowbit::jinja::detail {

using Names = std::initializer_list<const char*>;

class Parser {
 public:
  explicit Parser(LexedTemplate lexed) : lexed_(std::move(lexed)) {}

  ParsedTemplate run() {
    ParsedTemplate out;
    out.body = subparse({});
    out.source = std::move(lexed_.source);
    return out;
  }

 private:
  // ---------------------------------------------------------------- token helpers
  const Token& cur() const { return lexed_.tokens[pos_]; }
  const Token& peek() const { return lexed_.tokens[std::min(pos_ + 1, lexed_.tokens.size() - 1)]; }
  const Token& advance() {
    const Token& t = lexed_.tokens[pos_];
    if (pos_ + 1 < lexed_.tokens.size()) ++pos_;
    return t;
  }
  static bool is_op(const Token& t, const char* op) {
    return t.type == TokenType::kOperator && t.text == op;
  }
  static bool is_name(const Token& t, const char* n) {
    return t.type == TokenType::kName && t.text == n;
  }
  static bool is_name_in(const Token& t, Names names) {
    for (const char* n : names) {
      if (is_name(t, n)) return true;
    }
    return false;
  }
  bool skip_op(const char* op) {
    if (!is_op(cur(), op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(cur(), n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kName:
      case TokenType::kOperator:
        return t.text;
      case TokenType::kString:
        return "string";
      case TokenType::kInteger:
        return "integer";
      case TokenType::kFloat:
        return "float";
      case TokenType::kData:
        return "template data / text";
      case TokenType::kVariableBegin:
        return "begin of print statement";
      case TokenType::kVariableEnd:
        return "end of print statement";
      case TokenType::kBlockBegin:
        return "begin of statement block";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kEof:
        return "end of template";
    }
    return "token";
  }

  [[noreturn]] void fail(const std::string& message, size_t offset) const {
    throw InvalidArgument("chat template: syntax error at " +
                          describe_position(lexed_.source, offset) + ": " + message);
  }
  [[noreturn]] void fail_here(const std::string& message) const { fail(message, cur().offset); }

  void expect_op(const char* op) {
    if (!is_op(cur(), op))
      fail_here(std::string("expected '") + op + "', got '" + describe(cur()) + "'");
    advance();
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type)
      fail_here(std::string("expected '") + what + "', got '" + describe(cur()) + "'");
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail_here("expected name, got '" + describe(cur()) + "'");
    return advance().text;
  }

  // ---------------------------------------------------------------- statements
  Body subparse(Names end_tokens);
  Body parse_statements(Names end_tokens, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro_or_call(bool is_call);
  StmtPtr parse_with();
  void parse_signature(Stmt& stmt);
  Target parse_assign_target(Names extra_end_rules, bool with_namespace);
  Target to_target(const Expr& e, bool allow_namespace) const;

  // ---------------------------------------------------------------- expressions
  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }
  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true,
                      Names extra_end_rules = {}, bool explicit_parentheses = false,
                      bool with_namespace = false);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary(bool with_namespace = false);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  Arguments parse_call_args();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  // Bounds recursion on pathological nesting ("((((...", "- - - x", deep blocks), which would
  // otherwise overflow the C++ stack; Python's jinja hits its recursion limit there too.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail_here("template nesting is too deep");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };
  static constexpr int kMaxDepth = 200;

  LexedTemplate lexed_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace lowbit::jinja::detail
