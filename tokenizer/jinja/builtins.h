// Built-in filters, tests, object methods and operators of the interpreter.
// They throw EvalError (see error.h); the interpreter adds the position.
#pragma once
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace opal::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& subject, CallArgs& args);
bool apply_test(std::string_view name, const Value& subject, CallArgs& args);

// jinja2's environment.getattr (obj.name): methods and attributes first, then
// dict items; a miss gives Undefined. In the immutable sandbox, methods that
// modify a list or dict raise SecurityError when called.
Value get_attribute(const Value& obj, std::string_view name);
// jinja2's environment.getitem (obj[key]): items first, then attributes.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a str, list or tuple (Python slice semantics).
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value call_value(const Value& callee, CallArgs& args);

// Python binary operators: + - * / // % ** and ~ (string concatenation).
Value binary_op(std::string_view op, const Value& a, const Value& b);
// Python `a in b`.
bool contains(const Value& container, const Value& item);
// Python str % args.
std::string percent_format(const std::string& fmt, const Value& args);
// Python iter(x) as a list; strings iterate over code points, dicts over keys.
List iterate(const Value& v);
// '<object type>' as jinja2 names it in "... has no attribute ..." messages.
std::string object_type_repr(const Value& v);
// Undefined's error: raises UndefinedError with its hint.
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace opal::jinja
