// JSON Schema -> GBNF: the subset clients send for structured output
// (docs/structured-output.md lists it). One rule per schema node, named after
// its path; primitives (string, number, ...) are shared rules emitted once.
//
//   objects   properties in schema order: the required ones in order, then each
//             optional one as ( "," kv )?; additionalProperties false/absent
//             allows no other key, true / a schema allows more after them
//   arrays    items, minItems / maxItems (prefixItems is refused)
//   strings   minLength / maxLength; format date, time, date-time, uuid
//   numbers   integer / number (JSON syntax; bounds are refused)
//   others    enum, const, anyOf, oneOf, a one-element allOf, type lists,
//             $ref to #/$defs/... or #/definitions/... (recursion allowed)
// Keywords that constrain values in ways the grammar does not express
// (pattern, minimum, ...) are errors naming the keyword and where it is.
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "core/error.h"
#include "sampling/grammar.h"

namespace opal {
namespace {

using ojson = nlohmann::ordered_json;

// A GBNF string literal for raw bytes.
std::string literal(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\x{:02X}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"space", R"(" "?)"},
      {"char", R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"string", R"("\"" char* "\"" space)"},
      {"integral", R"("-"? ([0-9] | [1-9] [0-9]{1,15}))"},
      {"integer", R"(integral space)"},
      {"number", R"(integral ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? space)"},
      {"boolean", R"(("true" | "false") space)"},
      {"null", R"("null" space)"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)"},
      {"array", R"("[" space (value ("," space value)*)? "]" space)"},
      {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1]))"},
      {"time",
       R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | ("+" | "-") ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
  };
  return p;
}

// Which primitives each primitive uses.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"string", {"char", "space"}},
      {"integer", {"integral", "space"}},
      {"number", {"integral", "space"}},
      {"boolean", {"space"}},
      {"null", {"space"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}},
      {"array", {"space", "value"}},
  };
  return d;
}

// Keywords that constrain a value in a way the grammar cannot express.
constexpr const char* kUnsupported[] = {
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "not",
    "if",
    "then",
    "else",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "propertyNames",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "dependencies",
    "$dynamicRef",
};

class Converter {
 public:
  explicit Converter(const ojson& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "root", "");
    std::string out;
    out += "root ::= " + top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    // Primitives, with what they use.
    std::set<std::string> done;
    std::vector<std::string> todo(used_.begin(), used_.end());
    while (!todo.empty()) {
      const std::string p = todo.back();
      todo.pop_back();
      if (!done.insert(p).second) continue;
      out += p + " ::= " + primitives().at(p) + "\n";
      auto it = primitive_deps().find(p);
      if (it != primitive_deps().end()) todo.insert(todo.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

 private:
  const ojson& root_;
  std::map<std::string, std::string> rules_;  // name -> body (sorted output: deterministic)
  std::set<std::string> used_;
  std::map<std::string, std::string> refs_;  // "$ref" -> rule name

  [[noreturn]] static void unsupported(const std::string& what, const std::string& where) {
    fail("json_schema: {} at '{}' is not supported", what, where.empty() ? "#" : "#" + where);
  }

  std::string prim(const std::string& name) {
    used_.insert(name);
    return name;
  }

  std::string rule_name(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      base += ok ? c : '-';
    }
    if (base.empty()) base = "r";
    base = "s-" + base;
    std::string name = base;
    for (int i = 2; rules_.count(name) || primitives().count(name); ++i) name = fmt::format("{}{}", base, i);
    rules_[name] = "";  // reserved
    return name;
  }

  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = rule_name(hint);
    rules_[name] = body;
    return name;
  }

  const ojson& resolve(const std::string& ref, const std::string& where) const {
    if (ref == "#") return root_;
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0 || ref.rfind("#/definitions/", 0) == 0) {
      path = ref.substr(1);
    } else {
      unsupported(fmt::format("$ref '{}' (only #/$defs/... and #/definitions/...)", ref), where);
    }
    try {
      const ojson& target = root_.at(ojson::json_pointer(path));
      return target;
    } catch (const std::exception&) {
      fail("json_schema: $ref '{}' at '#{}' points to nothing", ref, where);
    }
  }

  std::string visit(const ojson& s, const std::string& hint, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return prim("value");
      unsupported("the schema 'false' (it matches nothing)", where);
    }
    if (!s.is_object()) fail("json_schema: expected a schema object at '#{}', got {}", where, s.type_name());
    for (const char* kw : kUnsupported) {
      if (s.contains(kw)) unsupported(fmt::format("'{}'", kw), where + "/" + kw);
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) fail("json_schema: '$ref' at '#{}' must be a string", where);
      const std::string ref = it->get<std::string>();
      auto r = refs_.find(ref);
      if (r != refs_.end()) return r->second;
      const std::string name = rule_name("ref-" + ref.substr(ref.rfind('/') + 1));
      refs_[ref] = name;
      const ojson& target = resolve(ref, where + "/$ref");
      rules_[name] = visit(target, name, ref.substr(1));
      return name;
    }
    if (auto it = s.find("const"); it != s.end()) return "(" + literal(it->dump()) + " " + prim("space") + ")";
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) fail("json_schema: 'enum' at '#{}' must be a non-empty array", where);
      std::string body;
      for (const auto& v : *it) body += (body.empty() ? "" : " | ") + literal(v.dump());
      return add_rule(hint, "(" + body + ") " + prim("space"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) fail("json_schema: '{}' at '#{}' must be a non-empty array", key, where);
        std::string body;
        for (size_t i = 0; i < it->size(); ++i) {
          body += (body.empty() ? "" : " | ") +
                  visit((*it)[i], fmt::format("{}-{}", hint, i), fmt::format("{}/{}/{}", where, key, i));
        }
        return add_rule(hint, body);
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) unsupported("'allOf' with more than one schema", where + "/allOf");
      return visit((*it)[0], hint, where + "/allOf/0");
    }
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_array()) {
        std::string body;
        for (const auto& t : *it) {
          if (!t.is_string()) fail("json_schema: 'type' at '#{}' must hold strings", where);
          body += (body.empty() ? "" : " | ") +
                  visit_type(s, t.get<std::string>(), hint + "-" + t.get<std::string>(), where);
        }
        if (body.empty()) fail("json_schema: 'type' at '#{}' is an empty list", where);
        return add_rule(hint, body);
      }
      if (!it->is_string()) fail("json_schema: 'type' at '#{}' must be a string or an array", where);
      return visit_type(s, it->get<std::string>(), hint, where);
    }
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      return visit_type(s, "object", hint, where);
    }
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      return visit_type(s, "array", hint, where);
    }
    if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      return visit_type(s, "string", hint, where);
    }
    return prim("value");
  }

  static int64_t get_count(const ojson& s, const char* key, int64_t dflt, const std::string& where) {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
      fail("json_schema: '{}' at '#{}' must be a non-negative integer", key, where);
    }
    const int64_t v = it->get<int64_t>();
    if (v < 0 || v > 100000) fail("json_schema: '{}' at '#{}' is {} (expected 0..100000)", key, where, v);
    return v;
  }

  std::string visit_type(const ojson& s, const std::string& type, const std::string& hint, const std::string& where) {
    if (type == "string") return visit_string(s, hint, where);
    if (type == "integer") return prim("integer");
    if (type == "number") return prim("number");
    if (type == "boolean") return prim("boolean");
    if (type == "null") return prim("null");
    if (type == "object") return visit_object(s, hint, where);
    if (type == "array") return visit_array(s, hint, where);
    fail("json_schema: unknown type '{}' at '#{}/type'", type, where);
  }

  std::string visit_string(const ojson& s, const std::string& hint, const std::string& where) {
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) fail("json_schema: 'format' at '#{}' must be a string", where);
      const std::string f = it->get<std::string>();
      std::string inner;
      if (f == "date") {
        inner = prim("date");
      } else if (f == "time") {
        inner = prim("time");
      } else if (f == "date-time") {
        inner = prim("date") + " \"T\" " + prim("time");
      } else if (f == "uuid") {
        inner = prim("uuid");
      } else {
        unsupported(fmt::format("string format '{}' (supported: date, time, date-time, uuid)", f), where + "/format");
      }
      return add_rule(hint, "\"\\\"\" " + inner + " \"\\\"\" " + prim("space"));
    }
    const int64_t min = get_count(s, "minLength", 0, where);
    const int64_t max = get_count(s, "maxLength", -1, where);
    if (min == 0 && max < 0) return prim("string");
    if (max >= 0 && max < min) fail("json_schema: maxLength < minLength at '#{}'", where);
    prim("space");
    const std::string rep = max < 0 ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
    return add_rule(hint, "\"\\\"\" " + prim("char") + rep + " \"\\\"\" space");
  }

  std::string visit_array(const ojson& s, const std::string& hint, const std::string& where) {
    std::string item;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) unsupported("'items' as an array (tuple form)", where + "/items");
      item = visit(*it, hint + "-item", where + "/items");
    } else {
      item = prim("value");
    }
    const int64_t min = get_count(s, "minItems", 0, where);
    const int64_t max = get_count(s, "maxItems", -1, where);
    if (max >= 0 && max < min) fail("json_schema: maxItems < minItems at '#{}'", where);
    prim("space");
    std::string body;
    if (max == 0) {
      body = "\"[\" space \"]\" space";
    } else if (min == 0) {
      const std::string rest = max < 0 ? "*" : fmt::format("{{0,{}}}", max - 1);
      body = "\"[\" space (" + item + " (\",\" space " + item + ")" + rest + ")? \"]\" space";
    } else {
      const std::string rest = max < 0 ? fmt::format("{{{},}}", min - 1) : fmt::format("{{{},{}}}", min - 1, max - 1);
      body = "\"[\" space " + item + " (\",\" space " + item + ")" + rest + " \"]\" space";
    }
    return add_rule(hint, body);
  }

  std::string visit_object(const ojson& s, const std::string& hint, const std::string& where) {
    const ojson empty = ojson::object();
    const ojson* props = &empty;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) fail("json_schema: 'properties' at '#{}' must be an object", where);
      props = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail("json_schema: 'required' at '#{}' must be an array", where);
      for (const auto& r : *it) {
        if (!r.is_string()) fail("json_schema: 'required' at '#{}' must hold strings", where);
        if (!props->contains(r.get<std::string>())) {
          unsupported(fmt::format("a required property '{}' without a schema in 'properties'", r.get<std::string>()),
                      where + "/required");
        }
        required.insert(r.get<std::string>());
      }
    }
    // Extra keys: allowed when additionalProperties is true or a schema, or
    // when the object lists no properties at all.
    std::string extra;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        if (it->get<bool>()) extra = prim("value");
      } else {
        extra = visit(*it, hint + "-additional", where + "/additionalProperties");
      }
    } else if (props->empty()) {
      extra = prim("value");
    }
    prim("space");
    std::vector<std::string> req_kv, opt_kv;
    for (const auto& [key, sub] : props->items()) {
      const std::string value = visit(sub, hint + "-" + key, where + "/properties/" + key);
      const std::string kv =
          add_rule(hint + "-" + key + "-kv", literal(ojson(key).dump()) + " space \":\" space " + value);
      (required.count(key) ? req_kv : opt_kv).push_back(kv);
    }
    std::string extra_kv;
    if (!extra.empty()) extra_kv = add_rule(hint + "-extra-kv", prim("string") + " \":\" space " + extra);

    // tail(i): the optional properties from i on and the extra keys, each after a comma.
    auto tail = [&](size_t from) {
      std::string t;
      for (size_t i = from; i < opt_kv.size(); ++i) t += " (\",\" space " + opt_kv[i] + ")?";
      if (!extra_kv.empty()) t += " (\",\" space " + extra_kv + ")*";
      return t;
    };
    std::string body;
    if (!req_kv.empty()) {
      for (size_t i = 0; i < req_kv.size(); ++i) body += (i ? " \",\" space " : "") + req_kv[i];
      body += tail(0);
    } else {
      // Nothing required: the first key present decides where the commas go.
      std::string alts;
      for (size_t i = 0; i < opt_kv.size(); ++i)
        alts += (alts.empty() ? "" : " | ") + ("(" + opt_kv[i] + tail(i + 1) + ")");
      if (!extra_kv.empty())
        alts += (alts.empty() ? "" : " | ") + ("(" + extra_kv + " (\",\" space " + extra_kv + ")*)");
      if (!alts.empty()) body = "(" + alts + ")?";
    }
    return add_rule(hint, "\"{\" space " + body + " \"}\" space");
  }
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json) {
  ojson schema;
  try {
    schema = ojson::parse(schema_json);
  } catch (const std::exception& e) {
    fail("json_schema: not valid JSON: {}", e.what());
  }
  return Converter(schema).run();
}

std::string json_object_gbnf() {
  std::string out = "root ::= object\n";
  for (const char* p :
       {"space", "char", "string", "integral", "number", "boolean", "null", "value", "object", "array"}) {
    out += std::string(p) + " ::= " + primitives().at(p) + "\n";
  }
  return out;
}

}  // namespace opal
