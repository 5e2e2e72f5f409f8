#include "core/gguf.h"

#include <cstdio>
#include <cstring>
#include <functional>

#include "core/checked.h"
#include "core/error.h"

namespace opal::gguf {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxAlignment = 1u << 20;

// Smallest encoded size of one element of each type (used to reject counts
// that cannot fit in the rest of the file before allocating anything).
uint64_t min_encoded_size(ValueType t, uint32_t version) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return version == 1 ? 4 : 8;
    case ValueType::ARRAY: return 4 + (version == 1 ? 4 : 8);
  }
  return 1;
}
}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

int64_t Value::as_int(std::string_view what) const {
  switch (type) {
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::BOOL:
      return int64_t(u);
    case ValueType::U64:
      if (u > uint64_t(INT64_MAX)) fail("{}: value {} does not fit in int64", what, u);
      return int64_t(u);
    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
      return i;
    default:
      fail("{}: expected an integer, found {}", what, value_type_name(type));
  }
}

double Value::as_float(std::string_view what) const {
  if (type == ValueType::F32 || type == ValueType::F64) return f;
  if (is_integer()) return double(as_int(what));
  fail("{}: expected a number, found {}", what, value_type_name(type));
}

bool Value::as_bool(std::string_view what) const {
  if (type == ValueType::BOOL) return u != 0;
  if (is_integer()) return as_int(what) != 0;
  fail("{}: expected a bool, found {}", what, value_type_name(type));
}

const std::string& Value::as_string(std::string_view what) const {
  if (type != ValueType::STRING) fail("{}: expected a string, found {}", what, value_type_name(type));
  return str;
}

std::string Value::to_display(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      std::string s = str.size() > 80 ? str.substr(0, 77) + "..." : str;
      for (auto& c : s)
        if (c == '\n') c = ' ';
      return "\"" + s + "\"";
    }
    case ValueType::F32: case ValueType::F64: return fmt::format("{:g}", f);
    case ValueType::BOOL: return u ? "true" : "false";
    case ValueType::ARRAY: {
      std::string s = fmt::format("[{} x {}]", array.size(), value_type_name(elem_type));
      if (max_items == 0) return s;
      s += " [";
      for (size_t k = 0; k < array.size() && k < max_items; ++k) s += (k ? ", " : "") + array[k].to_display(0);
      if (array.size() > max_items) s += ", ...";
      return s + "]";
    }
    default:
      return is_integer() && (type == ValueType::U8 || type == ValueType::U16 || type == ValueType::U32 ||
                              type == ValueType::U64)
                 ? fmt::format("{}", u)
                 : fmt::format("{}", i);
  }
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

// Reads the container from a byte range, checking every read against the end.
class Parser {
 public:
  Parser(File& out, const uint8_t* data, uint64_t size, const std::string& name)
      : f_(out), p_(data), size_(size), name_(name) {}

  void run() {
    if (size_ < 8) fail("{}: file is {} bytes, too short for a GGUF header", name_, size_);
    uint32_t magic = u32();
    if (magic != kMagic) {
      if (magic == 0x4c4d4747 || magic == 0x67676a74 || magic == 0x67676d66 || magic == 0x67676d6c)
        fail("{}: byte 0: this is a pre-GGUF ggml/ggjt file, not GGUF", name_);
      fail("{}: byte 0: bad magic 0x{:08x} (expected \"GGUF\")", name_, magic);
    }
    uint32_t version = u32();
    if (version == 0x03000000 || version == 0x02000000)
      fail("{}: byte 4: big-endian GGUF is not supported", name_);
    if (version < 1 || version > 3) fail("{}: byte 4: unsupported GGUF version {}", name_, version);
    f_.version_ = version;
    const uint64_t counts_at = pos_;
    uint64_t n_tensors = count();
    uint64_t n_kv = count();
    // Each KV needs at least a key length and a type; each tensor info at least
    // a name length, n_dims, type and offset.
    const uint64_t len_size = version == 1 ? 4 : 8;
    if (n_kv > remaining() / (len_size + 4))
      fail("{}: byte {}: metadata count {} cannot fit in the file", name_, counts_at, n_kv);
    if (n_tensors > remaining() / (len_size + 4 + 4 + 8))
      fail("{}: byte {}: tensor count {} cannot fit in the file", name_, counts_at, n_tensors);

    f_.kvs_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) {
      KeyValue kv;
      kv.offset = pos_;
      kv.key = str(fmt::format("key of metadata entry {}", k));
      if (kv.key.empty()) fail("{}: byte {}: metadata entry {} has an empty key", name_, kv.offset, k);
      const uint64_t type_at = pos_;
      uint32_t t = u32();
      if (t > uint32_t(ValueType::F64))
        fail("{}: byte {}: key '{}': unknown value type {}", name_, type_at, kv.key, t);
      kv.value = value(ValueType(t), kv.key, 0);
      if (f_.kv_index_.count(kv.key)) fail("{}: byte {}: duplicate key '{}'", name_, kv.offset, kv.key);
      f_.kv_index_.emplace(kv.key, f_.kvs_.size());
      f_.kvs_.push_back(std::move(kv));
    }

    if (const Value* a = f_.find("general.alignment")) {
      const uint64_t at = f_.kvs_[f_.kv_index_.at("general.alignment")].offset;
      if (!a->is_integer()) fail("{}: byte {}: general.alignment must be an integer", name_, at);
      int64_t al = a->as_int("general.alignment");
      if (al <= 0 || (al & (al - 1)) != 0 || uint64_t(al) > kMaxAlignment)
        fail("{}: byte {}: general.alignment {} is not a power of two up to {}", name_, at, al, kMaxAlignment);
      f_.alignment_ = uint64_t(al);
    }

    f_.tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
      TensorInfo t;
      t.info_offset = pos_;
      t.name = str(fmt::format("name of tensor {}", k));
      const uint64_t dims_at = pos_;
      uint32_t n_dims = u32();
      if (n_dims > kMaxDims)
        fail("{}: byte {}: tensor '{}': {} dimensions (at most {})", name_, dims_at, t.name, n_dims, kMaxDims);
      uint64_t n_elem = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t at = pos_;
        uint64_t v = version == 1 ? u32() : u64();
        if (v > uint64_t(INT64_MAX))
          fail("{}: byte {}: tensor '{}': dimension {} is {} (negative or huge)", name_, at, t.name, d, v);
        auto m = checked_mul(n_elem, v);
        if (!m || *m > uint64_t(INT64_MAX))
          fail("{}: byte {}: tensor '{}': element count overflows at dimension {}", name_, at, t.name, d);
        n_elem = *m;
        t.ne.push_back(int64_t(v));
      }
      const uint64_t type_at = pos_;
      uint32_t raw_type = u32();
      const DTypeTraits* tr = dtype_traits_or_null(raw_type);
      if (!tr) fail("{}: byte {}: tensor '{}': unknown tensor type {}", name_, type_at, t.name, raw_type);
      t.type = tr->type;
      const uint64_t off_at = pos_;
      t.offset = u64();
      if (t.offset % f_.alignment_ != 0)
        fail("{}: byte {}: tensor '{}': data offset {} is not a multiple of the alignment {}", name_, off_at, t.name,
             t.offset, f_.alignment_);
      const uint64_t bs = uint64_t(tr->block_size);
      if (n_elem % bs != 0)
        fail("{}: byte {}: tensor '{}' ({}): {} elements is not a whole number of {}-element blocks", name_,
             t.info_offset, t.name, tr->name, n_elem, bs);
      if (!t.ne.empty() && uint64_t(t.ne[0]) % bs != 0) t.flat_blocks = true;
      auto nb = checked_mul(n_elem / bs, uint64_t(tr->type_size));
      if (!nb) fail("{}: byte {}: tensor '{}': byte size overflows", name_, t.info_offset, t.name);
      t.nbytes = *nb;
      if (f_.tensor_index_.count(t.name))
        fail("{}: byte {}: duplicate tensor name '{}'", name_, t.info_offset, t.name);
      f_.tensor_index_.emplace(t.name, f_.tensors_.size());
      f_.tensors_.push_back(std::move(t));
    }

    f_.data_offset_ = align_up(pos_, f_.alignment_);
    if (n_tensors > 0 && f_.data_offset_ > size_)
      fail("{}: byte {}: data section starts past the end of the file ({} bytes)", name_, f_.data_offset_, size_);
    const uint64_t data_size = size_ >= f_.data_offset_ ? size_ - f_.data_offset_ : 0;
    for (auto& t : f_.tensors_) {
      auto end = checked_add(t.offset, t.nbytes);
      if (!end || *end > data_size)
        fail("{}: byte {}: tensor '{}': data [{}, +{}) runs past the end of the file (data section is {} bytes)",
             name_, t.info_offset, t.name, t.offset, t.nbytes, data_size);
      t.data = p_ + f_.data_offset_ + t.offset;
    }
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }
  void need(uint64_t n, std::string_view what) {
    if (n > remaining())
      fail("{}: byte {}: file ends while reading {} ({} bytes needed, {} left)", name_, pos_, what, n, remaining());
  }
  template <typename T>
  T raw(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(std::string_view what = "a u32") { return raw<uint32_t>(what); }
  uint64_t u64(std::string_view what = "a u64") { return raw<uint64_t>(what); }
  uint64_t count() { return f_.version_ == 1 ? u32("a count") : u64("a count"); }
  std::string str(const std::string& what) {
    const uint64_t at = pos_;
    uint64_t n = f_.version_ == 1 ? u32(what) : u64(what);
    if (n > remaining()) fail("{}: byte {}: {}: string length {} runs past the end of the file", name_, at, what, n);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

  Value value(ValueType t, const std::string& key, int depth) {
    Value v;
    v.type = t;
    switch (t) {
      case ValueType::U8: v.u = raw<uint8_t>(key); break;
      case ValueType::I8: v.i = raw<int8_t>(key); break;
      case ValueType::U16: v.u = raw<uint16_t>(key); break;
      case ValueType::I16: v.i = raw<int16_t>(key); break;
      case ValueType::U32: v.u = raw<uint32_t>(key); break;
      case ValueType::I32: v.i = raw<int32_t>(key); break;
      case ValueType::U64: v.u = raw<uint64_t>(key); break;
      case ValueType::I64: v.i = raw<int64_t>(key); break;
      case ValueType::F32: v.f = raw<float>(key); break;
      case ValueType::F64: v.f = raw<double>(key); break;
      case ValueType::BOOL: {
        const uint64_t at = pos_;
        uint8_t b = raw<uint8_t>(key);
        if (b > 1) fail("{}: byte {}: key '{}': bool value {} is not 0 or 1", name_, at, key, b);
        v.u = b;
        break;
      }
      case ValueType::STRING: v.str = str("value of key '" + key + "'"); break;
      case ValueType::ARRAY: {
        const uint64_t at = pos_;
        if (depth >= kMaxArrayDepth)
          fail("{}: byte {}: key '{}': arrays nested deeper than {}", name_, at, key, kMaxArrayDepth);
        uint32_t et = u32(key);
        if (et > uint32_t(ValueType::F64))
          fail("{}: byte {}: key '{}': unknown array element type {}", name_, at, key, et);
        v.elem_type = ValueType(et);
        const uint64_t count_at = pos_;
        uint64_t n = count();
        if (n > remaining() / min_encoded_size(v.elem_type, f_.version_))
          fail("{}: byte {}: key '{}': array of {} {} cannot fit in the rest of the file", name_, count_at, key, n,
               value_type_name(v.elem_type));
        v.array.reserve(n);
        for (uint64_t k = 0; k < n; ++k) v.array.push_back(value(v.elem_type, key, depth + 1));
        break;
      }
    }
    return v;
  }

  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

File File::open(const std::string& path, LoadMode mode) {
  File f;
  f.file_ = MappedFile::open(path, mode);
  Parser(f, f.file_->data(), f.file_->size(), path).run();
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  File f;
  f.file_ = MappedFile::borrow(bytes, std::move(name));
  Parser(f, f.file_->data(), f.file_->size(), f.file_->path()).run();
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t File::get_int(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  return v ? v->as_int(fmt::format("{}: key '{}'", path(), key)) : def;
}
double File::get_float(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? v->as_float(fmt::format("{}: key '{}'", path(), key)) : def;
}
bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  return v ? v->as_bool(fmt::format("{}: key '{}'", path(), key)) : def;
}
std::string File::get_string(std::string_view key, std::string def) const {
  const Value* v = find(key);
  return v ? v->as_string(fmt::format("{}: key '{}'", path(), key)) : def;
}
int64_t File::require_int(std::string_view key) const {
  if (!has(key)) fail("{}: required key '{}' is missing", path(), key);
  return get_int(key, 0);
}
double File::require_float(std::string_view key) const {
  if (!has(key)) fail("{}: required key '{}' is missing", path(), key);
  return get_float(key, 0);
}
std::string File::require_string(std::string_view key) const {
  if (!has(key)) fail("{}: required key '{}' is missing", path(), key);
  return get_string(key);
}

// ---------------------------------------------------------------- writer

namespace {
using Sink = std::function<void(const void*, size_t)>;

void put_u32(const Sink& s, uint32_t v) { s(&v, 4); }
void put_u64(const Sink& s, uint64_t v) { s(&v, 8); }
void put_str(const Sink& s, const std::string& v) {
  put_u64(s, v.size());
  s(v.data(), v.size());
}

void put_value(const Sink& s, const Value& v) {
  switch (v.type) {
    case ValueType::U8: { uint8_t x = uint8_t(v.u); s(&x, 1); break; }
    case ValueType::I8: { int8_t x = int8_t(v.i); s(&x, 1); break; }
    case ValueType::U16: { uint16_t x = uint16_t(v.u); s(&x, 2); break; }
    case ValueType::I16: { int16_t x = int16_t(v.i); s(&x, 2); break; }
    case ValueType::U32: put_u32(s, uint32_t(v.u)); break;
    case ValueType::I32: { int32_t x = int32_t(v.i); s(&x, 4); break; }
    case ValueType::U64: put_u64(s, v.u); break;
    case ValueType::I64: s(&v.i, 8); break;
    case ValueType::F32: { float x = float(v.f); s(&x, 4); break; }
    case ValueType::F64: s(&v.f, 8); break;
    case ValueType::BOOL: { uint8_t x = v.u ? 1 : 0; s(&x, 1); break; }
    case ValueType::STRING: put_str(s, v.str); break;
    case ValueType::ARRAY:
      put_u32(s, uint32_t(v.elem_type));
      put_u64(s, v.array.size());
      for (const auto& e : v.array) {
        if (e.type != v.elem_type) fail("gguf writer: array element of type {} in an array of {}",
                                        value_type_name(e.type), value_type_name(v.elem_type));
        put_value(s, e);
      }
      break;
  }
}

void emit(const Sink& s, uint32_t version, const std::vector<KeyValue>& kvs, uint64_t alignment,
          const auto& tensors) {
  uint64_t pos = 0;
  const Sink counted = [&](const void* p, size_t n) { s(p, n); pos += n; };
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
  pad(align_up(pos, alignment));
  const uint64_t data_start = pos;
  for (const auto& t : tensors) {
    counted(t.data, t.nbytes);
    pad(data_start + align_up(pos - data_start, alignment));
  }
}
}  // namespace

void Writer::set(std::string key, Value v) {
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

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data, uint64_t nbytes) {
  for (const auto& t : tensors_)
    if (t.name == name) fail("gguf writer: duplicate tensor name '{}'", name);
  if (ne.size() > size_t(kMaxDims)) fail("gguf writer: tensor '{}' has {} dimensions", name, ne.size());
  tensors_.push_back({std::move(name), type, std::move(ne), data, nbytes});
}

void Writer::copy_metadata(const File& f) {
  for (const auto& kv : f.kvs()) set(kv.key, kv.value);
}

uint64_t Writer::alignment() const {
  for (const auto& kv : kvs_)
    if (kv.key == "general.alignment") return uint64_t(kv.value.as_int("general.alignment"));
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
  emit([&](const void* p, size_t n) {
         auto b = static_cast<const uint8_t*>(p);
         out.insert(out.end(), b, b + n);
       },
       version_, kvs_, alignment(), tensors_);
  return out;
}

}  // namespace opal::gguf
