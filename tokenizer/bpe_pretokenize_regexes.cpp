// The pre-tokenizer expressions of llama.cpp per `tokenizer.ggml.pre` (facts from
// the upstream tokenizer.json files as llama.cpp adapts them: "(?i:'s|...)" is
// spelled with explicit case classes, and some expressions are split into steps).
#include <map>

#include "core/error.h"
#include "tokenizer/bpe_pretokenize.h"

namespace opal {
namespace {

// GPT-2: contractions, letters, numbers, other symbols, trailing spaces.
const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Cased letters (Lu, Ll, Lt), as in DeepSeek-LLM's tokenizer.json; written as escapes because
// several of these code points (U+1F7D, U+1FBE, U+2126, U+212A...) change under NFC.
const char* const kDeepseekLlmLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\"
    "x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\"
    "x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}"
    "-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{"
    "1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1F"
    "B4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\"
    "x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113"
    "}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{21"
    "39}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x"
    "{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{F"
    "F21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{"
    "10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
const char* const kCjk = "[一-龥ࠀ-一가-퟿]+";
const char* const kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kPoro = " ?[^(\\s|.,!?…。，、।۔،)]+";
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTinyAya =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kSeedCoder =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Group {
  Default,
  Llama3,
  Dbrx,
  DeepseekLlm,
  DeepseekCoder,
  Deepseek3,
  Falcon,
  Starcoder,
  Gpt2,
  Qwen2,
  Qwen35,
  Poro,
  Chatglm4,
  Viking,
  Tekken,
  Chameleon,
  Gpt4o,
  TinyAya,
  Superbpe,
  Bailing,
  SeedCoder,
};

struct Entry {
  Group group;
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
  bool add_sep = false;
  bool no_bos = false;
};

const std::map<std::string, Entry, std::less<>>& table() {
  static const std::map<std::string, Entry, std::less<>> t = {
      {"default", {Group::Default}},
      {"llama3", {Group::Llama3, true, true, true}},
      {"llama-v3", {Group::Llama3, true, true, true}},
      {"llama-bpe", {Group::Llama3, true, true, true}},
      {"falcon3", {Group::Llama3, true, true, true}},
      {"falcon-h1", {Group::Llama3, true, true, true}},
      {"pixtral", {Group::Llama3, true, true, true}},
      {"midm-2.0", {Group::Llama3, true, true, true}},
      {"lfm2", {Group::Llama3, true, true, true}},
      {"dbrx", {Group::Dbrx}},
      {"smaug-bpe", {Group::Dbrx}},
      {"deepseek-llm", {Group::DeepseekLlm, false}},
      {"deepseek-coder", {Group::DeepseekCoder, false}},
      {"deepseek-v3", {Group::Deepseek3, false}},
      {"hunyuan-dense", {Group::Deepseek3, false}},
      {"falcon", {Group::Falcon}},
      {"mpt", {Group::Gpt2}},
      {"olmo", {Group::Gpt2}},
      {"jais", {Group::Gpt2}},
      {"exaone4", {Group::Gpt2}},
      {"trillion", {Group::Gpt2, false}},
      {"gpt-2", {Group::Gpt2}},
      {"phi-2", {Group::Gpt2}},
      {"jina-es", {Group::Gpt2}},
      {"jina-de", {Group::Gpt2}},
      {"gigachat", {Group::Gpt2}},
      {"jina-v2-es", {Group::Gpt2}},
      {"jina-v2-de", {Group::Gpt2}},
      {"a.x-4.0", {Group::Gpt2}},
      {"mellum", {Group::Gpt2}},
      {"modern-bert", {Group::Gpt2}},
      {"jina-v1-en", {Group::Gpt2, true, false, false, true}},
      {"jina-v2-code", {Group::Gpt2, true, false, false, true}},
      {"roberta-bpe", {Group::Gpt2, true, false, false, true}},
      {"starcoder", {Group::Starcoder}},
      {"refact", {Group::Starcoder}},
      {"codeshell", {Group::Starcoder}},
      {"exaone", {Group::Starcoder}},
      {"minerva-7b", {Group::Starcoder}},
      {"command-r", {Group::Starcoder, false}},
      {"smollm", {Group::Starcoder, false}},
      {"qwen2", {Group::Qwen2, false}},
      {"deepseek-r1-qwen", {Group::Qwen2, false}},
      {"kormo", {Group::Qwen2, false}},
      {"megrez", {Group::Qwen2}},
      {"stablelm2", {Group::Qwen2}},
      {"hunyuan", {Group::Qwen2, false}},
      {"solar-open", {Group::Qwen2, false}},
      {"grok-2", {Group::Qwen2, false}},
      {"qwen35", {Group::Qwen35, false}},
      {"poro-chat", {Group::Poro, false}},
      {"bloom", {Group::Poro}},
      {"gpt3-finnish", {Group::Poro}},
      {"glm4", {Group::Chatglm4, true, false, false, false, true}},
      {"chatglm-bpe", {Group::Chatglm4, true, false, false, false, true}},
      {"viking", {Group::Viking, false}},
      {"tekken", {Group::Tekken, false, true, true}},
      {"chameleon", {Group::Chameleon, false, false, true}},
      {"gpt-4o", {Group::Gpt4o, false}},
      {"llama4", {Group::Gpt4o, false}},
      {"minimax-m2", {Group::Gpt4o, false}},
      {"tiny_aya", {Group::TinyAya, false}},
      {"superbpe", {Group::Superbpe, false}},
      {"bailingmoe", {Group::Bailing, false}},
      {"bailingmoe2", {Group::Bailing, false}},
      {"llada-moe", {Group::Bailing, false}},
      {"seed-coder", {Group::SeedCoder, false}},
  };
  return t;
}

std::vector<std::string> regexes_of(Group g) {
  switch (g) {
    case Group::Default: return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    case Group::Llama3:
    case Group::Dbrx: return {kLlama3};
    case Group::DeepseekLlm:
      return {"[\\r\\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, R"(\p{N}+)"};
    case Group::DeepseekCoder: return {"[\\r\\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"};
    case Group::Deepseek3: return {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+", kDeepseek3Main};
    case Group::Falcon: return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    case Group::Starcoder: return {R"(\p{N})", kGpt2};
    case Group::Gpt2: return {kGpt2};
    case Group::Qwen2: return {kQwen2};
    case Group::Qwen35: return {kQwen35};
    case Group::Poro: return {kPoro};
    case Group::Chatglm4: return {kLlama3};
    case Group::Viking: return {kPoro, R"(\p{N})"};
    case Group::Tekken: return {kTekken};
    case Group::Chameleon:
      return {"<sentinel:[0-9]+>",       "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
              "([\\t\\n]|    |  )",      R"(\p{N})",
              R"([\p{P}!-/:-@\[-`{-~])", kGpt2};
    case Group::Gpt4o: return {kGpt4o};
    case Group::TinyAya: return {R"(\d{1,3}(?=(?:\d{3})*\b))", kTinyAya};
    case Group::Superbpe: return {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};
    case Group::Bailing: return {kBailing};
    case Group::SeedCoder: return {kSeedCoder};
  }
  return {};
}

}  // namespace

PreTokenizerConfig pre_tokenizer_config(std::string_view pre) {
  if (pre.empty()) pre = "default";
  const auto& t = table();
  auto it = t.find(pre);
  if (it == t.end()) fail("unknown BPE pre-tokenizer tokenizer.ggml.pre = '{}'", pre);
  const Entry& e = it->second;
  PreTokenizerConfig c;
  c.regexes = regexes_of(e.group);
  c.clean_spaces = e.clean_spaces;
  c.ignore_merges = e.ignore_merges;
  c.add_bos = e.add_bos;
  c.add_sep = e.add_sep;
  c.no_bos = e.no_bos;
  return c;
}

}  // namespace opal
