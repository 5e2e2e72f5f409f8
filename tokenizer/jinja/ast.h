// Syntax tree of a parsed Jinja template. Expressions are one tagged struct
// (few node kinds, uniform children); statements are small structs deriving
// from Stmt. Every node keeps its line and column for error messages.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace opal::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KeywordArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Type {
    Const,      // value
    Name,       // name
    List,       // children
    Tuple,      // children
    Dict,       // children: key0, value0, key1, value1, ...
    Attr,       // children[0].name
    Subscript,  // children[0][children[1]]
    Slice,      // children: start, stop, step (each may be null)
    Call,       // children[0](children[1..], kwargs)
    Filter,     // children[0] | name(children[1..], kwargs); children[0] null inside {% filter %}
    Test,       // children[0] is name(children[1..], kwargs)
    Neg,
    Pos,
    Not,
    Binary,  // name: + - * / // % ** ~
    And,
    Or,
    Compare,  // children[0] ops[0] children[1] ops[1] children[2] ...
    Cond,     // children: then, condition, else (may be null)
  };
  Type type;
  int line = 0, column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  KeywordArgs kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Type { Data, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, With, Scope };
  explicit Stmt(Type t) : type(t) {}
  virtual ~Stmt() = default;
  Type type;
  int line = 0, column = 0;
};

// Assignment target: a name, a tuple of names, or namespace.attribute.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attribute;  // non-empty: names[0].attribute (namespace assignment)
};

struct DataStmt : Stmt {
  DataStmt() : Stmt(Type::Data) {}
  std::string text;
};

struct PrintStmt : Stmt {
  PrintStmt() : Stmt(Type::Print) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  IfStmt() : Stmt(Type::If) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};

struct ForStmt : Stmt {
  ForStmt() : Stmt(Type::For) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // may be null
  Body body, else_body;
  bool recursive = false;
};

struct SetStmt : Stmt {
  SetStmt() : Stmt(Type::Set) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  SetBlockStmt() : Stmt(Type::SetBlock) {}
  Target target;
  ExprPtr filter;  // may be null: Filter chain whose innermost subject is null
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  MacroStmt() : Stmt(Type::Macro) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};

struct CallBlockStmt : Stmt {
  CallBlockStmt() : Stmt(Type::CallBlock) {}
  ExprPtr call;
  std::vector<MacroParam> params;
  Body body;
};

struct FilterBlockStmt : Stmt {
  FilterBlockStmt() : Stmt(Type::FilterBlock) {}
  ExprPtr filter;
  Body body;
};

struct WithStmt : Stmt {
  WithStmt() : Stmt(Type::With) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

// A body rendered as is ({% generation %}).
struct ScopeStmt : Stmt {
  ScopeStmt() : Stmt(Type::Scope) {}
  Body body;
};

// Throws TemplateError (TemplateSyntaxError / TemplateAssertionError).
Body parse_template(std::string_view source);

}  // namespace opal::jinja
