// Every load mode (core/mapped_file.h) gives the same bytes and the same
// logits: the mode changes where the weights live, never what they are.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::vector<float> logits_after(const std::string& path, LoadMode mode, int threads) {
  auto reg = make_registry({}, threads);
  LoadOptions lo;
  lo.load_mode = mode;
  auto model = Model::load(path, *reg, lo);
  EXPECT_EQ(model->gguf().mapped()->mode(), mode);
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(*model, cp);
  Batch b;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 90, 29, 11};
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), 0, true);
  ctx.decode(b);
  std::vector<float> out;
  for (int64_t i = 0; i < ctx.n_outputs(); ++i) out.insert(out.end(), ctx.logits(i), ctx.logits(i) + ctx.n_vocab());
  // Then one decode step, as generation does.
  b.clear();
  b.add(42, int32_t(prompt.size()), 0, true);
  ctx.decode(b);
  out.insert(out.end(), ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  return out;
}

TEST(LoadModes, NamesRoundTrip) {
  for (LoadMode m : all_load_modes()) EXPECT_EQ(load_mode_from_name(load_mode_name(m)), m);
  EXPECT_EQ(load_mode_from_name("none"), LoadMode::Read);   // llama.cpp's -lm none
  EXPECT_EQ(load_mode_from_name("mlock"), LoadMode::Lock);  // llama.cpp's --mlock
  EXPECT_THROW(load_mode_from_name("dio"), Error);
  LoadOptions lo;
  EXPECT_EQ(lo.load_mode, default_load_mode());
}

TEST(LoadModes, SameBytesInEveryMode) {
  const std::string path = test::shared_path("models/stories260K.gguf");
  auto ref = MappedFile::open(path, LoadMode::Mmap);
  ASSERT_GT(ref->size(), 0u);
  for (LoadMode m : all_load_modes()) {
    auto f = MappedFile::open(path, m);
    EXPECT_EQ(f->mode(), m);
    ASSERT_EQ(f->size(), ref->size()) << load_mode_name(m);
    EXPECT_EQ(std::memcmp(f->data(), ref->data(), ref->size()), 0) << load_mode_name(m);
    if (m == LoadMode::Huge) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % (2u << 20), 0u);
    }
  }
}

TEST(LoadModes, MissingFileNamesThePath) {
  for (LoadMode m : all_load_modes()) {
    SCOPED_TRACE(load_mode_name(m));
    test::expect_error([&] { MappedFile::open("/nonexistent/opal-model.gguf", m); }, "/nonexistent/opal-model.gguf");
  }
}

TEST(LoadModes, IdenticalLogitsInEveryMode) {
  const std::string path = test::shared_path("models/stories260K.gguf");
  const auto ref = logits_after(path, LoadMode::Mmap, 1);
  ASSERT_FALSE(ref.empty());
  for (LoadMode m : all_load_modes()) {
    const auto got = logits_after(path, m, 2);
    ASSERT_EQ(got.size(), ref.size()) << load_mode_name(m);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "logits differ in load mode " << load_mode_name(m);
  }
}

}  // namespace
}  // namespace opal
