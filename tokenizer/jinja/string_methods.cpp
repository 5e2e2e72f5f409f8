// Python str methods (see string_methods.h). Strings are UTF-8; positions that
// Python reports (find, index) and widths are counted in code points.
#include "tokenizer/jinja/string_methods.h"

#include <fmt/format.h>

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace opal::jinja {
namespace {

int64_t cp_index(const std::string& s, size_t byte_pos) {
  return int64_t(unicode::length(std::string_view(s).substr(0, byte_pos)));
}

std::string require_str(const Value& v, std::string_view method) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) fail_undefined(v);
  eval_fail("TypeError", fmt::format("{}() argument must be str, not {}", method, v.type_name()));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, std::string_view method) {
  auto one = [&](const Value& a) {
    const std::string x = require_str(a, method);
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.kind() == Value::Kind::Tuple) {
    for (const auto& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string pad(const std::string& s, int64_t width, const std::string& fill,
                int where /*-1 left, 0 center, 1 right*/) {
  const auto len = int64_t(unicode::length(s));
  if (width <= len) return s;
  const int64_t total = width - len;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

template <typename Pred>
Value char_class(const std::string& s, Pred pred) {
  if (s.empty()) return Value(false);
  for (char32_t c : unicode::decode(s))
    if (!pred(c)) return Value(false);
  return Value(true);
}

}  // namespace

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = unicode::decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < u.size()) unicode::append_utf8(out, u[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = unicode::decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? unicode::to_upper(u[i]) : unicode::to_lower(u[i]);
  return unicode::encode(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = unicode::decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = unicode::is_upper(c) || unicode::is_lower(c);
    c = prev_cased ? unicode::to_lower(c) : unicode::to_upper(c);
    prev_cased = cased;
  }
  return unicode::encode(u);
}

Value py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string u = unicode::decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) in code points
    if (!from_right) {
      size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && unicode::is_space(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && int64_t(words.size()) == maxsplit) {
          size_t e = u.size();
          words.emplace_back(i, e);
          break;
        }
        size_t b = i;
        while (i < u.size() && !unicode::is_space(u[i])) ++i;
        words.emplace_back(b, i);
      }
    } else {
      size_t i = u.size();
      while (i > 0) {
        while (i > 0 && unicode::is_space(u[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && int64_t(words.size()) == maxsplit) {
          words.emplace_back(0, i);
          break;
        }
        size_t e = i;
        while (i > 0 && !unicode::is_space(u[i - 1])) --i;
        words.emplace_back(i, e);
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto [b, e] : words) parts.push_back(Value(unicode::encode(std::u32string_view(u).substr(b, e - b))));
    return Value::list(std::move(parts));
  }
  const std::string d = require_str(sep, "split");
  if (d.empty()) eval_fail("ValueError", "empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(pieces.size()) < maxsplit) {
      size_t f = s.find(d, pos);
      if (f == std::string::npos) break;
      pieces.push_back(s.substr(pos, f - pos));
      pos = f + d.size();
    }
    pieces.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    std::vector<std::string> rev;
    while (maxsplit < 0 || int64_t(rev.size()) < maxsplit) {
      if (end < d.size()) break;
      size_t f = s.rfind(d, end - d.size());
      if (f == std::string::npos) break;
      rev.push_back(s.substr(f + d.size(), end - f - d.size()));
      end = f;
    }
    rev.push_back(s.substr(0, end));
    pieces.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : pieces) parts.push_back(Value(std::move(p)));
  return Value::list(std::move(parts));
}

std::string py_format_value(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  // [[fill]align][sign][#][0][width][,][.precision][type]
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  std::u32string us = unicode::decode(spec);
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t skip_bytes = 0;
  if (us.size() >= 2 && is_align(us[1])) {
    fill = unicode::encode(us.substr(0, 1));
    align = char(us[1]);
    skip_bytes = fill.size() + 1;
  } else if (!us.empty() && is_align(us[0])) {
    align = char(us[0]);
    skip_bytes = 1;
  }
  i = skip_bytes;
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') alt = true, ++i;
  if (i < spec.size() && spec[i] == '0') {
    if (!align) fill = "0", align = '=';
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
  bool comma = false;
  if (i < spec.size() && spec[i] == ',') comma = true, ++i;
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
      precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) eval_fail("ValueError", fmt::format("Invalid format specifier '{}'", spec));
  std::string body;
  bool numeric = false;
  if (v.is_string() || (!v.is_number())) {
    if (type && type != 's')
      eval_fail("ValueError", fmt::format("Unknown format code '{}' for object of type '{}'", type, v.type_name()));
    body = v.to_str();
    if (precision >= 0) {
      std::u32string u = unicode::decode(body);
      if (u.size() > size_t(precision)) body = unicode::encode(u.substr(0, size_t(precision)));
    }
    if (!align) align = '<';
  } else {
    numeric = true;
    std::string fspec = "{:";
    if (sign) fspec += sign;
    if (alt) fspec += '#';
    if (precision >= 0) fspec += fmt::format(".{}", precision);
    if (v.is_float() || type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' ||
        type == '%') {
      double d = v.as_double();
      if (type == '%') {
        d *= 100;
        fspec += "f}";
        body = fmt::format(fmt::runtime(fspec), d) + "%";
      } else if (!type) {
        body = precision < 0 ? python_float_repr(d) : fmt::format(fmt::runtime(fspec + "g}"), d);
        if (sign == '+' && d >= 0) body = "+" + body;
      } else {
        body = fmt::format(fmt::runtime(fspec + type + "}"), d);
      }
    } else {
      if (precision >= 0) eval_fail("ValueError", "Precision not allowed in integer format specifier");
      const std::string t = (type == 'd' || type == 'n') ? "" : std::string(type ? 1 : 0, type);
      body = fmt::format(fmt::runtime("{:" + std::string(sign ? 1 : 0, sign) + (alt ? "#" : "") + t + "}"), v.as_int());
    }
    if (comma) {
      // Python's ',' option: group the integer digits in threes.
      size_t b = body.find_first_of("0123456789");
      size_t e = body.find_first_not_of("0123456789", b);
      if (e == std::string::npos) e = body.size();
      if (b != std::string::npos)
        for (int64_t k = int64_t(e) - 3; k > int64_t(b); k -= 3) body.insert(size_t(k), ",");
    }
    if (!align) align = '>';
  }
  const auto len = int64_t(unicode::length(body));
  if (width > len) {
    const int64_t total = width - len;
    if (align == '=' && numeric) {
      size_t signlen = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
      std::string padding;
      for (int64_t k = 0; k < total; ++k) padding += fill;
      body.insert(signlen, padding);
    } else {
      int64_t left = align == '<' ? 0 : align == '^' ? total / 2 : total;
      std::string out;
      for (int64_t k = 0; k < left; ++k) out += fill;
      out += body;
      for (int64_t k = 0; k < total - left; ++k) out += fill;
      body = out;
    }
  }
  return body;
}

std::string py_format(const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      eval_fail("ValueError", "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) eval_fail("ValueError", "Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    char conversion = 0;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 1 < field.size()) conversion = field[bang + 1];
      field.resize(bang);
    }
    // field: "" | digits | name, optionally followed by .attr or [key]
    size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size())
        eval_fail("IndexError", "Replacement index out of range for positional args tuple");
      v = args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      const size_t idx = std::stoul(head);
      if (idx >= args.positional.size())
        eval_fail("IndexError", "Replacement index out of range for positional args tuple");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, val] : args.keyword)
        if (k == head) v = val, found = true;
      if (!found) eval_fail("KeyError", python_string_repr(head));
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        size_t next = field.find_first_of(".[", end + 1);
        v = get_attribute(v, field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
        end = next;
      } else {
        size_t rb = field.find(']', end);
        if (rb == std::string::npos) eval_fail("ValueError", "Missing ']' in format string");
        std::string key = field.substr(end + 1, rb - end - 1);
        Value k = (!key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) ? Value(int64_t(std::stoll(key)))
                                                                                   : Value(key);
        v = get_item(v, k);
        end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
    }
    if (conversion == 'r' || conversion == 'a') v = Value(v.repr());
    else if (conversion == 's') v = Value(v.to_str());
    out += py_format_value(v, spec);
  }
  return out;
}

Value string_method(const std::string& s, std::string_view name) {
  using A = CallArgs;
  auto fn = [&](auto body) {
    return Value::function(std::string(name), [s, body](A& a) -> Value { return body(s, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return fn([left, right](const std::string& s, A& a) {
      Value chars = a.get(0, "chars", Value(nullptr));
      if (chars.is_none()) return Value(unicode::strip(s, nullptr, left, right));
      const std::string c = require_str(chars, "strip");
      return Value(unicode::strip(s, &c, left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return fn([right](const std::string& s, A& a) {
      Value maxsplit = a.get(1, "maxsplit", Value(int64_t(-1)));
      return py_split(s, a.get(0, "sep", Value(nullptr)), maxsplit.as_int(), right);
    });
  }
  if (name == "splitlines")
    return fn([](const std::string& s, A& a) {
      const bool keep = a.get(0, "keepends", Value(false)).truthy();
      std::u32string u = unicode::decode(s);
      List out;
      size_t b = 0;
      for (size_t i = 0; i < u.size(); ++i) {
        const char32_t c = u[i];
        const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                         c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        size_t e = i + 1;
        if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++e;
        out.push_back(Value(unicode::encode(std::u32string_view(u).substr(b, (keep ? e : i) - b))));
        i = e - 1;
        b = e;
      }
      if (b < u.size()) out.push_back(Value(unicode::encode(std::u32string_view(u).substr(b))));
      return Value::list(std::move(out));
    });
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    const std::string method(name);
    return fn([prefix, method](const std::string& s, A& a) {
      return Value(affix_match(s, a.get(0, prefix ? "prefix" : "suffix"), prefix, method));
    });
  }
  if (name == "replace")
    return fn([](const std::string& s, A& a) {
      return Value(py_replace(s, require_str(a.get(0, "old"), "replace"), require_str(a.get(1, "new"), "replace"),
                              a.get(2, "count", Value(int64_t(-1))).as_int()));
    });
  if (name == "upper") return fn([](const std::string& s, A&) { return Value(unicode::upper(s)); });
  if (name == "lower" || name == "casefold")
    return fn([](const std::string& s, A&) { return Value(unicode::lower(s)); });
  if (name == "title") return fn([](const std::string& s, A&) { return Value(py_title(s)); });
  if (name == "capitalize") return fn([](const std::string& s, A&) { return Value(py_capitalize(s)); });
  if (name == "swapcase")
    return fn([](const std::string& s, A&) {
      std::u32string u = unicode::decode(s);
      for (char32_t& c : u) c = unicode::is_upper(c) ? unicode::to_lower(c) : unicode::to_upper(c);
      return Value(unicode::encode(u));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const bool right = name[0] == 'r';
    const bool raise = name.find("index") != std::string_view::npos;
    return fn([right, raise](const std::string& s, A& a) {
      const std::string sub = require_str(a.get(0, "sub"), "find");
      const size_t f = right ? s.rfind(sub) : s.find(sub);
      if (f == std::string::npos) {
        if (raise) eval_fail("ValueError", "substring not found");
        return Value(int64_t(-1));
      }
      return Value(cp_index(s, f));
    });
  }
  if (name == "count")
    return fn([](const std::string& s, A& a) {
      const std::string sub = require_str(a.get(0, "sub"), "count");
      if (sub.empty()) return Value(int64_t(unicode::length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  if (name == "join")
    return fn([](const std::string& s, A& a) {
      std::string out;
      bool first = true;
      for (const auto& e : iterate(a.get(0, "iterable"))) {
        if (!first) out += s;
        first = false;
        if (!e.is_string())
          eval_fail("TypeError", fmt::format("sequence item: expected str instance, {} found", e.type_name()));
        out += e.str();
      }
      return Value(out);
    });
  if (name == "format") return fn([](const std::string& s, A& a) { return Value(py_format(s, a)); });
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return fn([](const std::string& s, A&) { return char_class(s, unicode::is_digit); });
  if (name == "isalpha") return fn([](const std::string& s, A&) { return char_class(s, unicode::is_alpha); });
  if (name == "isalnum")
    return fn([](const std::string& s, A&) {
      return char_class(s, [](char32_t c) { return unicode::is_alpha(c) || unicode::is_digit(c); });
    });
  if (name == "isspace") return fn([](const std::string& s, A&) { return char_class(s, unicode::is_space); });
  if (name == "isupper" || name == "islower") {
    const bool up = name == "isupper";
    return fn([up](const std::string& s, A&) {
      bool any = false;
      for (char32_t c : unicode::decode(s)) {
        if (unicode::is_upper(c)) {
          if (!up) return Value(false);
          any = true;
        } else if (unicode::is_lower(c)) {
          if (up) return Value(false);
          any = true;
        }
      }
      return Value(any);
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const int where = name == "center" ? 0 : name == "ljust" ? -1 : 1;
    return fn([where](const std::string& s, A& a) {
      const std::string fill = a.has(1, "fillchar") ? require_str(a.get(1, "fillchar"), "center") : " ";
      return Value(pad(s, a.get(0, "width", Value(int64_t(0))).as_int(), fill, where));
    });
  }
  if (name == "zfill")
    return fn([](const std::string& s, A& a) {
      const int64_t width = a.get(0, "width", Value(int64_t(0))).as_int();
      const auto len = int64_t(unicode::length(s));
      if (width <= len) return Value(s);
      const size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      std::string out = s;
      out.insert(sign, size_t(width - len), '0');
      return Value(out);
    });
  if (name == "partition" || name == "rpartition") {
    const bool right = name[0] == 'r';
    return fn([right](const std::string& s, A& a) {
      const std::string sep = require_str(a.get(0, "sep"), "partition");
      if (sep.empty()) eval_fail("ValueError", "empty separator");
      const size_t f = right ? s.rfind(sep) : s.find(sep);
      if (f == std::string::npos)
        return right ? Value::tuple({Value(""), Value(""), Value(s)}) : Value::tuple({Value(s), Value(""), Value("")});
      return Value::tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return fn([prefix](const std::string& s, A& a) {
      const std::string x = require_str(a.get(0, prefix ? "prefix" : "suffix"), "remove");
      if (prefix && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
      if (!prefix && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
      return Value(s);
    });
  }
  return Value();
}

}  // namespace opal::jinja
