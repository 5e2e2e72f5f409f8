// Tokenize / detokenize entry points shared by all vocabulary types.
//
// tokenize(): the text is first cut into fragments: raw text, and special tokens
// found verbatim (each special token in turn, longest first, over every remaining
// raw fragment, left to right; with parse_special off only user-defined tokens).
// Tokens with the lstrip/rstrip attribute swallow neighbouring spaces. Raw fragments
// then go to the SPM, BPE or WordPiece tokenizer. SPM prefixes a space to a raw
// fragment at the start or after a special token and escapes spaces as "▁".
//
// detokenize(): concatenates pieces, removes the SPM space prefix once, and for
// vocabularies with clean_spaces removes the space before ?!., and in " 's" etc.
#include <cctype>

#include "core/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_impl.h"

namespace opal {
namespace {

struct Fragment {
  int32_t token;  // -1 for raw text
  size_t offset, length;
};

std::vector<Fragment> partition(const Vocab::Impl& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags{{-1, 0, text.size()}};
  std::vector<Fragment> next;
  for (int32_t id : v.special_tokens) {
    const TokenData& tok = v.tokens[id];
    if (!parse_special && (tok.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = tok.text;
    bool any = false;
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t off = fr.offset, len = fr.length;
      while (len > 0) {
        const size_t match = text.substr(0, off + len).find(st, off);
        if (match == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        any = true;
        if (match > off) {
          size_t left_len = match - off;
          if (tok.attr & kAttrLstrip)
            while (left_len > 0 && std::isspace(uint8_t(text[off + left_len - 1]))) --left_len;
          if (left_len > 0) next.push_back({-1, off, left_len});
        }
        next.push_back({id, 0, 0});
        size_t right_off = match + st.size();
        size_t right_len = off + len - right_off;
        if (tok.attr & kAttrRstrip)
          while (right_len > 0 && std::isspace(uint8_t(text[right_off]))) ++right_off, --right_len;
        off = right_off;
        len = right_len;
      }
    }
    if (any) frags.swap(next);
  }
  return frags;
}

}  // namespace

std::vector<int32_t> Vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& v = *impl_;
  if (v.type == VocabType::None)
    fail("cannot tokenize: this model has no vocabulary (tokenizer.ggml.model = '{}')", v.model);
  std::vector<int32_t> out;
  std::vector<Fragment> frags;
  if (!text.empty()) frags = partition(v, text, parse_special);

  switch (v.type) {
    case VocabType::Spm: {
      if (add_special && v.add_bos) out.push_back(v.bos);
      bool prev_special = true;
      std::string buf;
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) {
          out.push_back(fr.token);
          prev_special = true;
          continue;
        }
        buf.clear();
        if (v.add_space_prefix && prev_special) buf = "\xE2\x96\x81";
        for (char c : text.substr(fr.offset, fr.length)) {
          if (c == ' ') buf += "\xE2\x96\x81";
          else buf += c;
        }
        v.tokenize_spm(buf, out);
        prev_special = false;
      }
      if (add_special && v.add_eos) out.push_back(v.eos);
      break;
    }
    case VocabType::Bpe: {
      if (add_special && v.add_bos) out.push_back(v.bos);
      std::string escaped;
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) {
          out.push_back(fr.token);
        } else if (v.bpe_raw_utf8 && v.escape_whitespaces) {  // gemma4: spaces become "▁" before the pre-split
          escaped.clear();
          for (char c : text.substr(fr.offset, fr.length)) {
            if (c == ' ') escaped += "\xE2\x96\x81";
            else escaped += c;
          }
          v.tokenize_bpe(escaped, out);
        } else {
          v.tokenize_bpe(text.substr(fr.offset, fr.length), out);
        }
      }
      if (add_special && v.add_eos) out.push_back(v.eos);
      break;
    }
    case VocabType::Wpm: {
      if (add_special && v.bos >= 0) out.push_back(v.bos);
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) out.push_back(fr.token);
        else v.tokenize_wpm(text.substr(fr.offset, fr.length), out);
      }
      if (add_special && v.sep >= 0) out.push_back(v.sep);
      break;
    }
    case VocabType::Rwkv: {
      if (add_special && v.add_bos) out.push_back(v.bos);
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) out.push_back(fr.token);
        else v.tokenize_rwkv(text.substr(fr.offset, fr.length), out);
      }
      if (add_special && v.add_eos) out.push_back(v.eos);
      break;
    }
    case VocabType::None: break;
  }
  return out;
}

std::string Vocab::Impl::compute_piece(int32_t id, bool special) const {
  const TokenData& t = tokens[id];
  if (!special && (t.attr & (kAttrUnknown | kAttrControl))) return "";
  if (type == VocabType::Rwkv) return rwkv_bytes[size_t(id)];  // every token: its unescaped bytes
  if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t.text;
  if (t.attr & kAttrNormal) {
    if (type == VocabType::Bpe && !escape_whitespaces) {
      std::string out;
      for (uint32_t c : unicode::to_codepoints(t.text)) {
        const int b = unicode::cpt_to_byte(c);
        if (b >= 0) {
          out.push_back(char(b));
        } else {  // not a byte-level character: keep it visible, as llama.cpp does
          out += "[UNK_BYTE_0x";
          for (char ch : unicode::to_utf8(c)) out += fmt::format("{:02x}", uint8_t(ch));
          out += t.text + "]";
        }
      }
      return out;
    }
    std::string out;
    const std::string_view s = t.text;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += s[i++];
      }
    }
    return out;
  }
  if (t.attr & kAttrByte) {
    if (t.text.size() >= 6 && t.text.compare(0, 3, "<0x") == 0) {
      return std::string(1, char(std::strtol(t.text.substr(3, 2).c_str(), nullptr, 16)));
    }
    return t.text;
  }
  return "";
}

std::string Vocab::token_to_piece(int32_t id, bool special) const {
  impl_->check_id(id, "token_to_piece");
  if (special) return impl_->piece_cache[id];
  return impl_->compute_piece(id, false);
}

std::string Vocab::detokenize(std::span<const int32_t> ids, bool remove_special, bool unparse_special) const {
  const Impl& v = *impl_;
  for (int32_t id : ids) v.check_id(id, "detokenize");
  if (v.type == VocabType::None) return "";
  bool remove_space = v.add_space_prefix;
  if (remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) ids = ids.first(ids.size() - 1);

  std::string text;
  for (int32_t id : ids) {
    const std::string& piece = unparse_special ? v.piece_cache[id] : v.compute_piece(id, false);
    size_t skip = 0;
    if (remove_space && !piece.empty() && piece[0] == ' ') skip = 1;
    text.append(piece, skip, std::string::npos);
    remove_space = false;
  }
  if (!v.clean_spaces || text.empty()) return text;

  // Pass 1: " ?" " !" " ." " ," lose their space.
  std::string a;
  a.reserve(text.size());
  a += text[0];
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  // Pass 2: a lone apostrophe between spaces loses both spaces.
  std::string b;
  b.reserve(a.size());
  b += a[0];
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      a[++i] = '\0';  // drop the next space; it no longer counts as the space before a[i + 1]
      continue;
    }
    b += x;
  }
  // Pass 3: " 's" " 'm" " 're" " 've" lose their space.
  std::string c;
  c.reserve(b.size());
  c += b[0];
  for (size_t i = 1; i < b.size(); ++i) {
    const char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (i + 2 < b.size() && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))) {
        c.pop_back();
      }
    }
    c += x;
  }
  return c;
}

}  // namespace opal
