// Syntax tree of a parsed template. Node kinds mirror jinja2's nodes.py for the subset lowbit
// supports; the evaluator switches on `kind` and downcasts.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

struct Expr {
  enum class Kind {
    kConst,
    kName,
    kList,  // list or tuple literal
    kDict,
    kGetAttr,
    kGetItem,
    kSlice,  // only as the key of kGetItem
    kCall,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kPos,
    kBinary,
    kAnd,
    kOr,
    kConcat,
    kCompare,
    kCondExpr,
  };
  Expr(Kind k, size_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
  Kind kind;
  size_t offset;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(Value v, size_t off) : Expr(Kind::kConst, off), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(std::string n, size_t off) : Expr(Kind::kName, off), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(bool tuple, size_t off) : Expr(Kind::kList, off), is_tuple(tuple) {}
  bool is_tuple;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(size_t off) : Expr(Kind::kDict, off) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(ExprPtr o, std::string a, size_t off)
      : Expr(Kind::kGetAttr, off), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(ExprPtr o, ExprPtr k, size_t off)
      : Expr(Kind::kGetItem, off), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr : Expr {
  explicit SliceExpr(size_t off) : Expr(Kind::kSlice, off) {}
  ExprPtr start, stop, step;  // each may be null
};

// Arguments of a call, filter or test.
struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr(ExprPtr c, size_t off) : Expr(Kind::kCall, off), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

// `subject | name(args)` and `subject is name(args)`. A filter block has no subject.
struct FilterExpr : Expr {
  FilterExpr(Kind k, ExprPtr s, std::string n, size_t off)
      : Expr(k, off), subject(std::move(s)), name(std::move(n)) {}
  ExprPtr subject;
  std::string name;
  Arguments args;
};

struct UnaryExpr : Expr {
  UnaryExpr(Kind k, ExprPtr o, size_t off) : Expr(k, off), operand(std::move(o)) {}
  ExprPtr operand;
};

// Arithmetic ("+", "-", "*", "/", "//", "%", "**") and the short-circuit kAnd/kOr.
struct BinaryExpr : Expr {
  BinaryExpr(Kind k, std::string o, ExprPtr l, ExprPtr r, size_t off)
      : Expr(k, off), op(std::move(o)), lhs(std::move(l)), rhs(std::move(r)) {}
  std::string op;
  ExprPtr lhs, rhs;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(size_t off) : Expr(Kind::kConcat, off) {}
  std::vector<ExprPtr> parts;
};

// a op1 b op2 c, evaluated as Python's chained comparison. Ops: == != < <= > >= in notin.
struct CompareExpr : Expr {
  CompareExpr(ExprPtr f, size_t off) : Expr(Kind::kCompare, off), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> ops;
};

struct CondExpr : Expr {
  CondExpr(ExprPtr t, ExprPtr y, ExprPtr n, size_t off)
      : Expr(Kind::kCondExpr, off),
        test(std::move(t)),
        then(std::move(y)),
        otherwise(std::move(n)) {}
  ExprPtr test, then, otherwise;  // otherwise may be null (yields Undefined)
};

// Assignment target: a name, a (nested) tuple of targets, or `namespace.attr`.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,
    kPrint,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kWith,
    kBreak,
    kContinue,
    kScope,  // {% generation %}: a body rendered in its own scope
  };
  Stmt(Kind k, size_t off) : kind(k), offset(off) {}
  Kind kind;
  size_t offset;
  // Generic slots; each kind documents which it uses.
  std::string text;   // kText
  ExprPtr expr;       // kPrint value, kFor iterable, kSet value, kCallBlock call
  ExprPtr condition;  // kFor loop filter
  ExprPtr filter;     // kSetBlock / kFilterBlock filter chain (subject-less)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (test, body) for if and each elif
  Body body;         // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith, kScope
  Body else_body;    // kIf, kFor
  Target target;     // kFor, kSet, kSetBlock
  std::string name;  // kMacro
  std::vector<std::string> params;   // kMacro, kCallBlock
  std::vector<ExprPtr> defaults;     // kMacro, kCallBlock: defaults of the last params
  std::vector<Target> with_targets;  // kWith
  std::vector<ExprPtr> with_values;  // kWith
  // Names the frame of `body` (and of a for loop's `else_body`) starts with as undefined: see
  // scoping.h. Filled by analyze_scopes() after parsing.
  std::vector<std::string> body_undefined;
  std::vector<std::string> else_undefined;
};

}  // namespace lowbit::jinja
