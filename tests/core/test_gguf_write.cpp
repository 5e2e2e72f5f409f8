// GGUF files built in memory: every value type, nested arrays, alignments,
// versions, tensor layouts the reader must accept, and byte-identical round
// trips of every shared v2/v3 GGUF.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/gguf.h"
#include "support/test_support.h"

using namespace opal;
using gguf::Value;
using gguf::ValueType;

namespace {

Value scalar(ValueType t, uint64_t u, int64_t i = 0) {
  Value v;
  v.type = t;
  v.u = u;
  v.i = i;
  return v;
}
Value f64(double d) {
  Value v;
  v.type = ValueType::F64;
  v.f = d;
  return v;
}

// Appends little-endian fields, for files the writer would never produce.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s, bool v1 = false) {
    if (v1) put<uint32_t>(uint32_t(s.size()));
    else put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  Bytes& pad_to(size_t a) { return zeros((a - b.size() % a) % a); }
};

// A v3 file with one u32 key and the given tensor infos (name, ne, type, offset)
// followed by `data_bytes` bytes of data.
std::vector<uint8_t> hand_built(
    const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t, uint64_t>>& ts, size_t data_bytes) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(ts.size()).put<uint64_t>(1);
  x.str("general.alignment").put<uint32_t>(4).put<uint32_t>(32);
  for (const auto& [name, ne, type, off] : ts) {
    x.str(name).put<uint32_t>(uint32_t(ne.size()));
    for (uint64_t d : ne) x.put<uint64_t>(d);
    x.put<uint32_t>(type).put<uint64_t>(off);
  }
  x.pad_to(32);
  for (size_t k = 0; k < data_bytes; ++k) x.put<uint8_t>(uint8_t(k * 7));
  return x.b;
}

std::string error_of(std::span<const uint8_t> bytes) {
  return opal::test::error_of([&] { gguf::File::parse(bytes, "mem"); });
}

}  // namespace

TEST(GgufWrite, EveryValueTypeReadsBackExactly) {
  gguf::Writer w;
  w.set("t.u8", scalar(ValueType::U8, 255));
  w.set("t.i8", scalar(ValueType::I8, 0, -128));
  w.set("t.u16", scalar(ValueType::U16, 65535));
  w.set("t.i16", scalar(ValueType::I16, 0, -32768));
  w.set("t.u32", Value::from_u32(4294967295u));
  w.set("t.i32", Value::from_i32(std::numeric_limits<int32_t>::min()));
  w.set("t.u64", Value::from_u64(std::numeric_limits<uint64_t>::max()));
  w.set("t.i64", scalar(ValueType::I64, 0, std::numeric_limits<int64_t>::min()));
  w.set("t.f32", Value::from_f32(-0.0f));
  w.set("t.f32inf", Value::from_f32(std::numeric_limits<float>::infinity()));
  w.set("t.f64", f64(1.0 / 3.0));
  w.set("t.bool", Value::from_bool(true));
  w.set("t.string", Value::from_string(std::string("a\0b\xc3\xa9\n", 6)));
  w.set("t.empty_string", Value::from_string(""));
  w.set("t.arr_u8", Value::from_array(ValueType::U8, {scalar(ValueType::U8, 0), scalar(ValueType::U8, 200)}));
  w.set("t.arr_i16", Value::from_array(ValueType::I16, {scalar(ValueType::I16, 0, -5)}));
  w.set("t.arr_f32", Value::from_array(ValueType::F32, {Value::from_f32(1.5f), Value::from_f32(-2.25f)}));
  w.set("t.arr_f64", Value::from_array(ValueType::F64, {f64(1e300)}));
  w.set("t.arr_bool", Value::from_array(ValueType::BOOL, {Value::from_bool(false), Value::from_bool(true)}));
  w.set("t.arr_str", Value::from_array(ValueType::STRING, {Value::from_string("x"), Value::from_string(""),
                                                           Value::from_string(std::string(300, 'y'))}));
  w.set("t.arr_empty", Value::from_array(ValueType::I64, {}));
  // [[[1, 2], []], [[3]]]: arrays of arrays of arrays of u32.
  auto u32s = [](std::vector<uint32_t> xs) {
    std::vector<Value> v;
    for (auto x : xs) v.push_back(Value::from_u32(x));
    return Value::from_array(ValueType::U32, v);
  };
  w.set("t.nested", Value::from_array(ValueType::ARRAY, {Value::from_array(ValueType::ARRAY, {u32s({1, 2}), u32s({})}),
                                                         Value::from_array(ValueType::ARRAY, {u32s({3})})}));
  const auto bytes = w.to_bytes();
  const auto f = gguf::File::parse(bytes, "mem");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.kvs().size(), 22u);
  EXPECT_EQ(f.find("t.u8")->type, ValueType::U8);
  EXPECT_EQ(f.get_int("t.u8", 0), 255);
  EXPECT_EQ(f.get_int("t.i8", 0), -128);
  EXPECT_EQ(f.get_int("t.u16", 0), 65535);
  EXPECT_EQ(f.get_int("t.i16", 0), -32768);
  EXPECT_EQ(f.get_int("t.u32", 0), 4294967295LL);
  EXPECT_EQ(f.get_int("t.i32", 0), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.find("t.u64")->u, std::numeric_limits<uint64_t>::max());
  EXPECT_THROW(f.get_int("t.u64", 0), Error);  // does not fit in int64
  EXPECT_EQ(f.get_int("t.i64", 0), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(std::signbit(f.get_float("t.f32", 1)));
  EXPECT_EQ(f.get_float("t.f32", 1), 0.0);
  EXPECT_TRUE(std::isinf(f.get_float("t.f32inf", 0)));
  EXPECT_EQ(f.get_float("t.f64", 0), 1.0 / 3.0);
  EXPECT_TRUE(f.get_bool("t.bool", false));
  EXPECT_EQ(f.get_string("t.string"), std::string("a\0b\xc3\xa9\n", 6));
  EXPECT_EQ(f.get_string("t.empty_string", "x"), "");
  EXPECT_EQ(f.find("t.arr_u8")->elem_type, ValueType::U8);
  EXPECT_EQ(f.find("t.arr_u8")->array.at(1).u, 200u);
  EXPECT_EQ(f.find("t.arr_i16")->array.at(0).i, -5);
  EXPECT_EQ(f.find("t.arr_f32")->array.at(1).f, -2.25);
  EXPECT_EQ(f.find("t.arr_f64")->array.at(0).f, 1e300);
  EXPECT_EQ(f.find("t.arr_bool")->array.at(1).u, 1u);
  EXPECT_EQ(f.find("t.arr_str")->array.at(2).str, std::string(300, 'y'));
  EXPECT_EQ(f.find("t.arr_str")->array.at(1).str, "");
  EXPECT_TRUE(f.find("t.arr_empty")->array.empty());
  EXPECT_EQ(f.find("t.arr_empty")->elem_type, ValueType::I64);
  const Value& nested = *f.find("t.nested");
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].elem_type, ValueType::ARRAY);
  EXPECT_EQ(nested.array[0].array[0].array[1].u, 2u);
  EXPECT_TRUE(nested.array[0].array[1].array.empty());
  EXPECT_EQ(nested.array[1].array[0].array[0].u, 3u);
  EXPECT_EQ(f.data_offset(), bytes.size());  // no tensors: no data section, no padding
  // Writing what was read gives the same bytes again.
  gguf::Writer w2;
  w2.copy_metadata(f);
  EXPECT_TRUE(w2.to_bytes() == bytes);
}

TEST(GgufWrite, NanPayloadOfF32SurvivesARoundTrip) {
  const uint32_t quiet_payload = 0x7fc01234u, signalling = 0x7f800001u;
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(2);
  x.str("a").put<uint32_t>(6).put<uint32_t>(quiet_payload);
  x.str("b").put<uint32_t>(6).put<uint32_t>(signalling);
  const auto f = gguf::File::parse(x.b, "mem");
  EXPECT_TRUE(std::isnan(f.get_float("a", 0)));
  gguf::Writer w;
  w.copy_metadata(f);
  EXPECT_TRUE(w.to_bytes() == x.b);
}

TEST(GgufWrite, TensorDataFollowsEveryAlignment) {
  const std::vector<uint8_t> q8(34 * 3, 0x5a);                                  // 3 Q8_0 blocks
  const std::vector<float> odd = {1, 2, 3};                                     // 12 bytes
  const std::vector<uint16_t> half = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500};  // F16, 10 bytes
  for (uint32_t al : {1u, 2u, 8u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(al);
    gguf::Writer w(al == 8 ? 2 : 3);
    w.set("general.alignment", Value::from_u32(al));
    w.add_tensor("odd", DType::F32, {3}, odd.data(), 12);
    w.add_tensor("q", DType::Q8_0, {32, 3}, q8.data(), q8.size());
    w.add_tensor("half", DType::F16, {5, 1}, half.data(), 10);
    const auto bytes = w.to_bytes();
    const auto f = gguf::File::parse(bytes, "mem");
    EXPECT_EQ(f.version(), al == 8 ? 2u : 3u);
    EXPECT_EQ(f.alignment(), al);
    EXPECT_EQ(f.data_offset() % al, 0u);
    ASSERT_EQ(f.tensors().size(), 3u);
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.offset % al, 0u) << t.name;
      EXPECT_EQ(uint64_t(t.data - bytes.data()), f.data_offset() + t.offset);
    }
    EXPECT_EQ(f.find_tensor("odd")->offset, 0u);
    EXPECT_EQ(f.find_tensor("q")->offset, (12 + al - 1) / al * al);
    EXPECT_EQ(std::memcmp(f.find_tensor("q")->data, q8.data(), q8.size()), 0);
    EXPECT_EQ(std::memcmp(f.find_tensor("half")->data, half.data(), 10), 0);
    EXPECT_EQ(f.find_tensor("half")->ne, (std::vector<int64_t>{5, 1}));
    EXPECT_EQ(f.find_tensor("q")->n_rows(), 3);
    // The file ends at the last tensor's padded end.
    EXPECT_EQ(bytes.size(), f.data_offset() + (f.find_tensor("half")->offset + 10 + al - 1) / al * al);
  }
}

TEST(GgufWrite, WriterRefusesWhatItCannotWriteFaithfully) {
  const std::vector<uint8_t> data(64);
  gguf::Writer w;
  EXPECT_THROW(w.add_tensor("x", DType::F32, {4}, data.data(), 20), Error);    // 4 floats are 16 bytes
  EXPECT_THROW(w.add_tensor("x", DType::Q4_0, {31}, data.data(), 18), Error);  // not whole blocks
  EXPECT_THROW(w.add_tensor(std::string(65, 'n'), DType::F32, {1}, data.data(), 4), Error);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {1, 1, 1, 1, 1}, data.data(), 4), Error);
  w.add_tensor("x", DType::F32, {4}, data.data(), 16);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {4}, data.data(), 16), Error);  // duplicate
  w.set("general.alignment", Value::from_u32(48));
  EXPECT_THROW(w.to_bytes(), Error);
  w.set("general.alignment", Value::from_u32(16));
  w.set("bad", Value::from_array(ValueType::U32, {Value::from_u32(1), Value::from_i32(2)}));
  EXPECT_THROW(w.to_bytes(), Error);  // mixed element types
  w.remove("bad");
  EXPECT_NO_THROW(w.to_bytes());
  EXPECT_THROW(gguf::Writer(1).to_bytes(), Error);
}

TEST(GgufRead, TensorsMayComeInAnyOrderWithGaps) {
  // "b" is stored before "a", with a 32-byte gap between them.
  const auto bytes = hand_built({{"a", {8}, 0, 64}, {"b", {4}, 0, 0}}, 96);
  const auto f = gguf::File::parse(bytes, "mem");
  EXPECT_EQ(f.find_tensor("a")->offset, 64u);
  EXPECT_EQ(f.find_tensor("a")->data[0], uint8_t(64 * 7));
}

TEST(GgufRead, OverlapIsRejectedWhateverTheOrder) {
  auto msg = error_of(hand_built({{"a", {16}, 0, 32}, {"b", {16}, 0, 0}}, 96));
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  // Same offset twice.
  msg = error_of(hand_built({{"a", {8}, 0, 0}, {"b", {8}, 0, 0}}, 64));
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  // Touching is fine.
  EXPECT_EQ(error_of(hand_built({{"a", {8}, 0, 0}, {"b", {8}, 0, 32}}, 64)), "");
}

TEST(GgufRead, EmptyAndScalarTensors) {
  const auto bytes = hand_built({{"empty", {0, 5}, 8, 0}, {"scalar", {}, 0, 0}}, 32);
  const auto f = gguf::File::parse(bytes, "mem");
  EXPECT_EQ(f.find_tensor("empty")->nbytes, 0u);
  EXPECT_EQ(f.find_tensor("empty")->n_rows(), 0);
  EXPECT_EQ(f.find_tensor("scalar")->n_elements(), 1);
  EXPECT_EQ(f.find_tensor("scalar")->nbytes, 4u);
}

TEST(GgufRead, FlatBlocksAreAcceptedAndPartialBlocksRejected) {
  // Q8_0 [48, 2]: rows of 48 are not whole 32-element blocks, but 96 elements are 3 blocks.
  auto f = gguf::File::parse(hand_built({{"w", {48, 2}, 8, 0}}, 3 * 34), "mem");
  EXPECT_TRUE(f.find_tensor("w")->flat_blocks);
  EXPECT_EQ(f.find_tensor("w")->nbytes, 3u * 34);
  auto g = gguf::File::parse(hand_built({{"w", {64, 2}, 8, 0}}, 4 * 34), "mem");
  EXPECT_FALSE(g.find_tensor("w")->flat_blocks);
  const auto msg = error_of(hand_built({{"w", {40, 2}, 8, 0}}, 3 * 34));
  EXPECT_NE(msg.find("whole number of 32-element blocks"), std::string::npos) << msg;
}

TEST(GgufRead, Version1UsesU32Counts) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(1).put<uint32_t>(1).put<uint32_t>(2);
  x.str("general.name", true).put<uint32_t>(8).str("v1 file", true);
  x.str("tok", true).put<uint32_t>(9).put<uint32_t>(8).put<uint32_t>(2).str("a", true).str("bc", true);
  x.str("w", true).put<uint32_t>(2).put<uint32_t>(2).put<uint32_t>(3).put<uint32_t>(0).put<uint64_t>(0);
  x.pad_to(32);
  for (int k = 0; k < 6; ++k) x.put<float>(float(k));
  const auto f = gguf::File::parse(x.b, "v1");
  EXPECT_EQ(f.version(), 1u);
  EXPECT_EQ(f.get_string("general.name"), "v1 file");
  EXPECT_EQ(f.find("tok")->array.at(1).str, "bc");
  EXPECT_EQ(f.find_tensor("w")->ne, (std::vector<int64_t>{2, 3}));
  float last;
  std::memcpy(&last, f.find_tensor("w")->data + 20, 4);
  EXPECT_EQ(last, 5.0f);
}

TEST(GgufRead, MetadataArrayBudgetStopsHugeAllocations) {
  // One u8 array with one element more than the budget, honestly backed by bytes.
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  x.str("big").put<uint32_t>(9).put<uint32_t>(0).put<uint64_t>(gguf::kMaxArrayElements + 1);
  x.zeros(gguf::kMaxArrayElements + 1);
  const auto msg = error_of(x.b);
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'big'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 43"), std::string::npos) << msg;
}

TEST(GgufWrite, EverySharedV2V3FileRoundTripsByteForByte) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::shared_dir())) {
    if (e.path().extension() != ".gguf") continue;
    const std::string path = e.path().string();
    SCOPED_TRACE(path);
    const auto f = gguf::File::open(path);
    if (f.version() == 1) continue;  // the writer writes v2/v3 only
    gguf::Writer w(f.version());
    w.copy_metadata(f);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    const auto bytes = w.to_bytes();
    const auto orig = test::read_bytes(path);
    ASSERT_EQ(bytes.size(), orig.size());
    EXPECT_TRUE(bytes == orig);
    ++n;
  }
  EXPECT_GE(n, 35);  // 4 models (1 is v1), 22 golden models, 14 vocabularies
}
