#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/gguf.h"
#include "support/test_support.h"

using namespace opal;

TEST(GgufRead, Stories260KHeader) {
  auto f = gguf::File::open(test::shared_path("models/stories260K.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.kvs().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length", 0), 64);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id", 0), 4294967295LL);
  const auto* t = f.find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(t->type, DType::F32);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array.size(), 512u);
}

TEST(GgufRead, Version1IsReadOnly) {
  auto f = gguf::File::open(test::shared_path("models/tinyllamas-stories-260k-f32.gguf"));
  EXPECT_EQ(f.version(), 1u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.data_offset(), 11456u);
  auto g = gguf::File::open(test::shared_path("models/stories260K.gguf"));
  for (const auto& t : g.tensors()) {
    const auto* u = f.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes);
    EXPECT_EQ(0, std::memcmp(u->data, t.data, t.nbytes)) << t.name;
  }
}

TEST(GgufRead, FlatBlockTensorsAreMarked) {
  auto f = gguf::File::open(test::shared_path("models/tinyllamas-stories-260k-q8_0.gguf"));
  int flat = 0;
  for (const auto& t : f.tensors()) flat += t.flat_blocks;
  EXPECT_EQ(flat, 5);
  EXPECT_TRUE(f.find_tensor("blk.3.ffn_down.weight")->flat_blocks);
  EXPECT_FALSE(f.find_tensor("blk.3.ffn_up.weight")->flat_blocks);
}

TEST(GgufRead, TruncationAnywhereIsAnError) {
  auto orig = test::read_bytes(test::shared_path("models/stories260K.gguf"));
  for (size_t cut :
       {size_t(0), size_t(3), size_t(7), size_t(20), size_t(100), size_t(5000), size_t(14000), orig.size() - 1}) {
    std::span<const uint8_t> part(orig.data(), cut);
    try {
      gguf::File::parse(part, "cut");
      ADD_FAILURE() << "no error at cut " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
    }
  }
}
