// KV cache sequence operations (llama.cpp's llama_memory_seq_*): remove a
// range, copy a sequence, keep one, shift positions with key re-rotation.
// Each is checked against a plain decode that never used the operation.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::vector<float> kv_last_logits(const Context& ctx) {
  const float* l = ctx.logits(ctx.n_outputs() - 1);
  return {l, l + ctx.n_vocab()};
}

void decode(Context& ctx, const std::vector<int32_t>& toks, int32_t pos0, int32_t seq) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], pos0 + int32_t(i), seq, i + 1 == toks.size());
  ctx.decode(b);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

double stddev(const std::vector<float>& a) {
  double s = 0, s2 = 0;
  for (float v : a) s += v, s2 += double(v) * v;
  const double m = s / double(a.size());
  return std::sqrt(s2 / double(a.size()) - m * m);
}

struct KvOps : ::testing::TestWithParam<std::string> {
  void SetUp() override {
    reg = make_registry({}, 1);
    model = Model::load(test::shared_path(GetParam()), *reg);
    ContextParams cp;
    cp.n_ctx = 64;
    cp.kv_type = DType::F32;
    ctx = std::make_unique<Context>(*model, cp);
    const int64_t nv = ctx->n_vocab();
    for (int i = 0; i < 12; ++i) toks.push_back(int32_t(3 + (i * 37) % (nv - 3)));
  }
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::vector<int32_t> toks;
};

TEST_P(KvOps, RemoveTailThenRedecodeIsIdentical) {
  decode(*ctx, toks, 0, 0);
  const auto want = kv_last_logits(*ctx);
  ctx->seq_rm(0, 5, -1);
  EXPECT_EQ(ctx->seq_pos_max(0), 4);
  EXPECT_EQ(ctx->kv_cache().n_free(), ctx->n_ctx() - 5);
  decode(*ctx, {toks.begin() + 5, toks.end()}, 5, 0);
  EXPECT_EQ(kv_last_logits(*ctx), want);
}

TEST_P(KvOps, CopiedSequenceContinuesLikeTheOriginal) {
  decode(*ctx, toks, 0, 0);
  decode(*ctx, {toks[0]}, int32_t(toks.size()), 0);
  const auto want = kv_last_logits(*ctx);
  ctx->seq_rm(0, int32_t(toks.size()), -1);
  ctx->seq_cp(0, 3, 0, -1);
  EXPECT_EQ(ctx->seq_pos_max(3), int32_t(toks.size()) - 1);
  ctx->seq_keep(3);
  EXPECT_EQ(ctx->seq_pos_max(0), -1);
  decode(*ctx, {toks[0]}, int32_t(toks.size()), 3);
  EXPECT_EQ(kv_last_logits(*ctx), want);
}

// An f16 cache without flash attention (the -fa 0 kernels' lane accumulators over row-major V): a copied
// sequence, read from cells that are not its first ones, and a sequence whose cells alternate with another's
// continue with the bits of the original.
TEST_P(KvOps, F16CacheWithoutFlashCopiesAndInterleavesExactly) {
  ContextParams cp;
  cp.n_ctx = 64;
  cp.kv_type = DType::F16;
  cp.flash_attn = FlashAttn::Off;
  auto fresh = [&] { return std::make_unique<Context>(*model, cp); };
  auto c = fresh();
  decode(*c, toks, 0, 0);
  decode(*c, {toks[0]}, int32_t(toks.size()), 0);
  const auto want = kv_last_logits(*c);
  c->seq_rm(0, int32_t(toks.size()), -1);
  c->seq_cp(0, 3, 0, -1);
  c->seq_keep(3);
  decode(*c, {toks[0]}, int32_t(toks.size()), 3);
  EXPECT_EQ(kv_last_logits(*c), want);
  auto solo = fresh(), mixed = fresh();  // token by token; in `mixed` sequence 0 takes every other cell
  for (size_t i = 0; i <= toks.size(); ++i) {
    const int32_t t = i < toks.size() ? toks[i] : toks[0];
    decode(*solo, {t}, int32_t(i), 0);
    decode(*mixed, {t}, int32_t(i), 0);
    if (i < toks.size()) decode(*mixed, {toks[toks.size() - 1 - i]}, int32_t(i), 1);
  }
  EXPECT_EQ(kv_last_logits(*mixed), kv_last_logits(*solo));
}

TEST_P(KvOps, CopyWithoutRoomIsAClearError) {
  decode(*ctx, toks, 0, 0);
  for (int s = 1; s < 5; ++s) ctx->seq_cp(0, s, 0, -1);  // 60 of 64 cells used
  test::expect_error([&] { ctx->seq_cp(0, 9, 0, -1); }, "context is full");
}

TEST_P(KvOps, ShiftedKeysMatchKeysComputedAtTheNewPositions) {
  decode(*ctx, toks, 0, 0);
  decode(*ctx, {toks[1]}, int32_t(toks.size()), 0);
  const auto want = kv_last_logits(*ctx);

  ctx->reset();
  decode(*ctx, toks, 7, 0);  // the same tokens, 7 positions later
  ctx->seq_add(0, 0, -1, -7);
  EXPECT_EQ(ctx->seq_pos_min(0), 0);
  EXPECT_EQ(ctx->seq_pos_max(0), int32_t(toks.size()) - 1);
  decode(*ctx, {toks[1]}, int32_t(toks.size()), 0);
  const auto got = kv_last_logits(*ctx);
  // Only float rounding of the composed rotation differs.
  EXPECT_LT(max_abs_diff(got, want) / stddev(want), 1e-3);

  // Without the re-rotation (positions moved in the cache metadata only) the
  // result is clearly different.
  ctx->reset();
  decode(*ctx, toks, 7, 0);
  ctx->kv_cache().seq_add(0, 0, -1, -7);
  decode(*ctx, {toks[1]}, int32_t(toks.size()), 0);
  EXPECT_GT(max_abs_diff(kv_last_logits(*ctx), want) / stddev(want), 1e-3);
}

TEST_P(KvOps, ShiftBelowZeroFreesCells) {
  decode(*ctx, toks, 0, 0);
  ctx->seq_add(0, 0, 4, -4);  // positions 0..3 become negative: freed
  EXPECT_EQ(ctx->kv_cache().n_free(), ctx->n_ctx() - int64_t(toks.size()) + 4);
  EXPECT_EQ(ctx->seq_pos_min(0), 4);
}

INSTANTIATE_TEST_SUITE_P(Models, KvOps,
                         ::testing::Values("models/stories260K.gguf", "golden/models/tiny-qwen3-f32.gguf"),
                         [](const auto& info) {
                           return info.param.find("qwen3") != std::string::npos ? std::string("qwen3_neox")
                                                                                : std::string("llama_normal");
                         });

}  // namespace
}  // namespace opal
