// Embeddings (runtime/embedding.h): batches of sequences through
// Context::decode_embeddings, pooled and normalised on the host.
//
// Packing: inputs in order, each its own sequence id (0, 1, ...), until the
// next one would pass n_batch or n_ctx tokens or n_seq_max sequences; the
// context is reset before each batch. Flagged tokens: every token (none,
// mean), the first (cls) or the last (last), so the graph's output rows are
// exactly what pooling reads. Mean sums in double.
#include "runtime/embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/gguf.h"

namespace opal {

Pooling pooling_from_name(const std::string& name) {
  if (name == "none") return Pooling::None;
  if (name == "mean") return Pooling::Mean;
  if (name == "cls") return Pooling::Cls;
  if (name == "last") return Pooling::Last;
  if (name == "rank") return Pooling::Rank;
  fail("unknown pooling '{}' (want none, mean, cls or last)", name);
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
    case Pooling::Rank: return "rank";
  }
  return "?";
}

bool model_has_pooling(const Model& model) { return model.gguf().has(model.hparams().arch + ".pooling_type"); }

Pooling model_pooling(const Model& model) {
  const std::string key = model.hparams().arch + ".pooling_type";
  const int64_t v = model.gguf().get_int(key, int64_t(Pooling::None));
  if (v < 0 || v > int64_t(Pooling::Rank)) fail("{}: {} is not a pooling type (0 none .. 4 rank)", key, v);
  return Pooling(v);
}

void normalize_embedding(float* v, int64_t n, int norm) {
  double sum = 0.0;
  if (norm < 0) return;
  if (norm == 0) {  // max absolute value, scaled to the int16 range
    for (int64_t i = 0; i < n; ++i) sum = std::max(sum, double(std::fabs(v[i])));
    sum /= 32760.0;
  } else if (norm == 2) {
    for (int64_t i = 0; i < n; ++i) sum += double(v[i]) * double(v[i]);
    sum = std::sqrt(sum);
  } else {  // p-norm
    for (int64_t i = 0; i < n; ++i) sum += std::pow(std::fabs(double(v[i])), double(norm));
    sum = std::pow(sum, 1.0 / double(norm));
  }
  const double scale = sum > 0.0 ? 1.0 / sum : 0.0;
  for (int64_t i = 0; i < n; ++i) v[i] = float(double(v[i]) * scale);
}

namespace {

// The flagged (output) tokens of an input of n tokens under pooling p.
int64_t n_flagged(Pooling p, int64_t n) { return p == Pooling::None || p == Pooling::Mean ? n : 1; }
bool flagged(Pooling p, int64_t i, int64_t n) {
  switch (p) {
    case Pooling::Cls: return i == 0;
    case Pooling::Last: return i == n - 1;
    default: return true;
  }
}

}  // namespace

std::vector<EmbeddingVectors> embed(Context& ctx, const std::vector<std::vector<int32_t>>& inputs,
                                    const EmbedOptions& opts) {
  if (opts.pooling == Pooling::Rank)
    fail("rank pooling (a reranker's classification head) is not supported; use none, mean, cls or last");
  const int64_t cap = std::min(ctx.params().n_batch, ctx.n_ctx());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) fail("input {} is empty (no tokens to embed)", i);
    if (int64_t(inputs[i].size()) > cap)
      fail("input {} has {} tokens, more than the context holds ({} = min(n_ctx {}, n_batch {}))", i, inputs[i].size(),
           cap, ctx.n_ctx(), ctx.params().n_batch);
  }
  const int64_t E = ctx.n_embd();
  std::vector<EmbeddingVectors> out(inputs.size());
  Batch batch;
  size_t next = 0;
  while (next < inputs.size()) {
    const size_t first = next;
    batch.clear();
    while (next < inputs.size() && int64_t(batch.size() + inputs[next].size()) <= cap &&
           int64_t(next - first) < ctx.params().n_seq_max) {
      const auto& in = inputs[next];
      const int64_t n = int64_t(in.size());
      for (int64_t t = 0; t < n; ++t)
        batch.add(in[size_t(t)], int32_t(t), int32_t(next - first), flagged(opts.pooling, t, n));
      ++next;
    }
    ctx.reset();
    ctx.decode_embeddings(batch);
    int64_t row = 0;
    for (size_t i = first; i < next; ++i) {
      const int64_t n = int64_t(inputs[i].size()), k = n_flagged(opts.pooling, n);
      if (opts.pooling == Pooling::Mean) {
        std::vector<double> acc(static_cast<size_t>(E), 0.0);
        for (int64_t t = 0; t < k; ++t) {
          const float* h = ctx.embedding(row + t);
          for (int64_t e = 0; e < E; ++e) acc[size_t(e)] += h[e];
        }
        std::vector<float> v(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) v[size_t(e)] = float(acc[size_t(e)] / double(n));
        out[i].push_back(std::move(v));
      } else {
        for (int64_t t = 0; t < k; ++t) out[i].emplace_back(ctx.embedding(row + t), ctx.embedding(row + t) + E);
      }
      for (auto& v : out[i]) normalize_embedding(v.data(), E, opts.normalize);
      row += k;
    }
  }
  ctx.reset();
  return out;
}

}  // namespace opal
