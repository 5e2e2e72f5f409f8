// Unicode helpers for the tokenizers: UTF-8 decoding that never throws (bad bytes
// become U+FFFD, one per byte, as llama.cpp does), code point classes from the
// generated tables, lowercase and first-of-NFD mappings, and the GPT-2 byte <->
// unicode map used by byte-level BPE.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace opal::unicode {

enum Flag : uint16_t {
  kNumber = 1 << 0,
  kLetter = 1 << 1,
  kSeparator = 1 << 2,
  kMark = 1 << 3,
  kPunctuation = 1 << 4,
  kSymbol = 1 << 5,
  kControl = 1 << 6,
  kWhitespace = 1 << 7,
  kCategoryMask = 0x7F,
};

// Length of the UTF-8 sequence that starts with byte c, from its high bits alone
// (1 for continuation bytes), as SentencePiece-style splitting uses it.
inline size_t utf8_len(char c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[uint8_t(c) >> 4];
}

// Decodes one code point at `offset` and advances it. Returns false (advancing by
// one byte) for an invalid or truncated sequence or a value above U+10FFFF.
bool decode_utf8(std::string_view s, size_t& offset, uint32_t& cpt);
// All code points; each invalid byte becomes U+FFFD.
std::vector<uint32_t> to_codepoints(std::string_view s);
void append_utf8(std::string& out, uint32_t cpt);
std::string to_utf8(uint32_t cpt);

uint16_t flags(uint32_t cpt);
inline bool is_whitespace(uint32_t cpt) { return flags(cpt) & kWhitespace; }
uint32_t to_lower(uint32_t cpt);
uint32_t nfd_first(uint32_t cpt);  // first code point of the canonical decomposition

// GPT-2 byte-level encoding: each byte maps to one printable code point.
uint32_t byte_to_cpt(uint8_t b);
// The UTF-8 text of byte_to_cpt(b).
const std::string& byte_to_utf8(uint8_t b);
// Inverse of byte_to_cpt; -1 when the code point is not one of the 256.
int cpt_to_byte(uint32_t cpt);

}  // namespace opal::unicode
