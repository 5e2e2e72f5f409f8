// Errors of the Jinja interpreter. Every error a template or its input can cause
// is a TemplateError (an opal::Error) whose what() names line and column.
#pragma once
#include <string>

#include "core/error.h"

namespace opal::jinja {

class TemplateError : public opal::Error {
 public:
  // kind: "TemplateError" for raise_exception(), else the jinja2 exception class
  // that Python would raise ("TemplateSyntaxError", "UndefinedError", "TypeError",
  // "SecurityError", ...). message: the bare message (for raise_exception, the
  // template's own text).
  TemplateError(std::string kind, std::string message, int line, int column);
  const std::string& kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }
  bool raised_by_template() const { return kind_ == "TemplateError"; }

 private:
  std::string kind_, message_;
  int line_, column_;
};

// Thrown by value operations, filters and methods that do not know where in the
// template they are; the interpreter turns it into a TemplateError at the
// innermost expression.
struct EvalError {
  std::string kind;
  std::string message;
};

[[noreturn]] inline void eval_fail(std::string kind, std::string message) {
  throw EvalError{std::move(kind), std::move(message)};
}

}  // namespace opal::jinja
