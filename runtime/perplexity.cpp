#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/generation.h"

namespace opal {

PerplexityResult compute_perplexity(Context& ctx, const std::vector<int32_t>& tokens, int64_t n_ctx, int64_t n_batch,
                                    int32_t bos, const std::function<void(int64_t, int64_t, double)>& progress) {
  if (n_ctx < 4) fail("perplexity: context size {} is too small", n_ctx);
  if (ctx.n_ctx() < n_ctx) fail("perplexity: the context holds {} tokens, need {}", ctx.n_ctx(), n_ctx);
  PerplexityResult r;
  r.n_chunks = int64_t(tokens.size()) / n_ctx;
  if (r.n_chunks == 0)
    fail("perplexity: {} tokens are fewer than one chunk of n_ctx = {} (need at least {})", tokens.size(), n_ctx,
         n_ctx);
  n_batch = std::min(n_batch, n_ctx);
  const int64_t nv = ctx.n_vocab();
  const int64_t first = n_ctx / 2;
  double nll = 0, nll2 = 0;
  std::vector<float> logits(size_t(n_ctx * nv));
  PromptOptions po;
  po.logits = PromptLogits::All;
  po.n_batch = n_batch;
  po.on_chunk = [&](size_t s, size_t e) {
    for (size_t i = s; i < e; ++i)
      std::copy(ctx.logits(int64_t(i - s)), ctx.logits(int64_t(i - s)) + nv, logits.begin() + int64_t(i) * nv);
  };
  for (int64_t c = 0; c < r.n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + long(c * n_ctx), tokens.begin() + long((c + 1) * n_ctx));
    if (bos >= 0) chunk[0] = bos;
    ctx.reset();
    decode_prompt(ctx, chunk, po);
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const float* l = logits.data() + j * nv;
      float mx = l[0];
      for (int64_t i = 1; i < nv; ++i) mx = std::max(mx, l[i]);
      double sum = 0;
      for (int64_t i = 0; i < nv; ++i) sum += std::exp(double(l[i] - mx));
      const double lp = double(l[chunk[size_t(j + 1)]] - mx) - std::log(sum);
      nll += -lp;
      nll2 += lp * lp;
      ++r.n_scored;
    }
    r.cumulative.push_back(std::exp(nll / double(r.n_scored)));
    if (progress) progress(c + 1, r.n_chunks, r.cumulative.back());
  }
  const double mean = nll / double(r.n_scored);
  const double mean2 = nll2 / double(r.n_scored);
  r.ppl = std::exp(mean);
  if (r.n_scored > 1) r.uncertainty = std::sqrt(std::max(0.0, mean2 - mean * mean) / double(r.n_scored - 1)) * r.ppl;
  return r;
}

}  // namespace opal
