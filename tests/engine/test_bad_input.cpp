// Bad input gives a clear opal::Error, never a crash: missing tensor, wrong
// shape, a type an op cannot take, unknown architecture, prompt longer than
// the context, a full context, token ids out of range. Also: reset.
#include <gtest/gtest.h>

#include <vector>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::string base_model() { return test::golden_model("tiny-llama-f32"); }

// Writes a copy of the base model with `edit` applied to the writer-to-be.
// (Members default-initialized with {} so that a designated initializer may name just one.)
struct Edit {
  std::string drop{};     // tensor to leave out
  std::string reshape{};  // tensor to give a wrong shape (drops its last row)
  std::string to_f16{};   // tensor to store as f16
  std::string arch{};     // new general.architecture
};

std::string write_variant(const Edit& e, const std::string& name) {
  gguf::File f = gguf::File::open(base_model());
  gguf::Writer w;
  w.copy_metadata(f);
  std::vector<std::vector<uint16_t>> keep;
  if (!e.arch.empty()) {
    w.set("general.architecture", gguf::Value::from_string(e.arch));
    for (const auto& kv : f.kvs())
      if (kv.key.rfind("llama.", 0) == 0) w.set(e.arch + kv.key.substr(5), kv.value);
  }
  for (const auto& t : f.tensors()) {
    if (t.name == e.drop) continue;
    std::vector<int64_t> ne = t.ne;
    uint64_t nbytes = t.nbytes;
    if (t.name == e.reshape) {
      ne.back() -= 1;
      nbytes = nbytes / uint64_t(t.ne.back()) * uint64_t(ne.back());
    }
    if (t.name == e.to_f16) {
      auto& v = keep.emplace_back(size_t(t.n_elements()));
      const float* src = reinterpret_cast<const float*>(t.data);
      for (size_t i = 0; i < v.size(); ++i) v[i] = f32_to_f16(src[i]);
      w.add_tensor(t.name, DType::F16, ne, v.data(), v.size() * 2);
      continue;
    }
    w.add_tensor(t.name, t.type, ne, t.data, nbytes);
  }
  const std::string path = test::temp_dir() + "/" + name + ".gguf";
  w.write(path);
  return path;
}

std::string load_error(const std::string& path) {
  auto reg = make_registry({}, 1);
  return test::error_of([&] { Model::load(path, *reg); });
}

TEST(BadInput, MissingTensorIsNamed) {
  const std::string msg = load_error(write_variant({.drop = "blk.1.ffn_up.weight"}, "missing"));
  EXPECT_NE(msg.find("'blk.1.ffn_up.weight' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[256, 512]"), std::string::npos) << msg;
}

TEST(BadInput, WrongShapeNamesExpectedAndFound) {
  const std::string msg = load_error(write_variant({.reshape = "blk.0.attn_q.weight"}, "shape"));
  EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[256, 255]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [256, 256]"), std::string::npos) << msg;
}

TEST(BadInput, TypeAnOpCannotTake) {
  const std::string msg = load_error(write_variant({.to_f16 = "blk.0.attn_norm.weight"}, "f16norm"));
  EXPECT_NE(msg.find("not supported by any device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("blk.0.attn_norm.weight"), std::string::npos) << msg;
}

TEST(BadInput, UnknownArchitectureIsNamed) {
  const std::string msg = load_error(write_variant({.arch = "mamba9"}, "arch"));
  EXPECT_NE(msg.find("unknown model architecture 'mamba9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
}

TEST(BadInput, MissingFile) {
  const std::string msg = load_error(test::temp_dir() + "/nope.gguf");
  EXPECT_NE(msg.find("nope.gguf"), std::string::npos) << msg;
}

struct SmallContext : ::testing::Test {
  std::unique_ptr<Registry> reg = make_registry({}, 1);
  std::unique_ptr<Model> model = Model::load(base_model(), *reg);
};

TEST_F(SmallContext, PromptLongerThanContext) {
  ContextParams cp;
  cp.n_ctx = 8;
  Context ctx(*model, cp);
  Batch b;
  for (int i = 0; i < 10; ++i) b.add(i + 1, i, 0, i == 9);
  test::expect_error([&] { ctx.decode(b); }, "n_ctx = 8");
  EXPECT_EQ(ctx.seq_pos_max(0), -1) << "a rejected batch must not touch the cache";
}

TEST_F(SmallContext, FullContextThenReset) {
  ContextParams cp;
  cp.n_ctx = 8;
  Context ctx(*model, cp);
  Batch b;
  for (int i = 0; i < 8; ++i) b.add(i + 1, i, 0, i == 7);
  ctx.decode(b);
  const std::vector<float> first(ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  Batch one;
  one.add(5, 8, 0, true);
  test::expect_error([&] { ctx.decode(one); }, "context is full");
  ctx.reset();
  EXPECT_EQ(ctx.seq_pos_max(0), -1);
  ctx.decode(b);
  const std::vector<float> again(ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  EXPECT_EQ(first, again);
}

TEST_F(SmallContext, TokenIdOutOfRange) {
  ContextParams cp;
  cp.n_ctx = 8;
  Context ctx(*model, cp);
  for (int32_t bad : {-1, 1024, 1 << 30}) {
    Batch b;
    b.add(1, 0, 0, false);
    b.add(bad, 1, 0, true);
    try {
      ctx.decode(b);
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
}

TEST_F(SmallContext, TwoSequencesInOneBatchMatchSeparateRuns) {
  ContextParams cp;
  cp.n_ctx = 16;
  Context ctx(*model, cp);
  const std::vector<int32_t> a = {5, 9, 13}, bb = {7, 2};
  Batch both;
  for (size_t i = 0; i < a.size(); ++i) both.add(a[i], int32_t(i), 0, i + 1 == a.size());
  for (size_t i = 0; i < bb.size(); ++i) both.add(bb[i], int32_t(i), 1, i + 1 == bb.size());
  ctx.decode(both);
  std::vector<float> la(ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  std::vector<float> lb(ctx.logits(1), ctx.logits(1) + ctx.n_vocab());
  for (int s = 0; s < 2; ++s) {
    const auto& toks = s == 0 ? a : bb;
    Context solo(*model, cp);
    Batch b;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], int32_t(i), 0, i + 1 == toks.size());
    solo.decode(b);
    const auto& got = s == 0 ? la : lb;
    for (int64_t i = 0; i < solo.n_vocab(); ++i) EXPECT_NEAR(got[size_t(i)], solo.logits(0)[i], 1e-5) << s;
  }
}

}  // namespace
}  // namespace opal
