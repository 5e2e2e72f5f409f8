// The shared sampling flags (tools/sampling_options.h).
#include "tools/sampling_options.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "runtime/grammar_vocab.h"
#include "sampling/grammar.h"

namespace opal::tools {

SamplerParams SamplingOptions::params() const {
  SamplerParams p = sampler;
  p.seed = seed < 0 ? kRandomSeed : uint32_t(seed);
  return p;
}

SamplerParams SamplingOptions::params(const Vocab& vocab) const {
  SamplerParams p = params();
  const int given = int(!grammar.empty()) + int(!grammar_file.empty()) + int(!json_schema.empty());
  if (given == 0) return p;
  if (given > 1) fail("give only one of --grammar, --grammar-file and --json-schema");
  std::string text = grammar;
  const char* flag = "--grammar";
  if (!grammar_file.empty()) {
    flag = "--grammar-file";
    std::ifstream in(grammar_file, std::ios::binary);
    if (!in) fail("--grammar-file: cannot open '{}'", grammar_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (!json_schema.empty()) {
    flag = "--json-schema";
    try {
      text = json_schema_to_gbnf(json_schema);
    } catch (const Error& e) {
      fail("--json-schema: {}", e.what());
    }
  }
  try {
    p.grammar = Grammar::parse(text);
  } catch (const Error& e) {
    fail("{}: {}", flag, e.what());
  }
  p.grammar_vocab = make_grammar_vocab(vocab);
  return p;
}

void add_sampling_options(CLI::App* sub, SamplingOptions& o) {
  SamplerParams& p = o.sampler;
  sub->add_option("--temp", p.temp, "temperature (0.8; <= 0 greedy)");
  sub->add_option("--top-k", p.top_k, "top-k (40; 0 off)");
  sub->add_option("--top-p", p.top_p, "top-p (0.95; 1 off)");
  sub->add_option("--min-p", p.min_p, "min-p (0.05; 0 off)");
  sub->add_option("--repeat-penalty", p.repeat_penalty, "repetition penalty (1.0 = off)");
  sub->add_option("--repeat-last-n", p.repeat_last_n, "tokens the penalties look back (64)");
  sub->add_option("--presence-penalty", p.presence_penalty, "presence penalty (0)");
  sub->add_option("--frequency-penalty", p.frequency_penalty, "frequency penalty (0)");
  sub->add_option("-s,--seed", o.seed, "RNG seed (-1 = random)");
  sub->add_option("--grammar", o.grammar, "GBNF grammar the output must follow (llama.cpp syntax)");
  sub->add_option("--grammar-file", o.grammar_file, "file holding a GBNF grammar");
  sub->add_option("-j,--json-schema", o.json_schema, "JSON Schema the output must follow (compiled to a grammar)");
}

}  // namespace opal::tools
