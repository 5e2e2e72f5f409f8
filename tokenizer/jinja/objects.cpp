// Attribute and item access, object methods (str, dict, list), operators and
// %-formatting with Python semantics, as jinja2's ImmutableSandboxedEnvironment
// exposes them: reading methods work, methods that modify a list or dict raise
// SecurityError.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/string_methods.h"
#include "tokenizer/jinja/unicode.h"

namespace opal::jinja {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  if (v.is_namespace()) return "'jinja2.utils.Namespace object'";
  return fmt::format("'{} object'", v.type_name());
}

void fail_undefined(const Value& undefined) {
  eval_fail("UndefinedError", undefined.str().empty() ? "value is undefined" : undefined.str());
}

namespace {

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("{} has no attribute '{}'", object_type_repr(obj), name));
}

Value unsafe_method(const Value& obj, std::string_view name) {
  std::string msg = fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name());
  return Value::function(std::string(name), [msg](CallArgs&) -> Value { eval_fail("SecurityError", msg); });
}

Value dict_method(const Value& obj, std::string_view name) {
  auto d = obj.dict_ptr();
  if (name == "items")
    return Value::function("items", [d](CallArgs&) {
      List out;
      for (const auto& [k, v] : d->entries) out.push_back(Value::tuple({k, v}));
      return Value::list(std::move(out));
    });
  if (name == "keys")
    return Value::function("keys", [d](CallArgs&) {
      List out;
      for (const auto& e : d->entries) out.push_back(e.first);
      return Value::list(std::move(out));
    });
  if (name == "values")
    return Value::function("values", [d](CallArgs&) {
      List out;
      for (const auto& e : d->entries) out.push_back(e.second);
      return Value::list(std::move(out));
    });
  if (name == "get")
    return Value::function("get", [d](CallArgs& a) {
      if (a.positional.empty()) eval_fail("TypeError", "get expected at least 1 argument, got 0");
      const Value* v = d->find(a.positional[0]);
      return v ? *v : a.get(1, "default", Value(nullptr));
    });
  if (name == "copy")
    return Value::function("copy", [d](CallArgs&) { return Value::dict(std::make_shared<Dict>(*d)); });
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return unsafe_method(obj, name);
  return Value();
}

Value list_method(const Value& obj, std::string_view name) {
  const Value self = obj;
  if (name == "index")
    return Value::function("index", [self](CallArgs& a) {
      const Value x = a.get(0, "value");
      const auto& items = self.items();
      for (size_t i = 0; i < items.size(); ++i)
        if (equals(items[i], x)) return Value(int64_t(i));
      eval_fail("ValueError", fmt::format("{} is not in list", x.repr()));
    });
  if (name == "count")
    return Value::function("count", [self](CallArgs& a) {
      const Value x = a.get(0, "value");
      int64_t n = 0;
      for (const auto& e : self.items()) n += equals(e, x);
      return Value(n);
    });
  if (name == "copy" && obj.kind() == Value::Kind::List)
    return Value::function("copy", [self](CallArgs&) { return Value::list(self.items()); });
  if (obj.kind() == Value::Kind::List && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                          name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return unsafe_method(obj, name);
  return Value();
}

}  // namespace

Value get_attribute(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::Namespace: {
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::String: {
      Value m = string_method(obj.str(), name);
      if (!m.is_undefined()) return m;
      return missing_attribute(obj, name);
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      return missing_attribute(obj, name);
    }
    default: return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      const std::string& s = obj.str();
      if (unicode::is_ascii(s)) {
        const auto n = int64_t(s.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(std::string(1, s[size_t(i)]));
      } else {
        std::u32string u = unicode::decode(s);
        const auto n = int64_t(u.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(unicode::encode(u.substr(size_t(i), 1)));
      }
    } else {
      const auto n = int64_t(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[size_t(i)];
    }
    return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), key.repr()));
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  if (key.is_undefined() && !obj.is_dict())
    return Value::undefined(fmt::format("{} has no element Undefined", object_type_repr(obj)));
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), key.repr()));
}

namespace {

// Python slice.indices(): clamps start/stop for a sequence of length n.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, int64_t& b, int64_t& e,
                   int64_t& s) {
  auto as_index = [](const Value& v, const char* what) -> int64_t {
    if (v.is_int() || v.is_bool()) return v.as_int();
    eval_fail("TypeError", fmt::format("slice indices must be integers or None, not {} ({})", v.type_name(), what));
  };
  s = (step.is_none() || step.is_undefined()) ? 1 : as_index(step, "step");
  if (s == 0) eval_fail("ValueError", "slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t def) -> int64_t {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t x = as_index(v, "index");
    if (x < 0) {
      x += n;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= n) {
      x = s < 0 ? n - 1 : n;
    }
    return x;
  };
  b = adjust(start, s < 0 ? n - 1 : 0);
  e = adjust(stop, s < 0 ? -1 : n);
}

}  // namespace

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  int64_t b, e, s;
  if (obj.is_string()) {
    std::u32string u = unicode::decode(obj.str());
    slice_indices(int64_t(u.size()), start, stop, step, b, e, s);
    std::u32string out;
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(u[size_t(i)]);
    return Value(unicode::encode(out));
  }
  if (obj.is_sequence()) {
    const auto& items = obj.items();
    slice_indices(int64_t(items.size()), start, stop, step, b, e, s);
    List out;
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(items[size_t(i)]);
    return obj.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined(fmt::format("{} has no element slice", object_type_repr(obj)));
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.callable().fn(args);
  if (callee.is_undefined()) fail_undefined(callee);
  eval_fail("TypeError", fmt::format("'{}' object is not callable", callee.type_name()));
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& e : v.dict_ref().entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::String: {
      List out;
      for (char32_t c : unicode::decode(v.str())) out.push_back(Value(unicode::encode(std::u32string(1, c))));
      return out;
    }
    default: eval_fail("TypeError", fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        eval_fail("TypeError", fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const auto& e : container.items())
        if (equals(e, item)) return true;
      return false;
    case Value::Kind::Dict: return container.dict_ref().find(item) != nullptr;
    default: eval_fail("TypeError", fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if ((op == "+") && (a.is_string() || a.kind() == Value::Kind::List || a.kind() == Value::Kind::Tuple))
    eval_fail("TypeError",
              fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
  eval_fail("TypeError",
            fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

bool both_int(const Value& a, const Value& b) { return (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool()); }

Value int_or_overflow(__int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min())
    eval_fail("OverflowError", "integer result does not fit in 64 bits");
  return Value(int64_t(v));
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (uint64_t(n) * seq.str().size() > (uint64_t(1) << 26)) eval_fail("MemoryError", "string repetition too large");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  if (uint64_t(n) * seq.items().size() > (uint64_t(1) << 24)) eval_fail("MemoryError", "list repetition too large");
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_str() + b.to_str());
  const bool numbers = a.is_number() && b.is_number();
  if (op == "+") {
    if (numbers) {
      if (both_int(a, b)) return int_or_overflow(__int128(a.as_int()) + b.as_int());
      return Value(a.as_double() + b.as_double());
    }
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_sequence() && a.kind() == b.kind()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported(op, a, b);
    if (both_int(a, b)) return int_or_overflow(__int128(a.as_int()) - b.as_int());
    return Value(a.as_double() - b.as_double());
  }
  if (op == "*") {
    if (numbers) {
      if (both_int(a, b)) return int_or_overflow(__int128(a.as_int()) * b.as_int());
      return Value(a.as_double() * b.as_double());
    }
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) eval_fail("ZeroDivisionError", "division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || (op == "%" && numbers)) {
    if (!numbers) unsupported(op, a, b);
    if (both_int(a, b)) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0)
        eval_fail("ZeroDivisionError", op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return Value(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) eval_fail("ZeroDivisionError", op == "//" ? "float floor division by zero" : "float modulo");
    if (op == "//") return Value(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.str(), b));
    unsupported(op, a, b);
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (both_int(a, b) && b.as_int() >= 0) {
      __int128 r = 1;
      const int64_t base = a.as_int();
      for (int64_t i = 0; i < b.as_int(); ++i) {
        r *= base;
        if (r > std::numeric_limits<int64_t>::max() || r < std::numeric_limits<int64_t>::min())
          eval_fail("OverflowError", "integer result does not fit in 64 bits");
        if (r == 0 || r == 1) break;
      }
      return Value(int64_t(r));
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  eval_fail("TypeError", fmt::format("unknown operator {}", op));
}

std::string percent_format(const std::string& f, const Value& args) {
  List positional;
  const Value* mapping = nullptr;
  if (args.kind() == Value::Kind::Tuple) positional = args.items();
  else if (args.is_dict()) mapping = &args;
  else positional.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) eval_fail("ValueError", "incomplete format");
    Value arg;
    bool have_arg = false;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) eval_fail("ValueError", "incomplete format key");
      if (!mapping) eval_fail("TypeError", "format requires a mapping");
      const Value* v = mapping->dict_ref().find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) eval_fail("KeyError", python_string_repr(f.substr(i + 1, close - i - 1)));
      arg = *v;
      have_arg = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    int width = 0, precision = -1;
    while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) width = width * 10 + (f[i++] - '0');
    if (i < f.size() && f[i] == '.') {
      precision = 0;
      ++i;
      while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])))
        precision = precision * 10 + (f[i++] - '0');
    }
    if (i >= f.size()) eval_fail("ValueError", "incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (mapping) {
        arg = *mapping;
      } else {
        if (next >= positional.size()) eval_fail("TypeError", "not enough arguments for format string");
        arg = positional[next++];
      }
    }
    std::string body;
    switch (conv) {
      case 's': body = arg.to_str(); break;
      case 'r':
      case 'a': body = arg.repr(); break;
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_number())
          eval_fail("TypeError", fmt::format("%{} format: a real number is required, not {}", conv, arg.type_name()));
        const int64_t v = arg.is_float() ? int64_t(std::trunc(arg.as_double())) : arg.as_int();
        const uint64_t mag = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
        if (conv == 'x') body = fmt::format("{:x}", mag);
        else if (conv == 'X') body = fmt::format("{:X}", mag);
        else if (conv == 'o') body = fmt::format("{:o}", mag);
        else body = std::to_string(mag);
        if (conv != 'd' && conv != 'i' && conv != 'u' && flags.find('#') != std::string::npos)
          body = (conv == 'x' ? "0x" : conv == 'X' ? "0X" : "0o") + body;
        if (v < 0) body = "-" + body;
        else if (flags.find('+') != std::string::npos) body = "+" + body;
        else if (flags.find(' ') != std::string::npos) body = " " + body;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) eval_fail("TypeError", fmt::format("must be real number, not {}", arg.type_name()));
        const int p = precision < 0 ? 6 : precision;
        const std::string spec = fmt::format("{{:{}{}.{}{}}}", flags.find('+') != std::string::npos ? "+" : "",
                                             flags.find('#') != std::string::npos ? "#" : "", p, conv);
        body = fmt::format(fmt::runtime(spec), arg.as_double());
        break;
      }
      case 'c':
        if (arg.is_int()) {
          std::string s;
          unicode::append_utf8(s, char32_t(arg.as_int()));
          body = s;
        } else {
          body = arg.to_str();
        }
        break;
      default: eval_fail("ValueError", fmt::format("unsupported format character '{}'", conv));
    }
    if ((conv == 's' || conv == 'r' || conv == 'a') && precision >= 0) {
      std::u32string u = unicode::decode(body);
      if (u.size() > size_t(precision)) body = unicode::encode(u.substr(0, size_t(precision)));
    }
    const size_t len = unicode::length(body);
    if (size_t(width) > len) {
      const size_t pad = size_t(width) - len;
      if (flags.find('-') != std::string::npos) body.append(pad, ' ');
      else if (flags.find('0') != std::string::npos && conv != 's' && conv != 'r') {
        size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
        body.insert(sign, pad, '0');
      } else {
        body.insert(0, pad, ' ');
      }
    }
    out += body;
  }
  if (!mapping && next < positional.size())
    eval_fail("TypeError", "not all arguments converted during string formatting");
  (void)used_mapping;
  return out;
}

}  // namespace opal::jinja
