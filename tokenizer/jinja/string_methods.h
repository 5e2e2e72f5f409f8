// Python str methods for the interpreter ("abc".startswith(...), .split(),
// .format(), ...), code-point based like Python.
#pragma once
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace opal::jinja {

// A callable bound to `s` for the str method `name`, or Undefined when str has
// no such method.
Value string_method(const std::string& s, std::string_view name);

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);  // str.title()
Value py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right);
// str.format(*args, **kwargs) with the common replacement fields and format specs.
std::string py_format(const std::string& f, const CallArgs& args);
// format(value, spec): Python's format mini-language for str, int and float.
std::string py_format_value(const Value& v, const std::string& spec);

}  // namespace opal::jinja
