// Loading a Vocab from GGUF metadata (tokenizer.ggml.*), following llama.cpp's
// rules: per-model defaults for special ids and flags, per-pre-tokenizer flags,
// then the file's keys; end-of-generation and FIM tokens found by their text;
// special tokens sorted longest first for splitting; a piece cache.
#include <algorithm>
#include <cctype>
#include <cstdint>

#include "core/error.h"
#include "core/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_impl.h"

namespace opal {
namespace {

constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";

// GGUF token types (tokenizer.ggml.token_type) -> attributes.
uint32_t attr_of_type(int64_t t) {
  switch (t) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

const gguf::Value& require_array(const gguf::File& f, const char* key, gguf::ValueType elem, const char* elem_name) {
  const gguf::Value* v = f.find(key);
  if (!v) fail("{}: tokenizer metadata '{}' is missing", f.path(), key);
  if (v->type != gguf::ValueType::ARRAY || v->elem_type != elem)
    fail("{}: tokenizer metadata '{}' must be an array of {}", f.path(), key, elem_name);
  return *v;
}

bool get_bool(const gguf::File& f, const char* key, bool def) {
  const gguf::Value* v = f.find(key);
  if (!v) return def;
  if (v->type == gguf::ValueType::BOOL) return v->u != 0;
  if (v->is_integer()) return v->as_int(key) != 0;
  fail("{}: tokenizer metadata '{}' must be a bool", f.path(), key);
}

bool contains(const std::string& s, std::initializer_list<const char*> subs) {
  for (const char* x : subs)
    if (s.find(x) != std::string::npos) return true;
  return false;
}

}  // namespace

void Vocab::Impl::check_id(int32_t id, const char* what) const {
  if (id < 0 || id >= int32_t(tokens.size()))
    fail("{}: token id {} is out of range (the vocabulary has {} tokens)", what, id, tokens.size());
}

Vocab Vocab::from_gguf(const gguf::File& f) {
  auto impl = std::make_shared<Impl>();
  Impl& v = *impl;
  const gguf::Value* model_v = f.find("tokenizer.ggml.model");
  if (!model_v) fail("{}: no tokenizer in this file (tokenizer.ggml.model is missing)", f.path());
  v.model = model_v->as_string("tokenizer.ggml.model");
  v.pre = f.get_string("tokenizer.ggml.pre", "");

  PreTokenizerConfig pre_cfg;
  if (v.model == "no_vocab" || v.model == "none") {
    v.type = VocabType::None;
  } else if (v.model == "llama") {
    v.type = VocabType::Spm;
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = true, v.clean_spaces = false, v.add_bos = true, v.add_eos = false;
  } else if (v.model == "bert") {
    v.type = VocabType::Wpm;
    v.bos = 101, v.unk = 100, v.sep = 102, v.pad = 0, v.mask = 103;
    v.add_space_prefix = false, v.clean_spaces = true, v.add_bos = true, v.add_eos = false, v.add_sep = true;
  } else if (v.model == "gpt2") {
    v.type = VocabType::Bpe;
    v.bos = 11, v.eos = 11;  // llama.cpp's defaults for files without the keys
    pre_cfg = pre_tokenizer_config(v.pre);
    v.add_space_prefix = false, v.escape_whitespaces = false;
    v.clean_spaces = pre_cfg.clean_spaces;
    v.ignore_merges = pre_cfg.ignore_merges;
    v.add_bos = pre_cfg.add_bos;
    v.add_sep = pre_cfg.add_sep;
    if (pre_cfg.no_bos) v.bos = -1;
  } else if (v.model == "rwkv") {
    v.type = VocabType::Rwkv;  // no default special ids; the file's keys set them (BOS = EOS = 0, EOT = 261)
    v.add_space_prefix = false, v.clean_spaces = false, v.add_bos = false, v.add_eos = false;
  } else if (v.model == "gemma4") {
    // Gemma 4: BPE with merges over raw UTF-8, "▁" for spaces, the pre-split [^\n]+|[\n]+, byte fallback;
    // llama.cpp always adds BOS for it.
    v.type = VocabType::Bpe;
    v.bpe_raw_utf8 = true;
    v.bos = 2, v.eos = 1, v.unk = 3, v.pad = 0;
    pre_cfg.regexes = {"[^\n]+|[\n]+"};
    pre_cfg.clean_spaces = false;
    v.add_space_prefix = false, v.escape_whitespaces = true, v.clean_spaces = false, v.add_bos = true;
  } else {
    fail("{}: unknown tokenizer model tokenizer.ggml.model = '{}' (supported: llama, gpt2, bert, rwkv, gemma4)",
         f.path(), v.model);
  }
  if (v.pre.empty()) v.pre = "default";
  v.add_space_prefix = get_bool(f, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);

  if (v.type == VocabType::None) {
    if (const gguf::Value* t = f.find(kTokens); t && t->type == gguf::ValueType::ARRAY)
      for (size_t i = 0; i < t->array.size(); ++i)
        v.tokens.push_back({"[UNUSED_" + std::to_string(i) + "]", 0, kAttrUnused});
    v.bos = v.eos = v.unk = -1;
    return Vocab(std::move(impl));
  }

  // Tokens, scores, types.
  const gguf::Value& toks = require_array(f, kTokens, gguf::ValueType::STRING, "strings");
  const size_t n = toks.array.size();
  if (n == 0) fail("{}: '{}' is empty", f.path(), kTokens);
  if (n > size_t(INT32_MAX)) fail("{}: '{}' has too many tokens ({})", f.path(), kTokens, n);
  const gguf::Value* scores = f.find(kScores);
  if (scores) {
    if (scores->type != gguf::ValueType::ARRAY ||
        (scores->elem_type != gguf::ValueType::F32 && scores->elem_type != gguf::ValueType::I32))
      fail("{}: '{}' must be an array of f32 or i32", f.path(), kScores);
    if (scores->array.size() != n)
      fail("{}: '{}' has {} entries but '{}' has {}", f.path(), kScores, scores->array.size(), kTokens, n);
  }
  const gguf::Value* types = f.find(kTypes);
  if (types) {
    if (types->type != gguf::ValueType::ARRAY || types->elem_type != gguf::ValueType::I32)
      fail("{}: '{}' must be an array of i32", f.path(), kTypes);
    if (types->array.size() != n)
      fail("{}: '{}' has {} entries but '{}' has {}", f.path(), kTypes, types->array.size(), kTokens, n);
  }
  v.tokens.resize(n);
  v.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v.tokens[i];
    t.text = toks.array[i].str;
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";
    auto [it, inserted] = v.token_to_id.emplace(t.text, int32_t(i));
    if (!inserted)
      fail("{}: duplicate token in '{}': '{}' has ids {} and {}", f.path(), kTokens, t.text, it->second, i);
    v.max_token_len = std::max(v.max_token_len, int(t.text.size()));
    if (scores)
      t.score = scores->elem_type == gguf::ValueType::F32 ? float(scores->array[i].f) : float(scores->array[i].i);
    t.attr = types ? attr_of_type(types->array[i].i) : kAttrNormal;
  }

  // Merges (byte-level BPE).
  if (v.type == VocabType::Bpe) {
    const gguf::Value& merges = require_array(f, kMerges, gguf::ValueType::STRING, "strings");
    BpeMerges& m = v.bpe;
    m.sym_text.reserve(n + merges.array.size());
    m.sym_of_text.reserve(n + merges.array.size());
    for (size_t i = 0; i < n; ++i) {
      const int32_t s = m.intern(v.tokens[i].text);
      m.sym_token[s] = int32_t(i);
    }
    m.merges.reserve(merges.array.size());
    std::string joined;
    for (size_t i = 0; i < merges.array.size(); ++i) {
      const std::string& line = merges.array[i].str;
      const size_t sp = line.find(' ', 1);
      std::string_view first, second;
      if (sp != std::string::npos) {
        first = std::string_view(line).substr(0, sp);
        second = std::string_view(line).substr(sp + 1);
      }
      const int32_t l = m.intern(first), r = m.intern(second);
      joined.assign(first);
      joined.append(second);
      const int32_t res = m.intern(joined);
      m.merges.emplace(BpeMerges::key(l, r), BpeMerges::Merge{int32_t(i), res});
    }
    for (int b = 0; b < 256; ++b) {
      auto it = m.sym_of_text.find(unicode::byte_to_utf8(uint8_t(b)));
      m.byte_sym[b] = it == m.sym_of_text.end() ? -1 : it->second;
    }
    v.pretokenizer = std::make_unique<PreTokenizer>(pre_cfg.regexes);
  }

  // Special ids: defaults that do not fit are dropped; explicit ids must fit (-1 = none).
  struct SpecialKey {
    const char* key;
    int32_t* id;
  };
  const SpecialKey keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},         {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},         {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},     {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},     {"tokenizer.ggml.mask_token_id", &v.mask},
      {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &v.fim_pre},  {"tokenizer.ggml.suffix_token_id", &v.fim_suf},
      {"tokenizer.ggml.middle_token_id", &v.fim_mid},
  };
  for (const auto& k : keys) {
    if (*k.id >= int32_t(n)) *k.id = -1;
    const gguf::Value* val = f.find(k.key);
    if (!val) continue;
    const int64_t id = val->as_int(k.key);
    // -1 (often stored as u32 0xFFFFFFFF) means "none": keep the default, as llama.cpp.
    if (id < 0 || id == int64_t(UINT32_MAX)) continue;
    if (id >= int64_t(n)) fail("{}: '{}' = {} is out of range (the vocabulary has {} tokens)", f.path(), k.key, id, n);
    *k.id = int32_t(id);
  }
  v.add_bos = get_bool(f, "tokenizer.ggml.add_bos_token", v.add_bos);
  if (v.bpe_raw_utf8) v.add_bos = true;  // llama.cpp forces BOS for gemma4
  v.add_eos = get_bool(f, "tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_sep = get_bool(f, "tokenizer.ggml.add_sep_token", v.add_sep);
  if (v.add_bos && v.bos < 0) fail("{}: tokenizer.ggml.add_bos_token is true, but there is no BOS token id", f.path());
  if (v.add_eos && v.eos < 0) fail("{}: tokenizer.ggml.add_eos_token is true, but there is no EOS token id", f.path());
  if (v.type == VocabType::Wpm && v.sep < 0) fail("{}: a WordPiece vocabulary needs a separator token id", f.path());
  v.wpm_lowercase = get_bool(f, "tokenizer.ggml.normalizer.lowercase", true);
  v.wpm_strip_accents = get_bool(f, "tokenizer.ggml.normalizer.strip_accents", v.wpm_lowercase);

  // Tokens recognised by their text (as llama.cpp does); such tokens become control tokens.
  auto mark_control = [&](int32_t id) { v.tokens[id].attr |= kAttrControl; };
  auto find_first = [&](int32_t& slot, std::initializer_list<const char*> texts) {
    if (slot >= 0) return;
    for (const char* t : texts)
      if (int32_t id = v.text_to_token(t); id >= 0) {
        slot = id;
        mark_control(id);
        return;
      }
  };
  find_first(v.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                     "<EOT>", "_<EOT>", "[EOT]",
                     "<\xEF\xBD\x9C"
                     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                     "<end_of_utterance>"});
  find_first(v.eom, {"<|eom_id|>"});
  find_first(v.fim_pre,
             {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>"});
  find_first(v.fim_suf,
             {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>"});
  find_first(v.fim_mid,
             {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>"});
  find_first(v.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  find_first(v.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  find_first(v.fim_sep, {"<|file_sep|>"});
  for (auto& t : v.tokens)
    if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos) t.attr |= kAttrUnused;

  // End of generation.
  for (int32_t id : {v.fim_pad, v.fim_rep, v.fim_sep})
    if (id >= 0) v.eog.insert(id);
  for (const char* t : {"<|eot_id|>",
                        "<|im_end|>",
                        "<|end|>",
                        "<|return|>",
                        "<|call|>",
                        "<|flush|>",
                        "<|calls|>",
                        "<end_of_turn>",
                        "<|endoftext|>",
                        "</s>",
                        "<|eom_id|>",
                        "<EOT>",
                        "_<EOT>",
                        "[EOT]",
                        "[EOS]",
                        "<|end_of_text|>",
                        "<end_of_utterance>",
                        "<eos>",
                        "<turn|>",
                        "<|tool_response>"}) {
    if (int32_t id = v.text_to_token(t); id >= 0) {
      v.eog.insert(id);
      mark_control(id);
    }
  }
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = v.text_to_token(t); id >= 0) v.tokens[id].attr = kAttrUserDefined;
  for (int32_t id : {v.eos, v.eot, v.eom})
    if (id >= 0) v.eog.insert(id);
  {
    const int32_t end_id = v.text_to_token("<|end|>");
    const bool has_return = v.text_to_token("<|return|>") >= 0,
               has_call = v.text_to_token("<|call|>") >= 0 || v.text_to_token("<|calls|>") >= 0;
    const bool has_flush = v.text_to_token("<|flush|>") >= 0;
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
      v.eog.erase(end_id);
      v.tokens[end_id].attr = kAttrUserDefined;
    }
    const int32_t s_id = v.text_to_token("</s>");
    if (s_id >= 0 && v.text_to_token("<|tool_response>") >= 0 && v.eos != s_id) {
      v.eog.erase(s_id);
      v.tokens[s_id].attr = kAttrNormal;
    }
  }

  if (v.type == VocabType::Spm) {
    for (int c = 0; c < 128; ++c) v.spm_isolated[c] = true;
    for (const TokenData& t : v.tokens)
      if (t.text.size() > 1)
        for (unsigned char c : t.text)
          if (c < 128) v.spm_isolated[c] = false;
  }

  if (v.type == VocabType::Rwkv) v.build_rwkv();

  // Newline token.
  if (v.type == VocabType::Rwkv) {
    std::vector<int32_t> ids;
    v.tokenize_rwkv("\n", ids);
    v.nl = ids.empty() ? v.pad : ids[0];
  } else if (v.type == VocabType::Spm) {
    const int32_t id = v.byte_to_token_spm('\n');
    v.nl = id >= 0 ? id : v.pad;
  } else if (v.type == VocabType::Wpm) {
    v.nl = v.pad;
  } else {
    std::vector<int32_t> ids;
    v.tokenize_bpe("\n", ids);
    v.nl = ids.empty() ? v.pad : ids[0];
  }

  // Special tokens, longest text first (ties by id, so the order is reproducible).
  for (int32_t id = 0; id < int32_t(n); ++id)
    if (v.tokens[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_tokens.push_back(id);
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(),
                   [&](int32_t a, int32_t b) { return v.tokens[a].text.size() > v.tokens[b].text.size(); });

  v.piece_cache.resize(n);
  for (int32_t id = 0; id < int32_t(n); ++id) v.piece_cache[id] = v.compute_piece(id, true);

  // Per-model strip attributes (llama.cpp keys them on names).
  std::string name = f.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const std::string arch = f.get_string("general.architecture", "");
  auto set_attr = [&](const char* text, uint32_t bit, bool on) {
    if (int32_t id = v.text_to_token(text); id >= 0)
      v.tokens[id].attr = on ? (v.tokens[id].attr | bit) : (v.tokens[id].attr & ~bit);
  };
  if (contains(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (int32_t id : v.special_tokens) v.tokens[id].attr |= kAttrRstrip;
    set_attr("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
  } else if (contains(name, {"modern-bert"})) {
    set_attr("[MASK]", kAttrLstrip, true);
  }
  return Vocab(std::move(impl));
}

int32_t Vocab::n_tokens() const { return int32_t(impl_->tokens.size()); }
int32_t Vocab::bos() const { return impl_->bos; }
int32_t Vocab::eos() const { return impl_->eos; }
int32_t Vocab::eot() const { return impl_->eot; }
int32_t Vocab::eom() const { return impl_->eom; }
int32_t Vocab::unk() const { return impl_->unk; }
int32_t Vocab::sep() const { return impl_->sep; }
int32_t Vocab::pad() const { return impl_->pad; }
int32_t Vocab::mask() const { return impl_->mask; }
int32_t Vocab::nl() const { return impl_->nl; }
bool Vocab::add_bos() const { return impl_->add_bos; }
bool Vocab::add_eos() const { return impl_->add_eos; }
bool Vocab::add_space_prefix() const { return impl_->add_space_prefix; }
bool Vocab::is_eog(int32_t id) const { return id >= 0 && impl_->eog.count(id) > 0; }
bool Vocab::is_control(int32_t id) const {
  return id >= 0 && id < n_tokens() && (impl_->tokens[id].attr & kAttrControl);
}
bool Vocab::is_byte(int32_t id) const { return id >= 0 && id < n_tokens() && (impl_->tokens[id].attr & kAttrByte); }
uint32_t Vocab::token_attr(int32_t id) const {
  impl_->check_id(id, "token_attr");
  return impl_->tokens[id].attr;
}
float Vocab::token_score(int32_t id) const {
  impl_->check_id(id, "token_score");
  return impl_->tokens[id].score;
}
const std::string& Vocab::token_text(int32_t id) const {
  impl_->check_id(id, "token_text");
  return impl_->tokens[id].text;
}
int32_t Vocab::find_token(std::string_view text) const { return impl_->text_to_token(text); }
std::vector<int32_t> Vocab::eog_ids() const { return {impl_->eog.begin(), impl_->eog.end()}; }
VocabType Vocab::type() const { return impl_->type; }
std::string Vocab::type_name() const {
  switch (impl_->type) {
    case VocabType::Spm: return "SPM";
    case VocabType::Bpe: return "BPE";
    case VocabType::Wpm: return "WPM";
    case VocabType::Rwkv: return "RWKV";
    case VocabType::None: return "no vocab";
  }
  return "unknown";
}
const std::string& Vocab::model_name() const { return impl_->model; }
const std::string& Vocab::pre_name() const { return impl_->pre; }

}  // namespace opal
