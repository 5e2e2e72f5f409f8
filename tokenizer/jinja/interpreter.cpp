// Tree-walking evaluator for parsed Jinja templates.
//
// Scoping follows jinja2: the render context (template variables) is the top
// scope and top-level {% set %} writes there; every for-loop iteration, macro
// call, call block and {% with %} gets a fresh child scope, so assignments in
// them do not leak out (and do not carry over to the next iteration); {% if %}
// opens no scope. Errors raised by value operations (EvalError) are turned into
// TemplateError at the innermost expression, which gives them line and column.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/template.h"

namespace opal::jinja {

TemplateError::TemplateError(std::string kind, std::string message, int line, int column)
    : opal::Error(fmt::format("chat template error at line {}, column {}: {}{}", line, column,
                              kind == "TemplateError" ? "" : kind + ": ", message)),
      kind_(std::move(kind)),
      message_(std::move(message)),
      line_(line),
      column_(column) {}

namespace {

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { Normal, Break, Continue };

constexpr int kMaxCallDepth = 200;
constexpr int64_t kMaxRange = 1 << 20;
constexpr size_t kMaxOutput = size_t(1) << 28;
constexpr int64_t kMaxLoopIterations = 20'000'000;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& o) : options_(o) {}

  std::string run(const Body& body, const nlohmann::ordered_json& vars) {
    auto globals = std::make_shared<Scope>();
    install_globals(*globals);
    auto top = child_of(globals);
    if (!vars.is_object()) throw TemplateError("TypeError", "template variables must be a JSON object", 0, 0);
    for (auto it = vars.begin(); it != vars.end(); ++it) top->set(it.key(), Value::from_json(it.value()));
    std::string out;
    exec_body(body, top, out);
    return out;
  }

 private:
  // ---- globals ------------------------------------------------------------

  void install_globals(Scope& g) {
    g.set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
            eval_fail("TemplateError", a.get(0, "message", Value("")).to_str());
          }));
    const RenderOptions opts = options_;
    g.set("strftime_now", Value::function("strftime_now", [opts](CallArgs& a) -> Value {
            const std::string f = a.get(0, "format", Value("")).to_str();
            const std::time_t t = opts.now ? *opts.now : std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            if (f.empty()) return Value("");
            std::string buf(f.size() * 8 + 64, '\0');
            const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
            buf.resize(n);
            return Value(buf);
          }));
    g.set("range", Value::function("range", [](CallArgs& a) -> Value {
            int64_t start = 0, stop = 0, step = 1;
            auto num = [](const Value& v) {
              if (!v.is_int() && !v.is_bool())
                eval_fail("TypeError", fmt::format("'{}' object cannot be interpreted as an integer", v.type_name()));
              return v.as_int();
            };
            if (a.positional.size() == 1) stop = num(a.positional[0]);
            else if (a.positional.size() >= 2) start = num(a.positional[0]), stop = num(a.positional[1]);
            if (a.positional.size() >= 3) step = num(a.positional[2]);
            if (a.positional.empty() || a.positional.size() > 3)
              eval_fail("TypeError", "range expected 1 to 3 arguments");
            if (step == 0) eval_fail("ValueError", "range() arg 3 must not be zero");
            List out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
              if (int64_t(out.size()) >= kMaxRange)
                eval_fail("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
              out.push_back(Value(i));
            }
            return Value::list(std::move(out));
          }));
    g.set("namespace", Value::function("namespace", [](CallArgs& a) -> Value {
            Value ns = Value::namespace_object();
            for (const auto& p : a.positional) {
              if (!p.is_dict()) eval_fail("TypeError", "namespace() positional argument must be a dict");
              for (const auto& [k, v] : p.dict_ref().entries) ns.dict_ref().set(k, v);
            }
            for (const auto& [k, v] : a.keyword) ns.dict_ref().set(Value(k), v);
            return ns;
          }));
    g.set("dict", Value::function("dict", [](CallArgs& a) -> Value {
            Value d = Value::dict();
            for (const auto& p : a.positional)
              if (p.is_dict())
                for (const auto& [k, v] : p.dict_ref().entries) d.dict_ref().set(k, v);
            for (const auto& [k, v] : a.keyword) d.dict_ref().set(Value(k), v);
            return d;
          }));
    g.set("joiner", Value::function("joiner", [](CallArgs& a) -> Value {
            auto used = std::make_shared<bool>(false);
            const std::string sep = a.get(0, "sep", Value(", ")).to_str();
            return Value::function("joiner", [used, sep](CallArgs&) -> Value {
              if (!*used) {
                *used = true;
                return Value("");
              }
              return Value(sep);
            });
          }));
  }

  // ---- statements ---------------------------------------------------------

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, scope, out);
      if (f != Flow::Normal) return f;
      if (out.size() > kMaxOutput)
        throw TemplateError("MemoryError", "rendered output exceeds 256 MiB", s->line, s->column);
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    try {
      return exec_inner(s, scope, out);
    } catch (const EvalError& e) {
      throw TemplateError(e.kind, e.message, s.line, s.column);
    }
  }

  Flow exec_inner(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.type) {
      case Stmt::Type::Data: out += static_cast<const DataStmt&>(s).text; return Flow::Normal;
      case Stmt::Type::Print: out += eval(*static_cast<const PrintStmt&>(s).expr, scope).to_str(); return Flow::Normal;
      case Stmt::Type::If: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [cond, body] : st.branches)
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        return exec_body(st.else_body, scope, out);
      }
      case Stmt::Type::For: exec_for(static_cast<const ForStmt&>(s), scope, out); return Flow::Normal;
      case Stmt::Type::Set: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(st.target, eval(*st.value, scope), *scope, s);
        return Flow::Normal;
      }
      case Stmt::Type::SetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        std::string captured;
        exec_body(st.body, child_of(scope), captured);
        Value v(std::move(captured));
        if (st.filter) v = eval_filter_chain(*st.filter, v, scope);
        assign(st.target, v, *scope, s);
        return Flow::Normal;
      }
      case Stmt::Type::Macro: {
        const auto& st = static_cast<const MacroStmt&>(s);
        scope->set(st.name, make_macro(st.name, st.params, st.body, scope));
        return Flow::Normal;
      }
      case Stmt::Type::CallBlock: {
        const auto& st = static_cast<const CallBlockStmt&>(s);
        Value caller = make_macro("caller", st.params, st.body, scope);
        const Expr& call = *st.call;
        Value callee = eval(*call.children[0], scope);
        CallArgs args = eval_args(call, 1, scope);
        args.keyword.emplace_back("caller", caller);
        out += call_value(callee, args).to_str();
        return Flow::Normal;
      }
      case Stmt::Type::FilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        std::string captured;
        exec_body(st.body, child_of(scope), captured);
        out += eval_filter_chain(*st.filter, Value(std::move(captured)), scope).to_str();
        return Flow::Normal;
      }
      case Stmt::Type::With: {
        const auto& st = static_cast<const WithStmt&>(s);
        auto inner = child_of(scope);
        for (const auto& [target, expr] : st.assignments) assign(target, eval(*expr, scope), *inner, s);
        return exec_body(st.body, inner, out);
      }
      case Stmt::Type::Scope: return exec_body(static_cast<const ScopeStmt&>(s).body, scope, out);
      case Stmt::Type::Break: return Flow::Break;
      case Stmt::Type::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void bind_target(const Target& t, const Value& v, Scope& scope) {
    if (!t.is_tuple) {
      scope.set(t.names[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != t.names.size())
      eval_fail("ValueError",
                items.size() > t.names.size()
                    ? fmt::format("too many values to unpack (expected {})", t.names.size())
                    : fmt::format("not enough values to unpack (expected {}, got {})", t.names.size(), items.size()));
    for (size_t i = 0; i < items.size(); ++i) scope.set(t.names[i], items[i]);
  }

  void assign(const Target& t, const Value& v, Scope& scope, const Stmt&) {
    if (t.attribute.empty()) {
      bind_target(t, v, scope);
      return;
    }
    const Value* ns = scope.find(t.names[0]);
    if (!ns || !ns->is_namespace())
      eval_fail("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    ns->dict_ref().set(Value(t.attribute), v);
  }

  void exec_for(const ForStmt& st, const ScopePtr& scope, std::string& out) {
    const Value seq = eval(*st.iter, scope);
    if (seq.is_undefined() && false) fail_undefined(seq);
    List items = iterate(seq);
    if (st.filter) {
      List kept;
      for (const auto& item : items) {
        auto probe = child_of(scope);
        bind_target(st.target, item, *probe);
        if (eval(*st.filter, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxLoopIterations)
        eval_fail("RuntimeError", "template runs more than 20 million loop iterations");
      auto iter_scope = child_of(scope);
      auto loop = std::make_shared<Dict>();
      loop->entries.reserve(12);
      loop->set(Value("index"), Value(i + 1));
      loop->set(Value("index0"), Value(i));
      loop->set(Value("revindex"), Value(n - i));
      loop->set(Value("revindex0"), Value(n - i - 1));
      loop->set(Value("first"), Value(i == 0));
      loop->set(Value("last"), Value(i == n - 1));
      loop->set(Value("length"), Value(n));
      loop->set(Value("depth"), Value(int64_t(1)));
      loop->set(Value("depth0"), Value(int64_t(0)));
      if (i > 0) loop->set(Value("previtem"), items[size_t(i - 1)]);
      if (i + 1 < n) loop->set(Value("nextitem"), items[size_t(i + 1)]);
      loop->set(Value("cycle"), Value::function("cycle", [i](CallArgs& a) -> Value {
                  if (a.positional.empty()) eval_fail("TypeError", "no items for cycling given");
                  return a.positional[size_t(i) % a.positional.size()];
                }));
      iter_scope->set("loop", Value::dict(loop));
      bind_target(st.target, items[size_t(i)], *iter_scope);
      if (exec_body(st.body, iter_scope, out) == Flow::Break) break;
    }
    if (n == 0) exec_body(st.else_body, scope, out);
  }

  Value make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const ScopePtr& def_scope) {
    Interpreter* self = this;
    const std::vector<MacroParam>* p = &params;
    const Body* b = &body;
    std::weak_ptr<Scope> weak = def_scope;
    return Value::function(name, [self, p, b, weak, name](CallArgs& a) -> Value {
      auto parent = weak.lock();
      if (!parent) eval_fail("TemplateRuntimeError", fmt::format("macro '{}' called after its scope ended", name));
      if (self->depth_ >= kMaxCallDepth) eval_fail("RecursionError", "maximum macro recursion depth exceeded");
      auto scope = child_of(parent);
      List varargs;
      for (size_t i = 0; i < a.positional.size(); ++i) {
        if (i < p->size()) scope->set((*p)[i].name, a.positional[i]);
        else varargs.push_back(a.positional[i]);
      }
      auto kwargs = std::make_shared<Dict>();
      for (const auto& [k, v] : a.keyword) {
        bool is_param = false;
        for (const auto& mp : *p) is_param |= mp.name == k;
        if (is_param) scope->set(k, v);
        else if (k == "caller") scope->set("caller", v);
        else kwargs->set(Value(k), v);
      }
      for (size_t i = a.positional.size(); i < p->size(); ++i) {
        const auto& mp = (*p)[i];
        bool given = false;
        for (const auto& kv : scope->vars) given |= kv.first == mp.name;
        if (given) continue;
        scope->set(mp.name, mp.default_value ? self->eval(*mp.default_value, scope)
                                             : Value::undefined(fmt::format("'{}' is undefined", mp.name)));
      }
      scope->set("varargs", Value::tuple(std::move(varargs)));
      scope->set("kwargs", Value::dict(kwargs));
      std::string out;
      ++self->depth_;
      try {
        self->exec_body(*b, scope, out);
      } catch (...) {
        --self->depth_;
        throw;
      }
      --self->depth_;
      return Value(std::move(out));
    });
  }

  // ---- expressions --------------------------------------------------------

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_inner(e, scope);
    } catch (const EvalError& err) {
      throw TemplateError(err.kind, err.message, e.line, e.column);
    }
  }

  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  // Applies a filter chain whose innermost subject is null to `subject`.
  Value eval_filter_chain(const Expr& f, const Value& subject, const ScopePtr& scope) {
    Value inner = f.children[0] ? eval_filter_chain(*f.children[0], subject, scope) : subject;
    CallArgs args = eval_args(f, 1, scope);
    try {
      return apply_filter(f.name, inner, args);
    } catch (const EvalError& err) {
      throw TemplateError(err.kind, err.message, f.line, f.column);
    }
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.type) {
      case Expr::Type::Const: return e.value;
      case Expr::Type::Name: {
        if (const Value* v = scope->find(e.name)) return *v;
        return Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case Expr::Type::List:
      case Expr::Type::Tuple: {
        List items;
        items.reserve(e.children.size());
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return e.type == Expr::Type::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Type::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2)
          d.dict_ref().set(eval(*e.children[i], scope), eval(*e.children[i + 1], scope));
        return d;
      }
      case Expr::Type::Attr: return get_attribute(eval(*e.children[0], scope), e.name);
      case Expr::Type::Subscript: {
        Value obj = eval(*e.children[0], scope);
        const Expr& idx = *e.children[1];
        if (idx.type == Expr::Type::Slice) {
          auto part = [&](size_t k) { return idx.children[k] ? eval(*idx.children[k], scope) : Value(nullptr); };
          return slice_value(obj, part(0), part(1), part(2));
        }
        return get_item(obj, eval(idx, scope));
      }
      case Expr::Type::Slice: eval_fail("TemplateSyntaxError", "slice outside of a subscript");
      case Expr::Type::Call: {
        Value callee = eval(*e.children[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return call_value(callee, args);
      }
      case Expr::Type::Filter: {
        Value subject = e.children[0] ? eval(*e.children[0], scope) : Value();
        CallArgs args = eval_args(e, 1, scope);
        return apply_filter(e.name, subject, args);
      }
      case Expr::Type::Test: {
        Value subject = eval(*e.children[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return Value(apply_test(e.name, subject, args));
      }
      case Expr::Type::Neg:
      case Expr::Type::Pos: {
        Value v = eval(*e.children[0], scope);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number())
          eval_fail("TypeError", fmt::format("bad operand type for unary {}: '{}'",
                                             e.type == Expr::Type::Neg ? '-' : '+', v.type_name()));
        if (e.type == Expr::Type::Pos) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        return Value(-v.as_int());
      }
      case Expr::Type::Not: return Value(!eval(*e.children[0], scope).truthy());
      case Expr::Type::And: {
        Value l = eval(*e.children[0], scope);
        return l.truthy() ? eval(*e.children[1], scope) : l;
      }
      case Expr::Type::Or: {
        Value l = eval(*e.children[0], scope);
        return l.truthy() ? l : eval(*e.children[1], scope);
      }
      case Expr::Type::Binary: {
        Value l = eval(*e.children[0], scope);
        Value r = eval(*e.children[1], scope);
        return binary_op(e.name, l, r);
      }
      case Expr::Type::Compare: {
        Value left = eval(*e.children[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], scope);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") ok = equals(left, right);
          else if (op == "!=") ok = !equals(left, right);
          else if (op == "<") ok = less_than(left, right);
          else if (op == ">") ok = less_than(right, left);
          else if (op == "<=") ok = less_than(left, right) || equals(left, right);
          else if (op == ">=") ok = less_than(right, left) || equals(left, right);
          else if (op == "in") ok = contains(right, left);
          else ok = !contains(right, left);
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Type::Cond: {
        if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
        if (e.children[2]) return eval(*e.children[2], scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
      }
    }
    return Value();
  }

  RenderOptions options_;
  int depth_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source) {
  Template t;
  t.body_ = std::make_shared<const Body>(parse_template(source));
  return t;
}

std::string Template::render(const nlohmann::ordered_json& vars) const { return render(vars, RenderOptions{}); }

std::string Template::render(const nlohmann::ordered_json& vars, const RenderOptions& options) const {
  if (!body_) throw TemplateError("TemplateError", "template was not parsed", 0, 0);
  return Interpreter(options).run(*body_, vars);
}

}  // namespace opal::jinja
