// UTF-8 helpers with Python str semantics: code-point indexing, str.isspace()
// (every Unicode whitespace character, NBSP and U+3000 included), simple case
// mapping for the scripts chat text commonly uses, and printable-ness for repr().
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace opal::jinja::unicode {

// Decodes UTF-8; an invalid byte decodes as itself (U+0080..U+00FF) so that
// nothing is lost or thrown on odd input.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t length(std::string_view s);  // code points
bool is_ascii(std::string_view s);

bool is_space(char32_t c);      // Python str.isspace()
bool is_printable(char32_t c);  // Python str.isprintable() (approximation of the Unicode tables)
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

// Python str.strip/lstrip/rstrip. `chars` null: whitespace.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace opal::jinja::unicode
