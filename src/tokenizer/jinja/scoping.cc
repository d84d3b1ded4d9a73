#include "tokenizer/jinja/scoping.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace lowbit::jinja {
namespace {

// Mirrors jinja2.idtracking.Symbols: how a frame's local for each name is initialized.
enum class Load { kResolve, kAlias, kParameter, kUndefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Load> loads;  // refs and their load instruction
  std::set<std::string> stores;

  bool has_ref(const std::string& name) const {
    return loads.count(name) != 0 || (parent != nullptr && parent->has_ref(name));
  }
  void load(const std::string& name) {
    if (!has_ref(name)) loads[name] = Load::kResolve;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (loads.count(name) != 0) return;
    loads[name] = (parent != nullptr && parent->has_ref(name)) ? Load::kAlias : Load::kUndefined;
  }
  void parameter(const std::string& name) {
    stores.insert(name);
    loads[name] = Load::kParameter;
  }
  // Symbols.branch_update: merge the tables of an if's branches (later branches win); a name
  // first assigned inside a branch starts from its outer value, never undefined.
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> new_stores;
    for (const Symbols& b : branches) {
      for (const std::string& s : b.stores) {
        if (stores.count(s) == 0) new_stores.insert(s);
      }
    }
    for (const Symbols& b : branches) {
      for (const auto& [name, load] : b.loads) loads[name] = load;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const std::string& name : new_stores) {
      loads[name] = (parent != nullptr && parent->has_ref(name)) ? Load::kAlias : Load::kResolve;
    }
  }
};

// Visits the statements of one frame; nested frames are visited afterwards (children()), with
// this frame's finished table as parent, as jinja compiles them.
class FrameVisitor {
 public:
  explicit FrameVisitor(Symbols& syms) : syms_(&syms) {}

  void visit_body(const Body& body) {
    for (const StmtPtr& s : body) visit_stmt(*s);
  }

  void visit_target(const Target& t) {
    if (t.kind == Target::Kind::kName) syms_->store(t.name);
    if (t.kind == Target::Kind::kNamespaceAttr) syms_->load(t.name);
    for (const Target& item : t.items) visit_target(item);
  }

  void visit_expr(const Expr* e) {
    if (e == nullptr) return;
    switch (e->kind) {
      case Expr::Kind::kName:
        syms_->load(static_cast<const NameExpr*>(e)->name);
        return;
      case Expr::Kind::kList:
        for (const ExprPtr& i : static_cast<const ListExpr*>(e)->items) visit_expr(i.get());
        return;
      case Expr::Kind::kDict:
        for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
          visit_expr(k.get());
          visit_expr(v.get());
        }
        return;
      case Expr::Kind::kGetAttr:
        visit_expr(static_cast<const GetAttrExpr*>(e)->object.get());
        return;
      case Expr::Kind::kGetItem:
        visit_expr(static_cast<const GetItemExpr*>(e)->object.get());
        visit_expr(static_cast<const GetItemExpr*>(e)->key.get());
        return;
      case Expr::Kind::kSlice: {
        const auto* s = static_cast<const SliceExpr*>(e);
        visit_expr(s->start.get());
        visit_expr(s->stop.get());
        visit_expr(s->step.get());
        return;
      }
      case Expr::Kind::kCall:
        visit_expr(static_cast<const CallExpr*>(e)->callee.get());
        visit_args(static_cast<const CallExpr*>(e)->args);
        return;
      case Expr::Kind::kFilter:
      case Expr::Kind::kTest:
        visit_expr(static_cast<const FilterExpr*>(e)->subject.get());
        visit_args(static_cast<const FilterExpr*>(e)->args);
        return;
      case Expr::Kind::kNot:
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos:
        visit_expr(static_cast<const UnaryExpr*>(e)->operand.get());
        return;
      case Expr::Kind::kBinary:
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr:
        visit_expr(static_cast<const BinaryExpr*>(e)->lhs.get());
        visit_expr(static_cast<const BinaryExpr*>(e)->rhs.get());
        return;
      case Expr::Kind::kConcat:
        for (const ExprPtr& p : static_cast<const ConcatExpr*>(e)->parts) visit_expr(p.get());
        return;
      case Expr::Kind::kCompare:
        visit_expr(static_cast<const CompareExpr*>(e)->first.get());
        for (const auto& op : static_cast<const CompareExpr*>(e)->ops) visit_expr(op.second.get());
        return;
      case Expr::Kind::kCondExpr: {
        const auto* c = static_cast<const CondExpr*>(e);
        visit_expr(c->test.get());
        visit_expr(c->then.get());
        visit_expr(c->otherwise.get());
        return;
      }
      case Expr::Kind::kConst:
        return;
    }
  }

 private:
  void visit_args(const Arguments& a) {
    for (const ExprPtr& p : a.positional) visit_expr(p.get());
    for (const auto& kw : a.keyword) visit_expr(kw.second.get());
    visit_expr(a.star_args.get());
    visit_expr(a.star_kwargs.get());
  }

  // jinja keeps elif tests as nested If nodes with empty else branches; replay that shape.
  void visit_if(const Stmt& s, size_t branch) {
    visit_expr(s.branches[branch].first.get());
    auto in_copy = [&](auto&& fn) {
      Symbols copy = *syms_;
      Symbols* saved = syms_;
      syms_ = &copy;
      fn();
      syms_ = saved;
      return copy;
    };
    std::vector<Symbols> tables;
    tables.push_back(in_copy([&] { visit_body(s.branches[branch].second); }));
    tables.push_back(in_copy([&] {
      if (branch == 0) {
        for (size_t k = 1; k < s.branches.size(); ++k) visit_if(s, k);
      }
    }));
    tables.push_back(in_copy([&] {
      if (branch == 0) visit_body(s.else_body);
    }));
    // visit_if(s, k) for k > 0 models an elif: its own elif/else lists are empty.
    syms_->branch_update(tables);
  }

  void visit_stmt(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kPrint:
        visit_expr(s.expr.get());
        break;
      case Stmt::Kind::kIf:
        visit_if(s, 0);
        break;
      case Stmt::Kind::kFor:
        visit_expr(s.expr.get());
        break;
      case Stmt::Kind::kSet:
        visit_expr(s.expr.get());
        visit_target(s.target);
        break;
      case Stmt::Kind::kSetBlock:
        visit_target(s.target);
        break;
      case Stmt::Kind::kMacro:
        syms_->store(s.name);
        break;
      case Stmt::Kind::kCallBlock:
        visit_expr(s.expr.get());
        break;
      case Stmt::Kind::kFilterBlock:
        visit_expr(s.filter.get());
        break;
      case Stmt::Kind::kWith:
        for (const ExprPtr& v : s.with_values) visit_expr(v.get());
        break;
      default:
        break;
    }
  }

  Symbols* syms_;
};

void analyze_frame(Body& body, const std::vector<std::string>& params, const Symbols* parent,
                   std::vector<std::string>& undefined_out);

void params_of(const Target& t, std::vector<std::string>& out) {
  if (t.kind == Target::Kind::kName) out.push_back(t.name);
  for (const Target& i : t.items) params_of(i, out);
}

// Recurses into the frames that statements of `body` (including those inside if branches) open.
void analyze_children(Body& body, const Symbols& syms) {
  for (StmtPtr& sp : body) {
    Stmt& s = *sp;
    switch (s.kind) {
      case Stmt::Kind::kIf:
        for (auto& branch : s.branches) analyze_children(branch.second, syms);
        analyze_children(s.else_body, syms);
        break;
      case Stmt::Kind::kFor: {
        std::vector<std::string> names;
        params_of(s.target, names);
        analyze_frame(s.body, names, &syms, s.body_undefined);
        analyze_frame(s.else_body, {}, &syms, s.else_undefined);
        break;
      }
      case Stmt::Kind::kMacro:
      case Stmt::Kind::kCallBlock: {
        std::vector<std::string> names = s.params;
        for (const char* implicit : {"caller", "varargs", "kwargs"}) names.emplace_back(implicit);
        analyze_frame(s.body, names, &syms, s.body_undefined);
        break;
      }
      case Stmt::Kind::kWith: {
        std::vector<std::string> names;
        for (const Target& t : s.with_targets) params_of(t, names);
        analyze_frame(s.body, names, &syms, s.body_undefined);
        break;
      }
      case Stmt::Kind::kSetBlock:
      case Stmt::Kind::kFilterBlock:
      case Stmt::Kind::kScope:
        analyze_frame(s.body, {}, &syms, s.body_undefined);
        break;
      default:
        break;
    }
  }
}

void analyze_frame(Body& body, const std::vector<std::string>& params, const Symbols* parent,
                   std::vector<std::string>& undefined_out) {
  Symbols syms;
  syms.parent = parent;
  for (const std::string& n : params) syms.parameter(n);
  FrameVisitor(syms).visit_body(body);
  for (const auto& [name, load] : syms.loads) {
    if (load == Load::kUndefined) undefined_out.push_back(name);
  }
  analyze_children(body, syms);
}

}  // namespace

void analyze_scopes(ParsedTemplate& tpl) {
  analyze_frame(tpl.body, {}, nullptr, tpl.body_undefined);
}

}  // namespace lowbit::jinja
