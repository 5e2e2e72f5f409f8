// Recursive-descent parser for Jinja, following jinja2's grammar and operator
// precedence (lowest first): `x if c else y`, or, and, not, comparisons
// (== != < <= > >= in, not in), + -, ~, * / // %, **, unary - +, then
// primary with postfix (.attr, [sub], call) and filters/tests (| and is),
// which therefore bind tighter than every binary operator.
#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/lexer.h"

namespace opal::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    std::string end;
    Body body = subparse({}, end);
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().value == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data: return "template data";
      case TokenType::VarBegin: return "begin of print statement";
      case TokenType::VarEnd: return "end of print statement";
      case TokenType::BlockBegin: return "begin of statement block";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::String: return "string";
      case TokenType::Integer: return "integer";
      case TokenType::Float: return "float";
      case TokenType::End: return "end of template";
      default: return "'" + t.value + "'";
    }
  }

  [[noreturn]] void fail(const std::string& what, const Token& at) const {
    throw TemplateError("TemplateSyntaxError", what, at.line, at.column);
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what, cur()); }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected token '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail(fmt::format("expected token 'name', got {}", describe(cur())));
    std::string n = cur().value;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd)
      fail(fmt::format("expected token 'end of statement block', got {}", describe(cur())));
    advance();
  }

  ExprPtr make(Expr::Type type, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  template <typename T>
  std::unique_ptr<T> make_stmt(const Token& at) {
    auto s = std::make_unique<T>();
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Parses statements until a block tag whose name is in `ends` (left as the
  // current token, its name in `found`) or the end of the template.
  Body subparse(std::initializer_list<std::string_view> ends, std::string& found) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::Data: {
          auto d = make_stmt<DataStmt>(t);
          d->text = t.value;
          body.push_back(std::move(d));
          advance();
          break;
        }
        case TokenType::VarBegin: {
          advance();
          auto p = make_stmt<PrintStmt>(cur());
          p->expr = parse_tuple(false, true, {}, false);
          if (cur().type != TokenType::VarEnd)
            fail(fmt::format("expected token 'end of print statement', got {}", describe(cur())));
          advance();
          body.push_back(std::move(p));
          break;
        }
        case TokenType::BlockBegin: {
          advance();
          if (cur().type != TokenType::Name) fail("tag name expected");
          for (auto e : ends)
            if (cur().value == e) {
              found = cur().value;
              return body;
            }
          body.push_back(parse_statement());
          break;
        }
        case TokenType::End:
          if (ends.size()) {
            std::string list;
            for (auto e : ends) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
            fail(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}.", list));
          }
          return body;
        default: fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token tag = cur();
    const std::string& n = tag.value;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", n));
      advance();
      expect_block_end();
      return std::make_unique<Stmt>(n == "break" ? Stmt::Type::Break : Stmt::Type::Continue);
    }
    if (n == "generation") {
      advance();
      expect_block_end();
      auto s = make_stmt<ScopeStmt>(tag);
      s->body = body_until("endgeneration");
      return s;
    }
    static const char* const known_end_tags[] = {"endif",   "endfor",    "endset",  "endmacro",
                                                 "endcall", "endfilter", "endwith", "endgeneration",
                                                 "elif",    "else",      "endraw"};
    for (const char* e : known_end_tags)
      if (n == e) fail(fmt::format("Encountered unknown tag '{}'.", n));
    fail(fmt::format("Encountered unknown tag '{}'.", n));
  }

  Body body_until(std::string_view end) {
    std::string found;
    Body b = subparse({end}, found);
    advance();  // the end tag name
    expect_block_end();
    return b;
  }

  StmtPtr parse_if() {
    auto s = make_stmt<IfStmt>(cur());
    advance();
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {}, false);
      expect_block_end();
      std::string found;
      Body b = subparse({"elif", "else", "endif"}, found);
      s->branches.emplace_back(std::move(cond), std::move(b));
      advance();
      if (found == "elif") continue;
      if (found == "else") {
        expect_block_end();
        s->else_body = body_until("endif");
        return s;
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for() {
    auto s = make_stmt<ForStmt>(cur());
    advance();
    s->target = parse_assign_target(false, {"in"});
    if (!skip_name("in")) fail(fmt::format("expected token 'in', got {}", describe(cur())));
    s->iter = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (skip_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string found;
    s->body = subparse({"endfor", "else"}, found);
    --loop_depth_;
    advance();
    expect_block_end();
    if (found == "else") s->else_body = body_until("endfor");
    return s;
  }

  StmtPtr parse_set() {
    const Token at = cur();
    advance();
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = make_stmt<SetStmt>(at);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = make_stmt<SetBlockStmt>(at);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    expect_block_end();
    s->body = body_until("endset");
    return s;
  }

  std::vector<MacroParam> parse_signature() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value) fail("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt<MacroStmt>(cur());
    advance();
    s->name = expect_name();
    s->params = parse_signature();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = body_until("endmacro");
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt<CallBlockStmt>(cur());
    advance();
    if (is_op("(")) s->params = parse_signature();
    const Token at = cur();
    s->call = parse_expression(true);
    if (s->call->type != Expr::Type::Call) fail("expected call", at);
    expect_block_end();
    s->body = body_until("endcall");
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt<FilterBlockStmt>(cur());
    advance();
    s->filter = parse_filter(nullptr, true);
    expect_block_end();
    s->body = body_until("endfilter");
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt<WithStmt>(cur());
    advance();
    while (cur().type != TokenType::BlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_assign_target(false, {});
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    expect_block_end();
    s->body = body_until("endwith");
    return s;
  }

  Target parse_assign_target(bool with_namespace, std::initializer_list<std::string_view> extra_end) {
    Target t;
    if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().value == ".") {
      t.names.push_back(cur().value);
      advance();
      advance();
      t.attribute = expect_name();
      return t;
    }
    while (true) {
      if (!t.names.empty()) {
        if (!skip_op(",")) break;
        t.is_tuple = true;
      }
      if (cur().type != TokenType::Name) {
        if (t.is_tuple) break;  // trailing comma
        fail(fmt::format("expected token 'name', got {}", describe(cur())));
      }
      bool is_end = false;
      for (auto e : extra_end) is_end |= cur().value == e;
      if (is_end) break;
      const std::string& n = cur().value;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail(fmt::format("Can't assign to {}", n));
      t.names.push_back(n);
      advance();
    }
    if (t.names.empty()) fail("expected an assignment target");
    return t;
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.type == TokenType::End) return true;
    if (t.type == TokenType::Operator && t.value == ")") return true;
    if (t.type == TokenType::Name)
      for (auto e : extra_end)
        if (t.value == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses) {
    const Token at = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail(fmt::format("Expected an expression, got {}", describe(cur())));
    }
    auto e = make(Expr::Type::Tuple, at);
    e->children = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      const Token at = cur();
      advance();
      ExprPtr cond = parse_or();
      ExprPtr else_expr;
      if (skip_name("else")) else_expr = parse_condexpr();
      auto e = make(Expr::Type::Cond, at);
      e->children.push_back(std::move(expr1));
      e->children.push_back(std::move(cond));
      e->children.push_back(std::move(else_expr));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(Expr::Type type, const Token& at, ExprPtr l, ExprPtr r, std::string op = {}) {
    auto e = make(type, at);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::Or, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::And, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const Token at = cur();
      advance();
      auto e = make(Expr::Type::Not, at);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::Operator && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                                cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::Name && peek().value == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Type::Compare, at);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::Binary, at, std::move(left), parse_concat(), at.value);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::Binary, at, std::move(left), parse_math2(), "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::Binary, at, std::move(left), parse_pow(), at.value);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token at = cur();
      advance();
      left = binary(Expr::Type::Binary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  // Nesting guard: every expression level passes through here.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("expression or block nesting is too deep");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Token at = cur();
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      advance();
      node = make(at.value == "-" ? Expr::Type::Neg : Expr::Type::Pos, at);
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  static int64_t parse_int_literal(const std::string& text, const Token& at) {
    std::string digits;
    for (char c : text)
      if (c != '_') digits.push_back(c);
    int base = 10;
    size_t start = 0;
    if (digits.size() > 2 && digits[0] == '0') {
      const char p = char(std::tolower(digits[1]));
      if (p == 'x') base = 16, start = 2;
      else if (p == 'o') base = 8, start = 2;
      else if (p == 'b') base = 2, start = 2;
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str() + start, &end, base);
    if (errno == ERANGE || !end || *end)
      throw TemplateError("TemplateSyntaxError", fmt::format("integer literal out of range: {}", text), at.line,
                          at.column);
    return v;
  }

  ExprPtr parse_primary() {
    const Token t = cur();
    switch (t.type) {
      case TokenType::Name: {
        advance();
        auto e = make(Expr::Type::Const, t);
        if (t.value == "true" || t.value == "True") e->value = Value(true);
        else if (t.value == "false" || t.value == "False") e->value = Value(false);
        else if (t.value == "none" || t.value == "None") e->value = Value(nullptr);
        else {
          e->type = Expr::Type::Name;
          e->name = t.value;
        }
        return e;
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) {
          s += cur().value;
          advance();
        }
        auto e = make(Expr::Type::Const, t);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::Integer: {
        advance();
        auto e = make(Expr::Type::Const, t);
        e->value = Value(parse_int_literal(t.value, t));
        return e;
      }
      case TokenType::Float: {
        advance();
        std::string digits;
        for (char c : t.value)
          if (c != '_') digits.push_back(c);
        auto e = make(Expr::Type::Const, t);
        e->value = Value(std::strtod(digits.c_str(), nullptr));
        return e;
      }
      case TokenType::Operator:
        if (t.value == "(") {
          advance();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          advance();
          auto e = make(Expr::Type::List, t);
          while (!is_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("]")) break;
            e->children.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.value == "{") {
          advance();
          auto e = make(Expr::Type::Dict, t);
          while (!is_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("}")) break;
            e->children.push_back(parse_expression(true));
            expect_op(":");
            e->children.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token at = cur();
    if (skip_op(".")) {
      const Token attr = cur();
      if (attr.type == TokenType::Name) {
        advance();
        auto e = make(Expr::Type::Attr, at);
        e->name = attr.value;
        e->children.push_back(std::move(node));
        return e;
      }
      if (attr.type == TokenType::Integer) {
        advance();
        auto e = make(Expr::Type::Subscript, at);
        auto idx = make(Expr::Type::Const, attr);
        idx->value = Value(parse_int_literal(attr.value, attr));
        e->children.push_back(std::move(node));
        e->children.push_back(std::move(idx));
        return e;
      }
      fail("expected name or number", attr);
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(Expr::Type::Subscript, at);
    e->children.push_back(std::move(node));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      auto tup = make(Expr::Type::Tuple, at);
      tup->children = std::move(args);
      e->children.push_back(std::move(tup));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const Token at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    advance();  // ':'
    auto slice = make(Expr::Type::Slice, at);
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    slice->children.push_back(std::move(start));
    slice->children.push_back(std::move(stop));
    slice->children.push_back(std::move(step));
    return slice;
  }

  // Parses "(args, name=value)" into e->children (appended) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("invalid syntax for function call expression");
        e.children.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Type::Call, cur());
    e->children.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      advance();
      n += '.';
      n += expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      const Token at = cur();
      auto e = make(Expr::Type::Filter, at);
      e->name = dotted_name();
      if (!has_filter(e->name))
        throw TemplateError("TemplateAssertionError", fmt::format("No filter named '{}'.", e->name), at.line,
                            at.column);
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token is_tok = cur();
    advance();  // 'is'
    const bool negated = skip_name("not");
    const Token at = cur();
    auto e = make(Expr::Type::Test, at);
    e->name = dotted_name();
    if (!has_test(e->name))
      throw TemplateError("TemplateAssertionError", fmt::format("No test named '{}'.", e->name), at.line, at.column);
    e->children.push_back(std::move(node));
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((c.type == TokenType::Name || c.type == TokenType::String || c.type == TokenType::Integer ||
                c.type == TokenType::Float || is_op("[") || is_op("{")) &&
               !(c.type == TokenType::Name && (c.value == "else" || c.value == "or" || c.value == "and"))) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(Expr::Type::Not, is_tok);
    n->children.push_back(std::move(e));
    return n;
  }

  static constexpr int kMaxNesting = 300;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace opal::jinja
