// Pre-tokenizer splitting (see bpe_pretokenize.h).
//
// Text is first decoded to code points. Each step turns a list of piece lengths
// (in code points) into a finer one: inside each piece, every match of the step's
// expression becomes a piece, and so does every gap between matches.
//
// Two expressions (GPT-2's and Llama-3's) are scanned by hand, following the
// alternatives of the expression in order at each position. Everything else
// runs through PCRE2:
//   * collapsed: when the expression uses \p{N}, \p{L}, \p{P}, \p{M}, \p{S} (or
//     \p{Lu}.. which count as letters), every non-ASCII code point becomes one
//     byte naming its class (0xD1 number, 0xD2 letter, 0xD3 punctuation, 0xD4 mark,
//     0xD5 symbol, 0xD0 other, 0x0B whitespace) and the expression's \p{X}
//     becomes a byte class of that byte plus the ASCII members of X. ASCII keeps
//     its own bytes. One code point is one byte, so offsets need no mapping.
//   * wide: other expressions (with literal non-ASCII ranges) match the UTF-8
//     text in PCRE2's UTF mode, non-ASCII whitespace replaced by \v.
// Empty matches are allowed and advance as std::regex_iterator does.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/bpe_pretokenize.h"

#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace opal {
namespace {

using unicode::Flag;

enum class StepKind { Gpt2, Llama3, Collapsed, Wide };

const char* const kGpt2Expr = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3Expr =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3ExprCaseless =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct ClassInfo {
  const char* name;
  uint8_t byte;
  const char* ascii;  // ASCII members as a PCRE2 class body
};
// The ASCII members follow llama.cpp's collapsed classes (e.g. '~' is not a symbol there).
const ClassInfo kClasses[] = {
    {"N", 0xD1, "\\x30-\\x39"},
    {"L", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
    {"P", 0xD3, "\\x21-\\x23\\x25-\\x2A\\x2C-\\x2F\\x3A-\\x3B\\x3F-\\x40\\x5B-\\x5D\\x5F\\x7B\\x7D"},
    {"M", 0xD4, ""},
    {"S", 0xD5, "\\x24\\x2B\\x3C-\\x3E\\x5E\\x60\\x7C"},
    {"Lu", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
    {"Ll", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
    {"Lt", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
    {"Lm", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
    {"Lo", 0xD2, "\\x41-\\x5A\\x61-\\x7A"},
};

bool uses_categories(std::string_view expr) {
  for (const auto& c : kClasses)
    if (expr.find(std::string("\\p{") + c.name + "}") != std::string_view::npos) return true;
  return false;
}

std::string collapse_expression(std::string_view expr) {
  for (unsigned char c : expr)
    if (c >= 0x80) fail("pre-tokenizer expression mixes \\p{{..}} classes and non-ASCII characters: {}", expr);
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < expr.size(); ++i) {
    if (expr[i] == '[' && (i == 0 || expr[i - 1] != '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && expr[i] == ']' && expr[i - 1] != '\\') {
      out += ']';
      inside = false;
      continue;
    }
    if (expr.compare(i, 3, "\\p{") == 0) {
      const size_t close = expr.find('}', i + 3);
      if (close != std::string_view::npos) {
        const std::string_view name = expr.substr(i + 3, close - i - 3);
        const ClassInfo* info = nullptr;
        for (const auto& c : kClasses)
          if (name == c.name) info = &c;
        if (info) {
          out += inside ? "" : "[";
          out += fmt::format("\\x{:02X}", info->byte);
          out += info->ascii;
          out += inside ? "" : "]";
          i = close;
          continue;
        }
      }
    }
    out += expr[i];
  }
  return out;
}

uint8_t collapsed_byte(uint32_t cpt) {
  if (cpt < 0x80) return uint8_t(cpt);
  const uint16_t f = unicode::flags(cpt);
  if (f & unicode::kWhitespace) return 0x0B;
  switch (f & unicode::kCategoryMask) {
    case unicode::kNumber: return 0xD1;
    case unicode::kLetter: return 0xD2;
    case unicode::kPunctuation: return 0xD3;
    case unicode::kMark: return 0xD4;
    case unicode::kSymbol: return 0xD5;
    default: return 0xD0;
  }
}

// Appends one piece length, as llama.cpp keeps them (zero for an empty match).
using Offsets = std::vector<size_t>;

// ---- hand-written scanners -------------------------------------------------

struct Scanner {
  const std::vector<uint32_t>& cpts;
  size_t begin, end;
  Offsets& out;
  size_t prev_end;

  uint32_t cpt(size_t p) const { return p < end ? cpts[p] : 0xFFFFFFFFu; }
  uint16_t fl(size_t p) const { return p < end ? unicode::flags(cpts[p]) : 0; }
  bool in(size_t p) const { return p < end; }
  bool letter(size_t p) const { return fl(p) & unicode::kLetter; }
  bool number(size_t p) const { return fl(p) & unicode::kNumber; }
  bool space(size_t p) const { return fl(p) & unicode::kWhitespace; }
  // [^\s\p{L}\p{N}] inside the piece
  bool other(size_t p) const {
    return in(p) && !(fl(p) & (unicode::kWhitespace | unicode::kLetter | unicode::kNumber));
  }
  void emit(size_t e) {
    if (e > prev_end) out.push_back(e - prev_end);
    prev_end = e;
  }
  // 's 't 're 've 'm 'll 'd at p (case-folded when caseless); returns the length or 0.
  size_t contraction(size_t p, bool caseless) const {
    if (cpt(p) != '\'' || p + 1 >= end) return 0;
    auto low = [&](size_t q) { return caseless ? unicode::to_lower(cpt(q)) : cpt(q); };
    const uint32_t a = low(p + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (p + 2 < end) {
      const uint32_t b = low(p + 2);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
  }
  // \s+(?!\S) then \s+ ; returns false when there is no whitespace at p.
  bool trailing_space(size_t& p) {
    size_t n = 0;
    while (space(p + n)) ++n;
    if (n > 1 && in(p + n)) {
      p += n - 1;
      emit(p);
      return true;
    }
    if (n > 0) {
      p += n;
      emit(p);
      return true;
    }
    return false;
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  void gpt2() {
    for (size_t p = begin; p < end;) {
      if (size_t n = contraction(p, false)) {
        p += n;
        emit(p);
        continue;
      }
      const size_t q = cpt(p) == ' ' ? p + 1 : p;  // after the optional space
      if (letter(q)) {
        p = q;
        while (letter(p)) ++p;
        emit(p);
        continue;
      }
      if (number(q)) {
        p = q;
        while (number(p)) ++p;
        emit(p);
        continue;
      }
      if (other(q)) {
        p = q;
        while (other(p)) ++p;
        emit(p);
        continue;
      }
      if (trailing_space(p)) continue;
      emit(++p);
    }
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  void llama3() {
    for (size_t p = begin; p < end;) {
      if (size_t n = contraction(p, true)) {
        p += n;
        emit(p);
        continue;
      }
      const uint32_t c = cpt(p);
      if (!(c == '\r' || c == '\n' || number(p)) && (letter(p) || letter(p + 1))) {
        ++p;
        while (letter(p)) ++p;
        emit(p);
        continue;
      }
      if (number(p)) {
        size_t start = p;
        while (number(p)) {
          if (++p - start >= 3) {
            emit(p);
            start = p;
          }
        }
        emit(p);
        continue;
      }
      const size_t q = c == ' ' ? p + 1 : p;
      if (!(fl(q) & (unicode::kWhitespace | unicode::kLetter | unicode::kNumber))) {
        // A lone space at the end of the piece also lands here and stays one piece.
        p = q;
        while (other(p)) ++p;
        while (cpt(p) == '\r' || cpt(p) == '\n') ++p;
        emit(p);
        continue;
      }
      size_t n = 0, last_newline_end = 0;
      while (space(p + n)) {
        if (cpt(p + n) == '\r' || cpt(p + n) == '\n') last_newline_end = p + n + 1;
        ++n;
      }
      if (last_newline_end > 0) {
        p = last_newline_end;
        emit(p);
        continue;
      }
      if (trailing_space(p)) continue;
      emit(++p);
    }
  }
};

}  // namespace

struct PreTokenizer::Step {
  StepKind kind;
  pcre2_code* code = nullptr;
  ~Step() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

pcre2_code* compile(const std::string& expr, uint32_t options, std::string_view original) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expr.data()), expr.size(), options, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail("cannot compile pre-tokenizer expression '{}' at offset {}: {}", original, size_t(err_off),
         reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return code;
}

// Runs one PCRE2 step over every piece. `subject` holds one unit per code point
// (collapsed) or UTF-8 (wide, with byte_of_cpt / cpt_of_byte to map offsets).
struct MatchContext {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchContext() {
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
  int match(const pcre2_code* code, const char* s, size_t len, size_t start, uint32_t opts) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s), len, start, opts, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jit_stack) {
      jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      mctx = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
      rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s), len, start, opts, md, mctx);
    }
    return rc;
  }
};

void run_pcre_step(const pcre2_code* code, bool utf, const std::string& subject, const std::vector<size_t>* byte_of_cpt,
                   const std::vector<size_t>* cpt_of_byte, const Offsets& in, Offsets& out) {
  MatchContext ctx;
  ctx.md = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t cpt_start = 0;
  for (size_t piece : in) {
    const size_t cpt_end = cpt_start + piece;
    const size_t b0 = utf ? (*byte_of_cpt)[cpt_start] : cpt_start;
    const size_t b1 = utf ? (*byte_of_cpt)[cpt_end] : cpt_end;
    const char* s = subject.data() + b0;
    const size_t len = b1 - b0;
    auto to_cpt = [&](size_t rel) { return utf ? (*cpt_of_byte)[b0 + rel] - cpt_start : rel; };
    size_t pos = 0, last = 0;
    uint32_t opts = utf ? PCRE2_NO_UTF_CHECK : 0;
    const uint32_t base_opts = opts;
    while (pos <= len) {
      const int rc = ctx.match(code, s, len, pos, opts);
      if (rc == PCRE2_ERROR_NOMATCH) {
        if (opts != base_opts) {  // no non-empty match at the empty match's place: step one character
          opts = base_opts;
          pos = utf ? (*byte_of_cpt)[cpt_start + to_cpt(pos) + 1] - b0 : pos + 1;
          continue;
        }
        break;
      }
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        fail("pre-tokenizer match failed: {}", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ctx.md);
      const size_t ms = to_cpt(ov[0]), me = to_cpt(ov[1]);
      const size_t last_c = to_cpt(last);
      if (ms > last_c) out.push_back(ms - last_c);
      out.push_back(me - ms);
      last = ov[1];
      pos = ov[1];
      opts = ov[0] == ov[1] ? (base_opts | PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : base_opts;
      if (ov[0] == ov[1] && pos >= len) break;
    }
    if (to_cpt(last) < piece) out.push_back(piece - to_cpt(last));
    cpt_start = cpt_end;
  }
}

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const auto& expr : regexes) {
    auto step = std::make_unique<Step>();
    if (expr == kGpt2Expr) {
      step->kind = StepKind::Gpt2;
    } else if (expr == kLlama3Expr || expr == kLlama3ExprCaseless) {
      step->kind = StepKind::Llama3;
    } else if (uses_categories(expr)) {
      step->kind = StepKind::Collapsed;
      step->code = compile(collapse_expression(expr), PCRE2_DOLLAR_ENDONLY, expr);
      need_collapsed_ = true;
    } else {
      step->kind = StepKind::Wide;
      step->code = compile(expr, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, expr);
      need_wide_ = true;
    }
    steps_.push_back(std::move(step));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  const std::vector<uint32_t> cpts = unicode::to_codepoints(text);
  std::string collapsed;
  if (need_collapsed_) {
    collapsed.resize(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) collapsed[i] = char(collapsed_byte(cpts[i]));
  }
  std::string wide;
  std::vector<size_t> byte_of_cpt, cpt_of_byte;
  if (need_wide_) {
    byte_of_cpt.resize(cpts.size() + 2);
    for (size_t i = 0; i < cpts.size(); ++i) {
      byte_of_cpt[i] = wide.size();
      uint32_t c = cpts[i];
      if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;  // keep the subject valid UTF-8
      if (c > 0x7F && unicode::is_whitespace(c)) c = 0x0B;
      unicode::append_utf8(wide, c);
    }
    byte_of_cpt[cpts.size()] = wide.size();
    byte_of_cpt[cpts.size() + 1] = wide.size() + 1;
    cpt_of_byte.assign(wide.size() + 1, 0);
    for (size_t i = 0; i <= cpts.size(); ++i)
      if (byte_of_cpt[i] <= wide.size()) cpt_of_byte[byte_of_cpt[i]] = i;
  }

  Offsets offsets{cpts.size()}, next;
  for (const auto& step : steps_) {
    next.clear();
    next.reserve(offsets.size() * 2);
    switch (step->kind) {
      case StepKind::Gpt2:
      case StepKind::Llama3: {
        size_t start = 0;
        for (size_t piece : offsets) {
          Scanner sc{cpts, start, start + piece, next, start};
          if (step->kind == StepKind::Gpt2) sc.gpt2();
          else sc.llama3();
          start += piece;
        }
        break;
      }
      case StepKind::Collapsed: run_pcre_step(step->code, false, collapsed, nullptr, nullptr, offsets, next); break;
      case StepKind::Wide: run_pcre_step(step->code, true, wide, &byte_of_cpt, &cpt_of_byte, offsets, next); break;
    }
    offsets.swap(next);
  }

  size_t start = 0;
  for (size_t piece : offsets) {
    std::string w;
    w.reserve(piece);
    for (size_t i = start; i < start + piece; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    start += piece;
  }
}

}  // namespace opal
