// `opal tokenize -m FILE (-p TEXT | -f FILE) [--ids] [--pieces] [--no-bos] [--no-parse-special]`:
// the tokens of a text with a model's vocabulary, printed like llama-tokenize
// (one `id -> 'piece'` line per token; --ids: one JSON list of ids on one line).
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "tokenizer/vocab.h"
#include "tools/commands.h"
#include "tools/load_options.h"

namespace opal::tools {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids = false;
  bool pieces = false;
  bool no_bos = false;
  bool no_parse_special = false;
};

// True when s is valid UTF-8 (pieces of multi-byte characters are not).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = uint8_t(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

int run_tokenize(const TokenizeOptions& o) {
  std::string text = o.prompt;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) fail("cannot read text file '{}'", o.file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const gguf::File file = gguf::File::open(o.model);
  const Vocab vocab = Vocab::from_gguf(file);
  const std::vector<int32_t> ids = vocab.tokenize(text, !o.no_bos, !o.no_parse_special);

  if (o.ids) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? ", " : "", ids[i]);
    fmt::print("{}]\n", line);
    return 0;
  }
  if (o.pieces) {
    nlohmann::json j = nlohmann::json::array();
    for (int32_t id : ids) j.push_back(vocab.token_to_piece(id));
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  for (int32_t id : ids) {
    const std::string piece = vocab.token_to_piece(id);
    if (valid_utf8(piece)) {
      fmt::print("{:6d} -> '{}'\n", id, piece);
    } else {
      std::string hex;
      for (char c : piece) hex += fmt::format("{}{:02x}", hex.empty() ? "" : " ", uint8_t(c));
      fmt::print("{:6d} -> [{}] (not valid UTF-8 on its own)\n", id, hex);
    }
  }
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Tokenize a text with a model's vocabulary (like llama-tokenize)");
  sub->add_option("-m,--model", o->model, "GGUF file (a vocab-only file is enough)");
  add_hub_options(sub, &o->model);
  auto* p = sub->add_option("-p,--prompt", o->prompt, "Text to tokenize");
  auto* f = sub->add_option("-f,--file", o->file, "Read the text from this file");
  p->excludes(f);
  f->excludes(p);
  sub->add_flag("--ids", o->ids, "Print only the ids, as one JSON list on one line");
  sub->add_flag("--pieces", o->pieces, "Print only the pieces, as one JSON list of strings on one line");
  sub->add_flag("--no-bos", o->no_bos, "Do not add BOS/EOS even if the vocabulary asks for them");
  sub->add_flag("--no-parse-special", o->no_parse_special,
                "Treat special-token text such as <|im_start|> as plain text");
  set_action(sub, [o, p, f] {
    if (p->count() == 0 && f->count() == 0) fail("tokenize: give the text with -p TEXT or -f FILE");
    if (o->model.empty()) fail("tokenize: a model is needed: -m FILE, -hf user/repo[:quant] or -mu URL");
    return run_tokenize(*o);
  });
}

}  // namespace opal::tools
