// Built-in filters and tests with jinja2 3.1 semantics; `tojson` is the
// transformers override (json.dumps with ensure_ascii=False, no HTML escaping,
// Python's default separators, keys in insertion order).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/string_methods.h"
#include "tokenizer/jinja/unicode.h"

namespace opal::jinja {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);
using TestFn = bool (*)(const Value&, CallArgs&);

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return int64_t(unicode::length(v.str()));
    case Value::Kind::List:
    case Value::Kind::Tuple: return int64_t(v.items().size());
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return int64_t(v.dict_ref().size());
    default: eval_fail("TypeError", fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

// jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem.
Value lookup_attribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t b = 0;
  while (true) {
    const size_t e = path.find('.', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(v, digits ? Value(int64_t(std::stoll(part))) : Value(part));
    if (e == std::string::npos) return v;
    b = e + 1;
  }
}

std::string require_string_arg(const Value& v, const char* what) {
  if (!v.is_string()) eval_fail("TypeError", fmt::format("{} must be a string", what));
  return v.str();
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(unicode::lower(v.str()));
  return v;
}

// ---- filters -------------------------------------------------------------

Value f_abs(const Value& v, CallArgs&) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  eval_fail("TypeError", fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_attr(const Value& v, CallArgs& a) {
  return get_attribute(v, require_string_arg(a.get(0, "name"), "attr name"));
}

Value f_batch(const Value& v, CallArgs& a) {
  const int64_t n = a.get(0, "linecount").as_int();
  if (n <= 0) eval_fail("ValueError", "batch size must be positive");
  const Value fill = a.get(1, "fill_with", Value(nullptr));
  List out, cur;
  for (const auto& e : iterate(v)) {
    cur.push_back(e);
    if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(const Value& v, CallArgs&) { return Value(py_capitalize(v.to_str())); }

Value f_center(const Value& v, CallArgs& a) {
  CallArgs inner;
  inner.positional.push_back(a.get(0, "width", Value(int64_t(80))));
  return call_value(string_method(v.to_str(), "center"), inner);
}

Value f_length(const Value& v, CallArgs&) { return Value(length_of(v)); }

Value f_default(const Value& v, CallArgs& a) {
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a) {
  if (!v.is_dict()) eval_fail("TypeError", "dictsort requires a dict");
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const std::string by = a.get(1, "by", Value("key")).to_str();
  const bool reverse = a.get(2, "reverse", Value(false)).truthy();
  const size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
  if (pos == 2) eval_fail("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  List items;
  for (const auto& [k, val] : v.dict_ref().entries) items.push_back(Value::tuple({k, val}));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
    return reverse ? less_than(ky, kx) : less_than(kx, ky);
  });
  return Value::list(std::move(items));
}

Value f_escape(const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(out);
}

Value f_first(const Value& v, CallArgs&) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, CallArgs&) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

bool parse_python_float(const std::string& s, double& out) {
  std::string t = unicode::strip(s, nullptr, true, true);
  std::string digits;
  for (char c : t)
    if (c != '_') digits.push_back(c);
  if (digits.empty()) return false;
  char* end = nullptr;
  out = std::strtod(digits.c_str(), &end);
  return end && *end == 0;
}

Value f_float(const Value& v, CallArgs& a) {
  if (v.is_number()) return Value(v.as_double());
  double d;
  if (v.is_string() && parse_python_float(v.str(), d)) return Value(d);
  return a.get(0, "default", Value(0.0));
}

Value f_int(const Value& v, CallArgs& a) {
  const Value def = a.get(0, "default", Value(int64_t(0)));
  const int64_t base = a.get(1, "base", Value(int64_t(10))).as_int();
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(int64_t(std::trunc(v.as_double())));
  if (v.is_string()) {
    std::string t;
    for (char c : unicode::strip(v.str(), nullptr, true, true))
      if (c != '_') t.push_back(c);
    if (!t.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(t.c_str(), &end, int(base));
      if (end && *end == 0 && errno == 0) return Value(int64_t(x));
    }
    double d;
    if (parse_python_float(v.str(), d) && std::isfinite(d)) return Value(int64_t(std::trunc(d)));
  }
  return def;
}

Value f_format(const Value& v, CallArgs& a) {
  if (!a.keyword.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, val] : a.keyword) d->set(Value(k), val);
    return Value(percent_format(v.to_str(), Value::dict(d)));
  }
  return Value(percent_format(v.to_str(), Value::tuple(a.positional)));
}

Value f_groupby(const Value& v, CallArgs& a) {
  const std::string attr = a.get(0, "attribute").to_str();
  const Value def = a.get(1, "default");
  const bool cs = a.get(2, "case_sensitive", Value(false)).truthy();
  List items = iterate(v);
  auto key_of = [&](const Value& x) {
    Value k = lookup_attribute(x, attr);
    if (k.is_undefined() && !def.is_undefined()) k = def;
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return less_than(sort_key(key_of(x), cs), sort_key(key_of(y), cs));
  });
  List groups;
  for (const auto& x : items) {
    Value k = key_of(x);
    if (groups.empty() || !equals(sort_key(groups.back().items()[0], cs), sort_key(k, cs)))
      groups.push_back(Value::tuple({k, Value::list()}));
    groups.back().items()[1].items().push_back(x);
  }
  return Value::list(std::move(groups));
}

Value f_indent(const Value& v, CallArgs& a) {
  const Value width = a.get(0, "width", Value(int64_t(4)));
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  if (!v.is_string())
    eval_fail("TypeError", fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", v.type_name()));
  const std::string ind =
      width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
  CallArgs none;
  List lines = call_value(string_method(v.to_str() + "\n", "splitlines"), none).items();
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i].str();
  } else if (!lines.empty()) {
    rv = lines[0].str();
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].str().empty() ? "" : ind + lines[i].str());
  }
  if (first) rv = ind + rv;
  return Value(rv);
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict())
    eval_fail("TypeError", fmt::format("Can only get item pairs from a mapping, not {}", v.type_name()));
  List out;
  for (const auto& [k, val] : v.dict_ref().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  const std::string sep = a.get(0, "d", Value("")).to_str();
  const Value attr = a.get(1, "attribute", Value(nullptr));
  std::string out;
  bool first = true;
  for (const auto& e : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr.is_none() ? e : lookup_attribute(e, attr.to_str())).to_str();
  }
  return Value(out);
}

Value f_list(const Value& v, CallArgs&) { return Value::list(iterate(v)); }
Value f_lower(const Value& v, CallArgs&) { return Value(unicode::lower(v.to_str())); }
Value f_upper(const Value& v, CallArgs&) { return Value(unicode::upper(v.to_str())); }

Value f_map(const Value& v, CallArgs& a) {
  List out;
  Value attr;
  for (const auto& [k, val] : a.keyword)
    if (k == "attribute") attr = val;
  if (!attr.is_undefined()) {
    Value def;
    for (const auto& [k, val] : a.keyword)
      if (k == "default") def = val;
    for (const auto& e : iterate(v)) {
      Value x = lookup_attribute(e, attr.to_str());
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) eval_fail("FilterArgumentError", "map requires a filter argument");
  const std::string name = require_string_arg(a.positional[0], "map filter name");
  if (!has_filter(name)) eval_fail("FilterArgumentError", fmt::format("No filter named '{}'.", name));
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const auto& e : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(apply_filter(name, e, copy));
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attr = a.get(1, "attribute", Value(nullptr));
  List items = iterate(v);
  if (items.empty())
    return Value::undefined(want_max ? "No aggregated item, sequence was empty."
                                     : "No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : lookup_attribute(x, attr.to_str()), cs); };
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    const bool better = want_max ? less_than(key(best), key(items[i])) : less_than(key(items[i]), key(best));
    if (better) best = items[i];
  }
  return best;
}
Value f_max(const Value& v, CallArgs& a) { return min_max(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return min_max(v, a, false); }

Value f_pprint(const Value& v, CallArgs&) { return Value(v.repr()); }

Value select_impl(const Value& v, CallArgs& a, bool by_attr, bool keep) {
  List out;
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) eval_fail("FilterArgumentError", "Missing parameter for attribute name");
    attr = a.positional[0].to_str();
    i = 1;
  }
  std::string test;
  CallArgs test_args;
  if (i < a.positional.size()) {
    test = require_string_arg(a.positional[i], "test name");
    if (!has_test(test)) eval_fail("TemplateRuntimeError", fmt::format("No test named '{}'.", test));
    test_args.positional.assign(a.positional.begin() + long(i) + 1, a.positional.end());
    test_args.keyword = a.keyword;
  }
  for (const auto& e : iterate(v)) {
    const Value subject = by_attr ? lookup_attribute(e, attr) : e;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs copy = test_args;
      ok = apply_test(test, subject, copy);
    }
    if (ok == keep) out.push_back(e);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_replace(const Value& v, CallArgs& a) {
  const Value count = a.get(2, "count", Value(nullptr));
  return Value(py_replace(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(),
                          count.is_none() ? -1 : count.as_int()));
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) return slice_value(v, Value(nullptr), Value(nullptr), Value(int64_t(-1)));
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(const Value& v, CallArgs& a) {
  const int64_t precision = a.get(0, "precision", Value(int64_t(0))).as_int();
  const std::string method = a.get(1, "method", Value("common")).to_str();
  if (!v.is_number()) eval_fail("TypeError", fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method == "common" && !v.is_float() && precision >= 0) return Value(v.as_int());  // round(int) is an int
  const double scale = std::pow(10.0, double(precision));
  const double x = v.as_double() * scale;
  double r;
  if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else if (method == "common") r = std::nearbyint(x);  // Python round(): half to even
  else eval_fail("FilterArgumentError", "method must be common, ceil or floor");
  return Value(r / scale);
}

Value f_safe(const Value& v, CallArgs&) { return v; }

Value f_sort(const Value& v, CallArgs& a) {
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
  const Value attr = a.get(2, "attribute", Value(nullptr));
  List items = iterate(v);
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : lookup_attribute(x, attr.to_str()), cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_string(const Value& v, CallArgs&) { return Value(v.to_str()); }

Value f_sum(const Value& v, CallArgs& a) {
  const Value attr = a.get(0, "attribute", Value(nullptr));
  Value total = a.get(1, "start", Value(int64_t(0)));
  for (const auto& e : iterate(v))
    total = binary_op("+", total, attr.is_none() ? e : lookup_attribute(e, attr.to_str()));
  return total;
}

Value f_title(const Value& v, CallArgs&) {
  // jinja2: split on runs of [-\s({[<], capitalise each piece.
  std::u32string u = unicode::decode(v.to_str());
  auto is_sep = [](char32_t c) {
    return unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  bool at_start = true;
  for (char32_t& c : u) {
    if (is_sep(c)) {
      at_start = true;
      continue;
    }
    c = at_start ? unicode::to_upper(c) : unicode::to_lower(c);
    at_start = false;
  }
  return Value(unicode::encode(u));
}

Value f_tojson(const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  const Value indent = a.get(1, "indent", Value(nullptr));
  if (indent.is_string()) {
    o.use_indent_string = true;
    o.indent_string = indent.str();
  } else if (indent.is_int()) {
    o.indent = int(std::max<int64_t>(0, indent.as_int()));
  } else if (!indent.is_none()) {
    eval_fail("TypeError", "indent must be an int or a str");
  }
  if (!indent.is_none()) o.item_separator = ",";
  const Value seps = a.get(2, "separators", Value(nullptr));
  if (!seps.is_none()) {
    if (!seps.is_sequence() || seps.items().size() != 2)
      eval_fail("ValueError", "separators must be a pair of strings");
    o.item_separator = seps.items()[0].to_str();
    o.key_separator = seps.items()[1].to_str();
  }
  o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  return Value(json_dumps(v, o));
}

Value f_trim(const Value& v, CallArgs& a) {
  const Value chars = a.get(0, "chars", Value(nullptr));
  if (chars.is_none()) return Value(unicode::strip(v.to_str(), nullptr, true, true));
  const std::string c = chars.to_str();
  return Value(unicode::strip(v.to_str(), &c, true, true));
}

Value f_truncate(const Value& v, CallArgs& a) {
  const int64_t length = a.get(0, "length", Value(int64_t(255))).as_int();
  const bool killwords = a.get(1, "killwords", Value(false)).truthy();
  const std::string end = a.get(2, "end", Value("...")).to_str();
  const int64_t leeway = a.get(3, "leeway", Value(int64_t(5))).as_int();
  std::u32string s = unicode::decode(v.to_str());
  const auto end_len = int64_t(unicode::length(end));
  if (int64_t(s.size()) <= length + leeway) return Value(unicode::encode(s));
  std::u32string cut = s.substr(0, size_t(std::max<int64_t>(0, length - end_len)));
  if (killwords) return Value(unicode::encode(cut) + end);
  const size_t sp = cut.rfind(U' ');
  if (sp != std::u32string::npos) cut.resize(sp);
  return Value(unicode::encode(cut) + end);
}

Value f_unique(const Value& v, CallArgs& a) {
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attr = a.get(1, "attribute", Value(nullptr));
  List out, seen;
  for (const auto& e : iterate(v)) {
    Value k = sort_key(attr.is_none() ? e : lookup_attribute(e, attr.to_str()), cs);
    bool dup = false;
    for (const auto& s : seen) dup |= equals(s, k);
    if (!dup) seen.push_back(k), out.push_back(e);
  }
  return Value::list(std::move(out));
}

// jinja2 counts matches of \w+ (letters, digits, underscore).
Value f_wordcount(const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode(v.to_str())) {
    const bool w = c == '_' || unicode::is_alpha(c) || unicode::is_digit(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> m = {
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_escape},
      {"format", f_format},     {"groupby", f_groupby},
      {"indent", f_indent},     {"int", f_int},
      {"items", f_items},       {"join", f_join},
      {"last", f_last},         {"length", f_length},
      {"list", f_list},         {"lower", f_lower},
      {"map", f_map},           {"max", f_max},
      {"min", f_min},           {"pprint", f_pprint},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return m;
}

// ---- tests ---------------------------------------------------------------

bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, CallArgs&) { return v.is_bool(); }
bool t_false(const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_true(const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_integer(const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, CallArgs&) { return v.is_dict(); }
bool t_callable(const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); }
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_escaped(const Value&, CallArgs&) { return false; }
// Python `value % n == 0` (ints and floats).
bool divisible(const Value& v, const Value& n) { return equals(binary_op("%", v, n), Value(int64_t(0))); }
bool t_even(const Value& v, CallArgs&) { return divisible(v, Value(int64_t(2))); }
bool t_odd(const Value& v, CallArgs&) { return equals(binary_op("%", v, Value(int64_t(2))), Value(int64_t(1))); }
bool t_divisibleby(const Value& v, CallArgs& a) { return divisible(v, a.get(0, "num")); }
// str(value).islower() / .isupper(): some cased character, and all of them in that case.
bool cased_test(const Value& v, bool want_upper) {
  bool any = false;
  for (char32_t c : unicode::decode(v.to_str())) {
    if (unicode::is_upper(c)) {
      if (!want_upper) return false;
      any = true;
    } else if (unicode::is_lower(c)) {
      if (want_upper) return false;
      any = true;
    }
  }
  return any;
}
bool t_lower(const Value& v, CallArgs&) { return cased_test(v, false); }
bool t_upper(const Value& v, CallArgs&) { return cased_test(v, true); }
bool t_eq(const Value& v, CallArgs& a) { return equals(v, a.get(0, "other")); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, a.get(0, "other")); }
bool t_lt(const Value& v, CallArgs& a) { return less_than(v, a.get(0, "other")); }
bool t_le(const Value& v, CallArgs& a) { return !less_than(a.get(0, "other"), v); }
bool t_gt(const Value& v, CallArgs& a) { return less_than(a.get(0, "other"), v); }
bool t_ge(const Value& v, CallArgs& a) { return !less_than(v, a.get(0, "other")); }
bool t_in(const Value& v, CallArgs& a) { return contains(a.get(0, "seq"), v); }
bool t_sameas(const Value& v, CallArgs& a) {
  const Value o = a.get(0, "other");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::List:
    case Value::Kind::Tuple: return &v.items() == &o.items();
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return v.dict_ptr() == o.dict_ptr();
    default: return equals(v, o);
  }
}
bool t_filter(const Value& v, CallArgs&) { return v.is_string() && has_filter(v.str()); }
bool t_test(const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); }

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> m = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"gt", t_gt},
      {">", t_gt},
      {"greaterthan", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lower", t_lower},
      {"lt", t_lt},
      {"<", t_lt},
      {"lessthan", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return m;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) != 0; }
bool has_test(std::string_view name) { return tests().count(name) != 0; }

Value apply_filter(std::string_view name, const Value& subject, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) eval_fail("TemplateRuntimeError", fmt::format("No filter named '{}'.", name));
  return it->second(subject, args);
}

bool apply_test(std::string_view name, const Value& subject, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) eval_fail("TemplateRuntimeError", fmt::format("No test named '{}'.", name));
  return it->second(subject, args);
}

}  // namespace opal::jinja
