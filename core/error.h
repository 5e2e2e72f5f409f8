// Opal's one exception type. Every error a user can cause (bad file, bad flag,
// bad request) is thrown as opal::Error with a message that names what and where.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace opal {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace opal
