// Split GGUF models (llama.cpp's gguf-split layout: "<stem>-0000k-of-0000N.gguf",
// split.no / split.count / split.tensors.count, the metadata in the first
// part): the test splits stories260K itself into three parts with the GGUF
// writer; loading the first part loads every tensor from its part and gives
// the unsplit model's logits bit for bit; a missing part, a later part given
// instead of the first and a wrong tensor count are clear errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/model.h"
#include "runtime/context.h"
#include "runtime/generation.h"
#include "support/test_support.h"

namespace opal {
namespace {

gguf::Value u16(uint64_t v) {
  gguf::Value x;
  x.type = gguf::ValueType::U16;
  x.u = v;
  return x;
}

// Writes `src` as n parts <stem>-0000k-of-0000n.gguf (tensors dealt out in order); returns their paths.
std::vector<std::string> write_split(const std::string& src, const std::string& stem, int n,
                                     int64_t tensors_count = -1) {
  const gguf::File f = gguf::File::open(src);
  const auto& ts = f.tensors();
  const size_t per = (ts.size() + size_t(n) - 1) / size_t(n);
  std::vector<std::string> paths;
  for (int k = 0; k < n; ++k) {
    gguf::Writer w;
    if (k == 0) w.copy_metadata(f);
    w.set("split.no", u16(uint64_t(k)));
    w.set("split.count", u16(uint64_t(n)));
    w.set("split.tensors.count", gguf::Value::from_i32(int32_t(tensors_count >= 0 ? tensors_count : ts.size())));
    for (size_t i = size_t(k) * per; i < std::min(ts.size(), size_t(k + 1) * per); ++i)
      w.add_tensor(ts[i].name, ts[i].type, ts[i].ne, ts[i].data, ts[i].nbytes);
    paths.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", stem, k + 1, n));
    w.write(paths.back());
  }
  return paths;
}

std::vector<float> split_prompt_logits(const Model& m) {
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(m, cp);
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378};
  decode_prompt(ctx, toks);
  const float* l = ctx.logits(ctx.n_outputs() - 1);
  return {l, l + ctx.n_vocab()};
}

std::string split_load_error(const std::string& path, Registry& reg) {
  try {
    Model::load(path, reg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SplitModel, LoadsEveryPartAndMatchesTheWholeFile) {
  const std::string src = test::shared_path("models/stories260K.gguf");
  const std::string dir = test::temp_dir() + "/split";
  std::filesystem::create_directories(dir);
  const std::vector<std::string> parts = write_split(src, dir + "/stories", 3);
  auto reg = make_registry({}, 1);
  auto whole = Model::load(src, *reg);
  auto split = Model::load(parts[0], *reg);
  const gguf::File& g = split->gguf();
  EXPECT_EQ(g.parts().size(), 3u);
  EXPECT_EQ(g.tensors().size(), whole->gguf().tensors().size());
  std::set<uint32_t> used;
  for (const auto& t : g.tensors()) used.insert(t.part);
  EXPECT_EQ(used, (std::set<uint32_t>{0, 1, 2}));
  const std::vector<float> a = split_prompt_logits(*whole), b = split_prompt_logits(*split);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // Read mode (not mapped) too.
  LoadOptions read;
  read.load_mode = LoadMode::Read;
  auto split_read = Model::load(parts[0], *reg, read);
  const std::vector<float> c = split_prompt_logits(*split_read);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);

  // A later part given instead of the first.
  EXPECT_NE(split_load_error(parts[1], *reg).find("give its first part"), std::string::npos)
      << split_load_error(parts[1], *reg);
  // A missing part is named.
  std::filesystem::remove(parts[2]);
  const std::string missing = split_load_error(parts[0], *reg);
  EXPECT_NE(missing.find("part 3"), std::string::npos) << missing;
  EXPECT_NE(missing.find(parts[2]), std::string::npos) << missing;
  // A tensor count that does not add up.
  const std::vector<std::string> wrong = write_split(src, dir + "/wrong", 2, 5);
  EXPECT_NE(split_load_error(wrong[0], *reg).find("split.tensors.count"), std::string::npos);
}

}  // namespace
}  // namespace opal
