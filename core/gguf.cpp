#include "core/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/checked.h"
#include "core/error.h"

namespace opal::gguf {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

// Smallest encoded size of one element of each type (used to reject counts
// that cannot fit in the rest of the file before allocating anything).
uint64_t min_encoded_size(ValueType t, uint32_t version) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
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
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64: return true;
    default: return false;
  }
}

int64_t Value::as_int(std::string_view what) const {
  switch (type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::BOOL: return int64_t(u);
    case ValueType::U64:
      if (u > uint64_t(INT64_MAX)) fail("{}: value {} does not fit in int64", what, u);
      return int64_t(u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: return i;
    default: fail("{}: expected an integer, found {}", what, value_type_name(type));
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
    case ValueType::F32:
    case ValueType::F64: return fmt::format("{:g}", f);
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
// Layout (ggml docs/gguf.md): magic "GGUF", u32 version, tensor count, KV count,
// the KVs (string key, u32 type, value), the tensor infos (string name, u32
// n_dims, n_dims dims, u32 type, u64 offset), padding to general.alignment,
// then the data section. Version 1 writes counts, string and array lengths and
// dims as u32; versions 2 and 3 as u64. Nothing is trusted before it is checked:
// every count is compared with the bytes left before anything is allocated.
class Parser {
 public:
  Parser(File& out, const uint8_t* data, uint64_t size, const std::string& name)
      : f_(out), p_(data), size_(size), name_(name) {}

  void run() {
    read_header();
    for (uint64_t k = 0; k < n_kv_; ++k) read_kv(k);
    read_alignment();
    for (uint64_t k = 0; k < n_tensors_; ++k) read_tensor_info(k);
    place_tensor_data();
  }

 private:
  void read_header() {
    if (size_ >= 4) {
      uint32_t magic;
      std::memcpy(&magic, p_, 4);
      if (magic != kMagic) {
        if (magic == 0x4c4d4747 || magic == 0x67676a74 || magic == 0x67676d66 || magic == 0x67676d6c)
          fail("{}: byte 0: bad magic: this is a pre-GGUF ggml/ggjt file, not GGUF", name_);
        fail("{}: byte 0: bad magic 0x{:08x} (expected \"GGUF\")", name_, magic);
      }
    }
    u32({"the magic \"GGUF\""});
    const uint32_t version = u32({"the version"});
    if (version == 0x03000000 || version == 0x02000000 || version == 0x01000000)
      fail("{}: byte 4: version field 0x{:08x} looks big-endian; big-endian GGUF is not supported", name_, version);
    if (version < 1 || version > 3)
      fail("{}: byte 4: unsupported GGUF version {} (1, 2 and 3 are read)", name_, version);
    f_.version_ = version;
    len_size_ = version == 1 ? 4 : 8;
    const uint64_t tensors_at = pos_;
    n_tensors_ = count({"the tensor count"});
    const uint64_t kvs_at = pos_;
    n_kv_ = count({"the metadata count"});
    // Each KV needs at least a key length, one key byte, a type and a 1-byte
    // value; each tensor info at least a name length, n_dims, type and offset.
    if (n_kv_ > remaining() / (len_size_ + 1 + 4 + 1))
      fail("{}: byte {}: metadata count {} cannot fit in the {} bytes left in the file", name_, kvs_at, n_kv_,
           remaining());
    if (n_tensors_ > remaining() / (len_size_ + 4 + 4 + 8))
      fail("{}: byte {}: tensor count {} cannot fit in the {} bytes left in the file", name_, tensors_at, n_tensors_,
           remaining());
  }

  void read_kv(uint64_t k) {
    KeyValue kv;
    kv.offset = pos_;
    kv.key = str({"the key of metadata entry", {}, k}, kMaxKeyLength);
    if (kv.key.empty()) fail("{}: byte {}: metadata entry {} has an empty key", name_, kv.offset, k);
    if (f_.kv_index_.count(kv.key)) fail("{}: byte {}: duplicate key '{}'", name_, kv.offset, kv.key);
    const uint64_t type_at = pos_;
    const uint32_t t = u32({"the value type of key", kv.key});
    if (t > uint32_t(ValueType::F64)) fail("{}: byte {}: key '{}': unknown value type {}", name_, type_at, kv.key, t);
    value(kv.value, ValueType(t), kv.key, 0);
    f_.kv_index_.emplace(kv.key, f_.kvs_.size());
    f_.kvs_.push_back(std::move(kv));
  }

  void read_alignment() {
    auto it = f_.kv_index_.find(std::string_view("general.alignment"));
    if (it == f_.kv_index_.end()) return;
    const KeyValue& kv = f_.kvs_[it->second];
    if (!kv.value.is_integer())
      fail("{}: byte {}: key 'general.alignment': must be an integer, found {}", name_, kv.offset,
           value_type_name(kv.value.type));
    const bool negative = kv.value.i < 0;
    const uint64_t al = negative ? 0
                        : (kv.value.type == ValueType::I8 || kv.value.type == ValueType::I16 ||
                           kv.value.type == ValueType::I32 || kv.value.type == ValueType::I64)
                            ? uint64_t(kv.value.i)
                            : kv.value.u;
    if (al == 0 || (al & (al - 1)) != 0 || al > kMaxAlignment)
      fail("{}: byte {}: key 'general.alignment': {} is not a power of two between 1 and {}", name_, kv.offset,
           kv.value.to_display(), kMaxAlignment);
    f_.alignment_ = al;
  }

  void read_tensor_info(uint64_t k) {
    TensorInfo t;
    t.info_offset = pos_;
    t.name = str({"the name of tensor", {}, k}, kMaxTensorNameLength);
    if (t.name.empty()) fail("{}: byte {}: tensor {} has an empty name", name_, t.info_offset, k);
    if (f_.tensor_index_.count(t.name)) fail("{}: byte {}: duplicate tensor name '{}'", name_, t.info_offset, t.name);
    const uint64_t dims_at = pos_;
    const uint32_t n_dims = u32({"the dimension count of tensor", t.name});
    if (n_dims > uint32_t(kMaxDims))
      fail("{}: byte {}: tensor '{}': {} dimensions (at most {})", name_, dims_at, t.name, n_dims, kMaxDims);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = pos_;
      const uint64_t v =
          f_.version_ == 1 ? u32({"a dimension of tensor", t.name}) : u64({"a dimension of tensor", t.name});
      if (v > uint64_t(INT64_MAX))
        fail("{}: byte {}: tensor '{}': dimension {} is {} (negative as int64; overflows)", name_, at, t.name, d, v);
      auto m = checked_mul(n_elem, v);
      if (!m || *m > uint64_t(INT64_MAX))
        fail("{}: byte {}: tensor '{}': element count overflows int64 at dimension {}", name_, at, t.name, d);
      n_elem = *m;
      t.ne.push_back(int64_t(v));
    }
    const uint64_t type_at = pos_;
    const uint32_t raw_type = u32({"the type of tensor", t.name});
    const DTypeTraits* tr = dtype_traits_or_null(raw_type);
    if (!tr) fail("{}: byte {}: tensor '{}': unknown tensor type {}", name_, type_at, t.name, raw_type);
    t.type = tr->type;
    const uint64_t off_at = pos_;
    t.offset = u64({"the data offset of tensor", t.name});
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
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the
  // tensor infos. Every tensor must lie inside the file and no two may share a
  // byte; they may come in any order and with any gaps.
  void place_tensor_data() {
    // pos_ <= size_ and alignment <= 2^30: no overflow. A file without tensors
    // has no data section and needs no padding (the shared vocab files have none).
    f_.data_offset_ = n_tensors_ > 0 ? align_up(pos_, f_.alignment_) : pos_;
    if (n_tensors_ > 0 && f_.data_offset_ > size_)
      fail("{}: byte {}: data section starts past the end of the file ({} bytes): file is truncated", name_,
           f_.data_offset_, size_);
    const uint64_t data_size = size_ >= f_.data_offset_ ? size_ - f_.data_offset_ : 0;
    for (auto& t : f_.tensors_) {
      auto end = checked_add(t.offset, t.nbytes);
      if (!end || *end > data_size)
        fail(
            "{}: byte {}: tensor '{}': data at offset {} (+{} bytes) runs past the end of the file "
            "(the data section has {} bytes)",
            name_, t.info_offset, t.name, t.offset, t.nbytes, data_size);
      t.data = p_ + f_.data_offset_ + t.offset;
    }
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(f_.tensors_.size());
    for (const auto& t : f_.tensors_)
      if (t.nbytes > 0) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->info_offset < b->info_offset;
    });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const TensorInfo& a = *by_offset[k - 1];
      const TensorInfo& b = *by_offset[k];
      if (a.offset + a.nbytes > b.offset) {
        const TensorInfo& later = a.info_offset > b.info_offset ? a : b;
        fail("{}: byte {}: tensor '{}' (data [{}, {})) and tensor '{}' (data [{}, {})) overlap", name_,
             later.info_offset, b.name, b.offset, b.offset + b.nbytes, a.name, a.offset, a.offset + a.nbytes);
      }
    }
  }

  // What is being read, for error messages; formatted only when one is thrown
  // (a 150k-entry array must not build a string per element).
  struct Label {
    std::string_view text;
    std::string_view quoted = {};
    uint64_t index = UINT64_MAX;
  };
  static std::string describe(const Label& l) {
    std::string s(l.text);
    if (!l.quoted.empty()) s += fmt::format(" '{}'", l.quoted);
    if (l.index != UINT64_MAX) s += fmt::format(" {}", l.index);
    return s;
  }

  uint64_t remaining() const { return size_ - pos_; }
  void need(uint64_t n, const Label& what) {
    if (n > remaining())
      fail("{}: byte {}: file is truncated: it ends while reading {} ({} bytes needed, {} left)", name_, pos_,
           describe(what), n, remaining());
  }
  template <typename T>
  T raw(const Label& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(const Label& what) { return raw<uint32_t>(what); }
  uint64_t u64(const Label& what) { return raw<uint64_t>(what); }
  uint64_t count(const Label& what) { return f_.version_ == 1 ? u32(what) : u64(what); }

  // A GGUF string: length (u32 in v1, u64 after), then that many bytes.
  void str_into(std::string& out, const Label& what, uint64_t max_len) {
    const uint64_t at = pos_;
    const uint64_t n = count(what);
    if (n > max_len)
      fail("{}: byte {}: {}: string length {} exceeds the limit of {} bytes", name_, at, describe(what), n, max_len);
    if (n > remaining())
      fail("{}: byte {}: {}: string length {} runs past the end of the file ({} bytes left; truncated or corrupt)",
           name_, at, describe(what), n, remaining());
    out.assign(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
  }
  std::string str(const Label& what, uint64_t max_len) {
    std::string s;
    str_into(s, what, max_len);
    return s;
  }

  // Parses one value of type t into v (in place: arrays of 150k strings are
  // filled without moving elements around).
  void value(Value& v, ValueType t, const std::string& key, int depth) {
    v.type = t;
    switch (t) {
      case ValueType::U8: v.u = raw<uint8_t>(Label{"the value of key", key}); break;
      case ValueType::I8: v.i = raw<int8_t>(Label{"the value of key", key}); break;
      case ValueType::U16: v.u = raw<uint16_t>(Label{"the value of key", key}); break;
      case ValueType::I16: v.i = raw<int16_t>(Label{"the value of key", key}); break;
      case ValueType::U32: v.u = raw<uint32_t>(Label{"the value of key", key}); break;
      case ValueType::I32: v.i = raw<int32_t>(Label{"the value of key", key}); break;
      case ValueType::U64: v.u = raw<uint64_t>(Label{"the value of key", key}); break;
      case ValueType::I64: v.i = raw<int64_t>(Label{"the value of key", key}); break;
      case ValueType::F32: {
        const uint32_t bits = raw<uint32_t>(Label{"the value of key", key});
        float x;
        std::memcpy(&x, &bits, 4);
        v.f = x;
        v.u = bits;
        break;
      }
      case ValueType::F64: v.f = raw<double>(Label{"the value of key", key}); break;
      case ValueType::BOOL: {
        const uint64_t at = pos_;
        const uint8_t b = raw<uint8_t>(Label{"the value of key", key});
        if (b > 1) fail("{}: byte {}: key '{}': bool value {} is not 0 or 1", name_, at, key, b);
        v.u = b;
        break;
      }
      case ValueType::STRING: str_into(v.str, Label{"the value of key", key}, UINT64_MAX); break;
      case ValueType::ARRAY: array(v, key, depth); break;
    }
  }

  void array(Value& v, const std::string& key, int depth) {
    const uint64_t at = pos_;
    if (depth >= kMaxArrayDepth)
      fail("{}: byte {}: key '{}': arrays nested deeper than {} levels", name_, at, key, kMaxArrayDepth);
    const uint32_t et = u32({"the element type of array key", key});
    if (et > uint32_t(ValueType::F64))
      fail("{}: byte {}: key '{}': unknown value type {} for array elements", name_, at, key, et);
    v.elem_type = ValueType(et);
    const uint64_t count_at = pos_;
    const uint64_t n = count({"the element count of array key", key});
    if (n > remaining() / min_encoded_size(v.elem_type, f_.version_))
      fail("{}: byte {}: key '{}': array of {} {} cannot fit in the {} bytes left in the file", name_, count_at, key, n,
           value_type_name(v.elem_type), remaining());
    if (n > kMaxArrayElements - array_elements_)
      fail(
          "{}: byte {}: key '{}': array of {} elements takes the file past the limit of {} metadata array elements "
          "in all",
          name_, count_at, key, n, kMaxArrayElements);
    array_elements_ += n;
    v.array.resize(n);
    const Label what{"an element of array key", key};
    switch (v.elem_type) {
      case ValueType::STRING:
        for (auto& e : v.array) {
          e.type = ValueType::STRING;
          str_into(e.str, what, UINT64_MAX);
        }
        break;
      case ValueType::ARRAY:
        for (auto& e : v.array) value(e, ValueType::ARRAY, key, depth + 1);
        break;
      default:
        for (auto& e : v.array) value(e, v.elem_type, key, depth + 1);
        break;
    }
  }

  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
  uint64_t len_size_ = 8;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  uint64_t array_elements_ = 0;
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

File File::open_model(const std::string& path, LoadMode mode) {
  File f = open(path, mode);
  const int64_t count = f.get_int("split.count", 0);
  if (count <= 1) return f;
  const int64_t no = f.get_int("split.no", 0);
  const std::string suffix = fmt::format("-{:05d}-of-{:05d}.gguf", 1, count);
  if (no != 0)
    fail("{}: this is part {} of a split model of {} parts: give its first part, <stem>{}", path, no + 1, count,
         suffix);
  if (count > 9999) fail("{}: split.count {} is not a number of parts llama.cpp writes (at most 9999)", path, count);
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    fail("{}: the first part of a split model of {} parts must be named <stem>{}", path, count, suffix);
  const std::string stem = path.substr(0, path.size() - suffix.size());
  f.parts_.push_back(f.file_);
  for (int64_t k = 1; k < count; ++k) {
    const std::string part_path = fmt::format("{}-{:05d}-of-{:05d}.gguf", stem, k + 1, count);
    std::error_code ec;
    if (!std::filesystem::exists(part_path, ec))
      fail("{}: part {} of this split model's {} is missing: {}", path, k + 1, count, part_path);
    File p = open(part_path, mode);
    if (p.get_int("split.no", -1) != k || p.get_int("split.count", -1) != count)
      fail("{}: split.no {} / split.count {} where part {} of {} was expected", part_path, p.get_int("split.no", -1),
           p.get_int("split.count", -1), k + 1, count);
    for (TensorInfo& t : p.tensors_) {
      if (f.tensor_index_.count(t.name))
        fail("{}: tensor '{}' is also in an earlier part of the split model", part_path, t.name);
      t.part = uint32_t(k);
      f.tensor_index_.emplace(t.name, f.tensors_.size());
      f.tensors_.push_back(std::move(t));
    }
    f.parts_.push_back(p.file_);
  }
  const int64_t total = f.get_int("split.tensors.count", -1);
  if (total >= 0 && uint64_t(total) != f.tensors_.size())
    fail("{}: split.tensors.count says {} tensors but the {} parts hold {}", path, total, count, f.tensors_.size());
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
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

}  // namespace opal::gguf
