// gguf::Writer::add_tensor_rows (streamed tensors, used by `opal synth`):
// the file equals the one add_tensor writes from the same bytes, rows come in
// order in chunks that cover each tensor once, and bad shapes are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/gguf.h"

namespace opal::gguf {
namespace {

TEST(GgufWriterRows, SameBytesAsAddTensor) {
  // A tensor big enough to need several 16 MiB chunks, and a small quantized one.
  const int64_t ne0 = 1024, rows = 5000;  // 20 MB of f32
  std::vector<float> big(size_t(ne0 * rows));
  std::iota(big.begin(), big.end(), 0.0f);
  std::vector<uint8_t> q8(34 * 4 * 3);  // 3 rows of 128 Q8_0 values
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = uint8_t(i * 7);

  Writer a;
  a.set("general.architecture", Value::from_string("test"));
  a.add_tensor("big", DType::F32, {ne0, rows}, big.data(), big.size() * 4);
  a.add_tensor("q8", DType::Q8_0, {128, 3}, q8.data(), q8.size());

  Writer b;
  b.set("general.architecture", Value::from_string("test"));
  std::vector<std::pair<int64_t, int64_t>> calls;
  b.add_tensor_rows("big", DType::F32, {ne0, rows}, [&](int64_t r0, int64_t r1, uint8_t* dst) {
    calls.push_back({r0, r1});
    std::memcpy(dst, big.data() + r0 * ne0, size_t((r1 - r0) * ne0 * 4));
  });
  b.add_tensor_rows("q8", DType::Q8_0, {128, 3}, [&](int64_t r0, int64_t r1, uint8_t* dst) {
    std::memcpy(dst, q8.data() + r0 * 136, size_t((r1 - r0) * 136));
  });
  EXPECT_EQ(a.to_bytes(), b.to_bytes());
  // Chunks: in order, contiguous, covering all rows, at most 16 MiB each, more than one.
  ASSERT_GT(calls.size(), 1u);
  int64_t next = 0;
  for (auto [r0, r1] : calls) {
    EXPECT_EQ(r0, next);
    EXPECT_GT(r1, r0);
    EXPECT_LE((r1 - r0) * ne0 * 4, int64_t(16) << 20);
    next = r1;
  }
  EXPECT_EQ(next, rows);
}

TEST(GgufWriterRows, RejectsBadTensors) {
  Writer w;
  auto fill = [](int64_t, int64_t, uint8_t*) {};
  EXPECT_THROW(w.add_tensor_rows("q", DType::Q8_0, {100, 2}, fill), Error);  // rows not whole blocks
  EXPECT_THROW(w.add_tensor_rows("n", DType::F32, {4}, nullptr), Error);     // no fill
  w.add_tensor_rows("t", DType::F32, {4}, fill);
  EXPECT_THROW(w.add_tensor_rows("t", DType::F32, {4}, fill), Error);  // duplicate name
}

}  // namespace
}  // namespace opal::gguf
