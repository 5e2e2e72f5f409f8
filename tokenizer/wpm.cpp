// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp runs it.
//
// Normalisation: decode UTF-8 (bad bytes become U+FFFD and are dropped), replace
// each code point by the first code point of its NFD decomposition and drop
// combining marks (strip_accents), lowercase, drop control characters. Words are
// split at whitespace; punctuation, ASCII symbols and CJK ideographs are words of
// their own. Each word, prefixed with "▁", is cut greedily into the longest
// vocabulary matches from the left; a word with any unmatched rest becomes [UNK].
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_impl.h"

namespace opal {
namespace {

bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

void Vocab::Impl::tokenize_wpm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string> words(1);
  for (uint32_t cpt : unicode::to_codepoints(text)) {
    if (wpm_strip_accents) cpt = unicode::nfd_first(cpt);
    const uint16_t f = unicode::flags(cpt);
    if (f & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cpt == 0 || cpt == 0xFFFD || (f & unicode::kControl)) continue;
    if (wpm_strip_accents && (f & unicode::kMark)) continue;
    const uint32_t c = wpm_lowercase ? unicode::to_lower(cpt) : cpt;
    if ((f & unicode::kPunctuation) || (cpt < 0x7F && (f & unicode::kSymbol)) || is_cjk(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      unicode::append_utf8(words.back(), c);
      words.emplace_back();
    } else {
      unicode::append_utf8(words.back(), c);
    }
  }
  for (const std::string& word : words) {
    if (word.empty()) continue;
    const std::string w = "\xE2\x96\x81" + word;
    const int n = int(w.size());
    const size_t before = out.size();
    for (int i = 0; i < n; ++i) {
      bool matched = false;
      for (int j = std::min(n, i + max_token_len + 1); j > i; --j) {
        const int32_t id = text_to_token(std::string_view(w).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          matched = true;
          i = j - 1;
          break;
        }
      }
      if (!matched) {
        out.resize(before);
        break;
      }
    }
    if (out.size() == before && unk >= 0) out.push_back(unk);
  }
}

}  // namespace opal
