// Perplexity with llama.cpp's method (llama-perplexity): split the tokens
// into chunks of n_ctx (the tail is dropped); in each chunk replace the first
// token by BOS (when the vocabulary adds one); evaluate the chunk from an
// empty KV cache; score the predictions at positions n_ctx/2 .. n_ctx-2
// against the next tokens; PPL = exp(mean negative log-likelihood) over all
// scored predictions, reported cumulatively after each chunk.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/context.h"

namespace opal {

struct PerplexityResult {
  std::vector<double> cumulative;  // PPL after each chunk
  double ppl = 0;
  double uncertainty = 0;  // llama.cpp's "± x" (standard error propagated to PPL)
  int64_t n_scored = 0;
  int64_t n_chunks = 0;
};

// ctx.n_ctx() must be >= n_ctx. bos < 0: keep the chunk's first token.
// progress(chunk_done, n_chunks, ppl_so_far) is called after each chunk.
PerplexityResult compute_perplexity(Context& ctx, const std::vector<int32_t>& tokens, int64_t n_ctx, int64_t n_batch,
                                    int32_t bos,
                                    const std::function<void(int64_t, int64_t, double)>& progress = nullptr);

}  // namespace opal
