// GGUF writer (versions 2 and 3). Layout as the reader expects it (see the
// comment on Parser in core/gguf.cpp): header, KVs in insertion order, tensor
// infos in insertion order, zero padding to general.alignment, then each
// tensor's bytes padded with zeros to the alignment, as gguf-py writes them.
// Reading a v2/v3 file and writing its KVs and tensors back in order gives the
// same bytes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "core/checked.h"
#include "core/error.h"
#include "core/gguf.h"

namespace opal::gguf {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

using Sink = std::function<void(const void*, size_t)>;

void put_u32(const Sink& s, uint32_t v) { s(&v, 4); }
void put_u64(const Sink& s, uint64_t v) { s(&v, 8); }
void put_str(const Sink& s, const std::string& v) {
  put_u64(s, v.size());
  s(v.data(), v.size());
}

void put_value(const Sink& s, const Value& v) {
  switch (v.type) {
    case ValueType::U8: {
      uint8_t x = uint8_t(v.u);
      s(&x, 1);
      break;
    }
    case ValueType::I8: {
      int8_t x = int8_t(v.i);
      s(&x, 1);
      break;
    }
    case ValueType::U16: {
      uint16_t x = uint16_t(v.u);
      s(&x, 2);
      break;
    }
    case ValueType::I16: {
      int16_t x = int16_t(v.i);
      s(&x, 2);
      break;
    }
    case ValueType::U32: put_u32(s, uint32_t(v.u)); break;
    case ValueType::I32: {
      int32_t x = int32_t(v.i);
      s(&x, 4);
      break;
    }
    case ValueType::U64: put_u64(s, v.u); break;
    case ValueType::I64: s(&v.i, 8); break;
    case ValueType::F32: {
      // A value read from a file keeps its raw bits in u: write those when
      // they still describe f (NaN payloads do not survive float->double).
      float x = float(v.f);
      float read;
      const uint32_t bits = uint32_t(v.u);
      std::memcpy(&read, &bits, 4);
      if (std::isnan(x) && std::isnan(read)) x = read;
      s(&x, 4);
      break;
    }
    case ValueType::F64: s(&v.f, 8); break;
    case ValueType::BOOL: {
      uint8_t x = v.u ? 1 : 0;
      s(&x, 1);
      break;
    }
    case ValueType::STRING: put_str(s, v.str); break;
    case ValueType::ARRAY:
      put_u32(s, uint32_t(v.elem_type));
      put_u64(s, v.array.size());
      for (const auto& e : v.array) {
        if (e.type != v.elem_type)
          fail("gguf writer: array element of type {} in an array of {}", value_type_name(e.type),
               value_type_name(v.elem_type));
        put_value(s, e);
      }
      break;
  }
}

void emit(const Sink& s, uint32_t version, const std::vector<KeyValue>& kvs, uint64_t alignment, const auto& tensors) {
  uint64_t pos = 0;
  const Sink counted = [&](const void* p, size_t n) {
    s(p, n);
    pos += n;
  };
  put_u32(counted, kMagic);
  put_u32(counted, version);
  put_u64(counted, tensors.size());
  put_u64(counted, kvs.size());
  for (const auto& kv : kvs) {
    put_str(counted, kv.key);
    put_u32(counted, uint32_t(kv.value.type));
    put_value(counted, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    put_str(counted, t.name);
    put_u32(counted, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put_u64(counted, uint64_t(d));
    put_u32(counted, uint32_t(t.type));
    put_u64(counted, offset);
    offset = align_up(offset + t.nbytes, alignment);
  }
  static const uint8_t zeros[4096] = {};
  auto pad = [&](uint64_t to) {
    while (pos < to) counted(zeros, size_t(std::min<uint64_t>(sizeof zeros, to - pos)));
  };
  if (tensors.empty()) return;  // no data section, no padding (as the shared vocab-only files are written)
  pad(align_up(pos, alignment));
  const uint64_t data_start = pos;
  std::vector<uint8_t> chunk;
  for (const auto& t : tensors) {
    if (t.fill) {
      const int64_t row_elems = t.ne.empty() ? 1 : t.ne[0];
      const uint64_t row_size = row_bytes(t.type, row_elems);
      const int64_t n_rows = row_size ? int64_t(t.nbytes / row_size) : 0;
      const int64_t rows_per_chunk = std::max<int64_t>(1, int64_t((16u << 20) / std::max<uint64_t>(row_size, 1)));
      for (int64_t r = 0; r < n_rows; r += rows_per_chunk) {
        const int64_t e = std::min(n_rows, r + rows_per_chunk);
        chunk.resize(size_t(uint64_t(e - r) * row_size));
        t.fill(r, e, chunk.data());
        counted(chunk.data(), chunk.size());
      }
    } else {
      counted(t.data, t.nbytes);
    }
    pad(data_start + align_up(pos - data_start, alignment));
  }
}
}  // namespace

void Writer::set(std::string key, Value v) {
  if (key.empty() || key.size() > kMaxKeyLength) fail("gguf writer: key must have 1 to {} bytes", kMaxKeyLength);
  for (auto& kv : kvs_)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kvs_.push_back({std::move(key), std::move(v), 0});
}

void Writer::remove(std::string_view key) {
  std::erase_if(kvs_, [&](const KeyValue& kv) { return kv.key == key; });
}

uint64_t Writer::checked_nbytes(const std::string& name, DType type, const std::vector<int64_t>& ne) const {
  for (const auto& t : tensors_)
    if (t.name == name) fail("gguf writer: duplicate tensor name '{}'", name);
  if (name.empty() || name.size() > kMaxTensorNameLength)
    fail("gguf writer: tensor name '{}' must have 1 to {} bytes", name, kMaxTensorNameLength);
  if (ne.size() > size_t(kMaxDims)) fail("gguf writer: tensor '{}' has {} dimensions", name, ne.size());
  uint64_t n = 1;
  for (int64_t d : ne) {
    auto m = d < 0 ? std::nullopt : checked_mul(n, uint64_t(d));
    if (!m || *m > uint64_t(INT64_MAX)) fail("gguf writer: tensor '{}': bad or overflowing shape", name);
    n = *m;
  }
  const auto& tr = dtype_traits(type);
  if (n % uint64_t(tr.block_size) != 0)
    fail("gguf writer: tensor '{}' ({}): {} elements is not a whole number of blocks", name, tr.name, n);
  return n / uint64_t(tr.block_size) * uint64_t(tr.type_size);
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data, uint64_t nbytes) {
  const uint64_t want = checked_nbytes(name, type, ne);
  if (nbytes != want)
    fail("gguf writer: tensor '{}' ({}, {} elements) needs {} bytes, given {}", name, dtype_name(type),
         want / uint64_t(type_size(type)) * uint64_t(block_size(type)), want, nbytes);
  tensors_.push_back({std::move(name), type, std::move(ne), data, nbytes, {}});
}

void Writer::add_tensor_rows(std::string name, DType type, std::vector<int64_t> ne, RowFill fill) {
  const uint64_t nbytes = checked_nbytes(name, type, ne);
  if (!fill) fail("gguf writer: tensor '{}' has no fill function", name);
  if (!ne.empty() && ne[0] % dtype_traits(type).block_size != 0)
    fail("gguf writer: tensor '{}': rows of {} elements are not whole {} blocks", name, ne[0], dtype_name(type));
  tensors_.push_back({std::move(name), type, std::move(ne), nullptr, nbytes, std::move(fill)});
}

void Writer::copy_metadata(const File& f) {
  for (const auto& kv : f.kvs()) set(kv.key, kv.value);
}

uint64_t Writer::alignment() const {
  for (const auto& kv : kvs_)
    if (kv.key == "general.alignment") {
      const int64_t a = kv.value.as_int("gguf writer: general.alignment");
      if (a <= 0 || (a & (a - 1)) != 0 || uint64_t(a) > kMaxAlignment)
        fail("gguf writer: general.alignment {} is not a power of two up to {}", a, kMaxAlignment);
      return uint64_t(a);
    }
  return 32;
}

void Writer::write(const std::string& path) const {
  if (version_ < 2 || version_ > 3) fail("gguf writer: can only write versions 2 and 3, not {}", version_);
  const std::string tmp = path + ".tmp";
  FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = true;
  emit([&](const void* p, size_t n) { ok = ok && std::fwrite(p, 1, n, fp) == n; }, version_, kvs_, alignment(),
       tensors_);
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed", path);
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  if (version_ < 2 || version_ > 3) fail("gguf writer: can only write versions 2 and 3, not {}", version_);
  std::vector<uint8_t> out;
  emit(
      [&](const void* p, size_t n) {
        auto b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
      },
      version_, kvs_, alignment(), tensors_);
  return out;
}

}  // namespace opal::gguf
