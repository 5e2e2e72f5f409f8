// Runtime values of the Jinja interpreter, modelled on the Python objects that
// jinja2 works with: Undefined, None, bool, int, float, str, list, tuple, dict,
// namespace() and callables. Lists and dicts are shared (Python reference
// semantics); strings are UTF-8 and every length/index/slice counts code points.
// str()/repr() follow Python's rules so that printing a list or a float gives
// the bytes jinja2 gives.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opal::jinja {

class Value;
struct Dict;
struct CallArgs;
using List = std::vector<Value>;
using NativeFunction = std::function<Value(CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };

  Value() = default;  // Undefined
  Value(std::nullptr_t) : kind_(Kind::None) {}
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int v) : kind_(Kind::Int), int_(v) {}
  Value(int64_t v) : kind_(Kind::Int), int_(v) {}
  Value(double v) : kind_(Kind::Float), float_(v) {}
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
  Value(std::string_view s) : kind_(Kind::String), str_(s) {}
  Value(const char* s) : kind_(Kind::String), str_(s) {}

  static Value undefined(std::string hint = {});
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d);
  static Value namespace_object();
  static Value function(std::string name, NativeFunction fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // Int and Bool
  double as_double() const { return kind_ == Kind::Float ? float_ : double(int_); }
  const std::string& str() const { return str_; }  // String; Undefined: its hint
  List& items() const { return *list_; }           // List, Tuple
  Dict& dict_ref() const { return *dict_; }        // Dict, Namespace
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const Callable& callable() const { return *fn_; }

  // Python semantics.
  bool truthy() const;
  std::string to_str() const;              // str(x); Undefined prints as ''
  std::string repr() const;                // repr(x)
  std::string type_name() const;           // 'dict object', 'str object', ... as jinja2 names them in errors
  nlohmann::ordered_json to_json() const;  // throws opal::Error for values JSON cannot hold

 private:
  Kind kind_ = Kind::Undefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Insertion-ordered dict (Python 3.7+ dict order). Small dicts are the norm in
// chat templates, so lookup is linear.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  size_t size() const { return entries.size(); }
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Positional i, or keyword `name`, or `def` when neither is given.
  Value get(size_t i, std::string_view name, Value def = Value()) const;
  bool has(size_t i, std::string_view name) const;
};

// Python == (deep for lists and dicts; 1 == 1.0 == True).
bool equals(const Value& a, const Value& b);
// Python <; throws (as a message string, see type_error) when the types do not order.
bool less_than(const Value& a, const Value& b);
// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string python_float_repr(double v);
// Python repr() of a str.
std::string python_string_repr(std::string_view s);

struct JsonDumpOptions {
  int indent = -1;            // < 0: no indent
  std::string indent_string;  // used when indent given as a string
  bool use_indent_string = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps.
std::string json_dumps(const Value& v, const JsonDumpOptions& o);

}  // namespace opal::jinja
