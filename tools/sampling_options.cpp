// The shared sampling flags (tools/sampling_options.h).
#include "tools/sampling_options.h"

namespace opal::tools {

SamplerParams SamplingOptions::params() const {
  SamplerParams p = sampler;
  p.seed = seed < 0 ? kRandomSeed : uint32_t(seed);
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
}

}  // namespace opal::tools
