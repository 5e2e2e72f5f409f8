// Python object semantics for Jinja values: truthiness, str()/repr(), ==, <,
// float repr and json.dumps (see value.h).
#include "tokenizer/jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace opal::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::move(d);
  return v;
}

Value Value::namespace_object() {
  Value v = dict();
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value(nullptr);
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return Value(double(u));
      return Value(int64_t(u));
    }
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get_ref<const std::string&>());
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d->entries.emplace_back(Value(it.key()), from_json(it.value()));
      return dict(std::move(d));
    }
    default: return Value(nullptr);
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0.0;
    case Kind::String: return !str_.empty();
    case Kind::List:
    case Kind::Tuple: return !list_->empty();
    case Kind::Dict: return dict_->size() != 0;
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out += "0.";
      out.append(size_t(-exp10 - 1), '0');
      out += digits;
    } else {
      const size_t int_len = size_t(exp10) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out += '.';
        out += digits.substr(int_len);
      }
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  return out;
}

std::string python_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : unicode::decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!unicode::is_printable(c)) {
      if (c < 0x100) out += fmt::format("\\x{:02x}", uint32_t(c));
      else if (c < 0x10000) out += fmt::format("\\u{:04x}", uint32_t(c));
      else out += fmt::format("\\U{:08x}", uint32_t(c));
    } else {
      unicode::append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return str_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float_repr(float_);
    case Kind::String: return python_string_repr(str_);
    case Kind::List:
    case Kind::Tuple: {
      const bool tuple = kind_ == Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple && list_->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      std::string out = kind_ == Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr();
        out += ": ";
        out += v.repr();
      }
      out += kind_ == Kind::Namespace ? "}>" : "}";
      return out;
    }
    case Kind::Callable: return "<function " + fn_->name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::None: return nullptr;
    case Kind::Bool: return as_bool();
    case Kind::Int: return int_;
    case Kind::Float: return float_;
    case Kind::String: return str_;
    case Kind::List:
    case Kind::Tuple: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : *list_) a.push_back(e.to_json());
      return a;
    }
    case Kind::Dict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict_->entries) o[k.is_string() ? k.str() : k.repr()] = v.to_json();
      return o;
    }
    default: eval_fail("TypeError", fmt::format("Object of type {} is not JSON serializable", type_name()));
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& e : entries)
    if (equals(e.first, key)) return &e.second;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& e : entries)
    if (e.first.is_string() && e.first.str() == key) return &e.second;
  return nullptr;
}

void Dict::set(const Value& key, Value v) {
  for (auto& e : entries)
    if (equals(e.first, key)) {
      e.second = std::move(v);
      return;
    }
  entries.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t i, std::string_view name, Value def) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return def;
}

bool CallArgs::has(size_t i, std::string_view name) const {
  if (i < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) {
    if (a.is_sequence() && b.is_sequence()) return false;  // [1] != (1,)
    return false;
  }
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const auto& x = a.dict_ref();
      const auto& y = b.dict_ref();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case K::Namespace: return a.dict_ptr() == b.dict_ptr();
    case K::Callable: return &a.callable() == &b.callable();
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.is_sequence() && b.is_sequence() && a.kind() == b.kind()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) eval_fail("UndefinedError", a.is_undefined() ? a.str() : b.str());
  eval_fail("TypeError",
            fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : unicode::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", uint32_t(c));
        } else if (ensure_ascii && c >= 0x7F) {
          if (c >= 0x10000) {
            const uint32_t v = uint32_t(c) - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", uint32_t(c));
          }
        } else {
          unicode::append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::None: return "null";
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return python_float_repr(k.as_double());
    default: eval_fail("TypeError", fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  const bool pretty = o.indent >= 0 || o.use_indent_string;
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) {
      if (o.use_indent_string) out += o.indent_string;
      else out.append(size_t(o.indent), ' ');
    }
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) newline(level + 1);
        dump(out, items[i], o, level + 1);
      }
      if (pretty) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      const auto& d = v.dict_ref();
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : d.entries) entries.emplace_back(json_key(k), &val);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) newline(level + 1);
        json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, *entries[i].second, o, level + 1);
      }
      if (pretty) newline(level);
      out.push_back('}');
      return;
    }
    default: eval_fail("TypeError", fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& o) {
  std::string out;
  dump(out, v, o, 0);
  return out;
}

}  // namespace opal::jinja
