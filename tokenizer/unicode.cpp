// Code point classes come from a flat table of 0x110000 entries built once from
// the generated runs (2.2 MB, a few milliseconds), so lookups are one load.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_data.h"

namespace opal::unicode {
namespace {

constexpr uint32_t kMaxCpt = 0x110000;

const std::vector<uint16_t>& flag_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(kMaxCpt, 0);
    using unicode_data::kFlagRangeCount;
    using unicode_data::kFlagRanges;
    for (size_t i = 0; i < kFlagRangeCount; ++i) {
      const uint32_t end = i + 1 < kFlagRangeCount ? kFlagRanges[i + 1].first : kMaxCpt;
      std::fill(t.begin() + kFlagRanges[i].first, t.begin() + end, kFlagRanges[i].flags);
    }
    return t;
  }();
  return table;
}

uint32_t lookup_pair(const unicode_data::CodepointPair* table, size_t n, uint32_t cpt) {
  const auto* end = table + n;
  const auto* it =
      std::lower_bound(table, end, cpt, [](const unicode_data::CodepointPair& p, uint32_t v) { return p.from < v; });
  return (it != end && it->from == cpt) ? it->to : cpt;
}

struct ByteMap {
  std::array<uint32_t, 256> cpt{};
  std::array<std::string, 256> utf8;
  std::vector<int16_t> inverse;  // code point -> byte, for code points < 512
  ByteMap() : inverse(512, -1) {
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      cpt[b] = printable(b) ? uint32_t(b) : next++;
      utf8[b] = to_utf8(cpt[b]);
      inverse[cpt[b]] = int16_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

bool decode_utf8(std::string_view s, size_t& offset, uint32_t& cpt) {
  const auto at = [&](size_t i) { return uint8_t(s[i]); };
  const uint8_t c0 = at(offset);
  if (c0 < 0x80) {
    cpt = c0;
    offset += 1;
    return true;
  }
  size_t n;
  uint32_t v;
  if ((c0 & 0xE0) == 0xC0) {
    n = 2, v = c0 & 0x1F;
  } else if ((c0 & 0xF0) == 0xE0) {
    n = 3, v = c0 & 0x0F;
  } else if ((c0 & 0xF8) == 0xF0) {
    n = 4, v = c0 & 0x07;
  } else {
    offset += 1;
    return false;
  }
  if (offset + n > s.size()) {
    offset += 1;
    return false;
  }
  for (size_t i = 1; i < n; ++i) {
    const uint8_t c = at(offset + i);
    if ((c & 0xC0) != 0x80) {
      offset += 1;
      return false;
    }
    v = (v << 6) | (c & 0x3F);
  }
  if (v >= kMaxCpt) {
    offset += 1;
    return false;
  }
  cpt = v;
  offset += n;
  return true;
}

std::vector<uint32_t> to_codepoints(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t off = 0;
  while (off < s.size()) {
    uint32_t c;
    out.push_back(decode_utf8(s, off, c) ? c : 0xFFFD);
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(char(cpt));
  } else if (cpt < 0x800) {
    out.push_back(char(0xC0 | (cpt >> 6)));
    out.push_back(char(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(char(0xE0 | (cpt >> 12)));
    out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(char(0xF0 | ((cpt >> 18) & 0x07)));
    out.push_back(char(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cpt & 0x3F)));
  }
}

std::string to_utf8(uint32_t cpt) {
  std::string s;
  append_utf8(s, cpt);
  return s;
}

uint16_t flags(uint32_t cpt) { return cpt < kMaxCpt ? flag_table()[cpt] : 0; }

uint32_t to_lower(uint32_t cpt) { return lookup_pair(unicode_data::kLowercase, unicode_data::kLowercaseCount, cpt); }

uint32_t nfd_first(uint32_t cpt) { return lookup_pair(unicode_data::kNfdFirst, unicode_data::kNfdFirstCount, cpt); }

uint32_t byte_to_cpt(uint8_t b) { return byte_map().cpt[b]; }
const std::string& byte_to_utf8(uint8_t b) { return byte_map().utf8[b]; }
int cpt_to_byte(uint32_t cpt) { return cpt < 512 ? byte_map().inverse[cpt] : -1; }

}  // namespace opal::unicode
