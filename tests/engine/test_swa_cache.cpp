// The sliding-window KV cache (runtime/context.cpp, runtime/kv_cache.cpp) on
// tiny-gemma3 (window 32, layers S, S, G): sliding layers get their own cache
// of pad256(window * n_seq_max + n_ubatch) cells whose cells are reused once
// out of the window, and give the logits of a full cache (--swa-full) after
// the ring has wrapped; prefix reuse falls back to a full re-decode when the
// window before the prefix is gone, and keeps the prefix when it is there;
// a prefix copied to another sequence (Sequence::copy_prefix) follows the same rule.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/factory/backend_factory.h"
#include "models/model.h"
#include "runtime/context.h"
#include "runtime/generation.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::vector<int32_t> tokens(size_t n) {
  std::mt19937 rng(7);
  std::vector<int32_t> t{2};  // <bos>
  while (t.size() < n) t.push_back(int32_t(300 + rng() % 700));
  return t;
}

// max |a - b| / max |b|. The two caches hold the same keys and values but in other cells, so the
// attention sums run in another lane order: ~1e-5 of the logits' scale; a wrong window or a lost cell
// moves them by orders of magnitude more.
double max_rel_diff(const float* a, const float* b, int64_t n) {
  double m = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(b[i])));
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m / scale;
}

TEST(SlidingWindowCache, SizedLikeLlamaCppAndEqualToAFullCacheAfterWrapping) {
  auto reg = make_registry({}, 2);
  auto model = Model::load(test::golden_model("tiny-gemma3-f32"), *reg);
  ContextParams cp;
  cp.n_ctx = 1024, cp.n_batch = cp.n_ubatch = 16, cp.kv_type = DType::F32;
  Context swa(*model, cp);
  ASSERT_NE(swa.swa_kv_cache(), nullptr);
  EXPECT_EQ(swa.swa_kv_cache()->n_cells(), 256);  // pad256(32 * 1 + 16)
  EXPECT_FALSE(swa.swa_kv_cache()->has_layer(2));
  EXPECT_TRUE(swa.swa_kv_cache()->has_layer(0));
  cp.swa_full = true;
  Context full(*model, cp);
  EXPECT_EQ(full.swa_kv_cache(), nullptr);
  EXPECT_LT(swa.kv_bytes(), full.kv_bytes());

  const std::vector<int32_t> t = tokens(600);  // more than the 256 sliding cells: the ring wraps twice
  Sequence a(swa), b(full);
  a.decode(t);
  b.decode(t);
  const int64_t nv = swa.n_vocab();
  EXPECT_LT(max_rel_diff(swa.logits(0), full.logits(0), nv), 1e-4);

  // Prefix reuse at 100: the sliding cache lost positions 69..99 long ago, so everything is decoded
  // again; the full cache keeps the prefix. Both then agree.
  std::vector<int32_t> p2(t.begin(), t.begin() + 100);
  p2.push_back(5);
  p2.push_back(6);
  EXPECT_FALSE(swa.seq_can_resume(0, 100));
  EXPECT_TRUE(full.seq_can_resume(0, 100));
  EXPECT_EQ(a.reuse_prefix(p2), 0u);
  EXPECT_EQ(b.reuse_prefix(p2), 100u);
  a.decode(std::span<const int32_t>(p2).subspan(a.tokens().size()));
  b.decode(std::span<const int32_t>(p2).subspan(b.tokens().size()));
  EXPECT_LT(max_rel_diff(swa.logits(0), full.logits(0), nv), 1e-4);

  // Right after decoding, the window before the end is still cached: a prefix there is kept.
  std::vector<int32_t> p3(p2.begin(), p2.end() - 1);
  p3.push_back(9);
  EXPECT_TRUE(swa.seq_can_resume(0, int32_t(p2.size() - 1)));
  EXPECT_EQ(a.reuse_prefix(p3), p2.size() - 1);
  EXPECT_GE(swa.seq_pos_min(0), 0);
}

// Sequence::copy_prefix: another sequence gets a prefix's cells (the full cache's, the sliding cache's window
// before its end) and then gives the logits of decoding the whole prompt; a prefix whose window the sliding
// cache lost is refused with nothing changed. The sliding cache frees cells once they are out of the window of
// the donor's own next tokens, so only a prefix close to the donor's end can be copied from it.
TEST(SlidingWindowCache, CopiedPrefixGivesTheLogitsOfAFullDecode) {
  auto reg = make_registry({}, 2);
  auto model = Model::load(test::golden_model("tiny-gemma3-f32"), *reg);
  ContextParams cp;
  cp.n_ctx = 1024, cp.n_batch = cp.n_ubatch = 16, cp.kv_type = DType::F32, cp.n_seq_max = 2;
  Context swa(*model, cp);
  cp.n_seq_max = 1;
  cp.swa_full = true;
  Context full(*model, cp);
  const std::vector<int32_t> t = tokens(100);
  Sequence a(swa, 0), b(swa, 1), ref(full, 0);
  a.decode(t);
  std::vector<int32_t> p(t.begin(), t.begin() + 98);
  p.push_back(5);
  p.push_back(6);
  EXPECT_FALSE(b.copy_prefix(a, 80)) << "the window before 80 left the sliding cache while a was decoded";
  EXPECT_EQ(b.size(), 0);
  ASSERT_TRUE(b.copy_prefix(a, 98));
  EXPECT_EQ(b.size(), 98);
  EXPECT_EQ(b.tokens(), std::vector<int32_t>(t.begin(), t.begin() + 98));
  EXPECT_EQ(swa.seq_pos_max(1), 97);
  b.decode(std::span<const int32_t>(p).subspan(98));
  ref.decode(p);
  EXPECT_LT(max_rel_diff(swa.logits(0), full.logits(0), swa.n_vocab()), 1e-4);
  EXPECT_EQ(a.size(), 100) << "the donor keeps its cells";

  // a goes on past its window: the window before 98 is gone, so copying that prefix is refused.
  a.decode(tokens(400));
  EXPECT_FALSE(swa.seq_can_resume(0, 98));
  EXPECT_FALSE(b.copy_prefix(a, 98));
  EXPECT_EQ(b.size(), 100) << "a refused copy leaves the sequence as it was";
  EXPECT_FALSE(b.copy_prefix(a, 600)) << "more tokens than the donor holds";
}

}  // namespace
}  // namespace opal
