// GGUF container: reader (versions 1, 2 and 3, little-endian) and writer
// (versions 2 and 3). The reader maps the file and never copies tensor data;
// it validates every count, length, dimension, type and offset a hostile file
// could lie about, and every error names the byte offset and the key or tensor.
//
// Rows that are not a whole number of blocks: some 2023 files (e.g. the old
// stories260K Q8_0) cut a tensor into blocks that run across rows. The reader
// accepts a tensor whose *total* element count is a whole number of blocks and
// marks it `flat_blocks`; code that works row by row must not read it directly
// (the model loader dequantizes such tensors to F32 as one flat block stream).
// A tensor whose total is not a whole number of blocks is rejected.
//
// What the reader accepts and rejects, and why, is written up in docs/gguf.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace opal::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* value_type_name(ValueType t);

// Limits on what a file may ask of the reader (see docs/gguf.md).
inline constexpr int kMaxDims = 4;                       // GGML_MAX_DIMS
inline constexpr int kMaxArrayDepth = 8;                 // arrays of arrays of ...
inline constexpr uint64_t kMaxKeyLength = 65535;         // spec: keys are at most 2^16-1 bytes
inline constexpr uint64_t kMaxTensorNameLength = 64;     // spec: names are at most 64 bytes
inline constexpr uint64_t kMaxArrayElements = 1u << 22;  // all metadata arrays together (~6x a 256k vocab)
inline constexpr uint64_t kMaxAlignment = 1u << 30;

// One metadata value. Scalars keep their exact GGUF type so that a file can be
// written back byte for byte.
struct Value {
  ValueType type = ValueType::U32;
  uint64_t u = 0;                       // U8, U16, U32, U64, BOOL; for F32 read from a file, its raw bits
                                        // (so that NaN payloads survive a round trip)
  int64_t i = 0;                        // I8, I16, I32, I64
  double f = 0;                         // F32, F64 (F32 is stored exactly)
  std::string str;                      // STRING
  ValueType elem_type = ValueType::U8;  // ARRAY
  std::vector<Value> array;             // ARRAY (elements, possibly arrays)

  static Value from_u32(uint32_t v) {
    Value x;
    x.type = ValueType::U32;
    x.u = v;
    return x;
  }
  static Value from_u64(uint64_t v) {
    Value x;
    x.type = ValueType::U64;
    x.u = v;
    return x;
  }
  static Value from_i32(int32_t v) {
    Value x;
    x.type = ValueType::I32;
    x.i = v;
    return x;
  }
  static Value from_f32(float v) {
    Value x;
    x.type = ValueType::F32;
    x.f = v;
    return x;
  }
  static Value from_bool(bool v) {
    Value x;
    x.type = ValueType::BOOL;
    x.u = v;
    return x;
  }
  static Value from_string(std::string v) {
    Value x;
    x.type = ValueType::STRING;
    x.str = std::move(v);
    return x;
  }
  static Value from_array(ValueType elem, std::vector<Value> items) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = elem;
    x.array = std::move(items);
    return x;
  }

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == ValueType::F32 || type == ValueType::F64; }
  // Conversions throw opal::Error naming `what` when the type does not fit.
  int64_t as_int(std::string_view what = "value") const;
  double as_float(std::string_view what = "value") const;
  bool as_bool(std::string_view what = "value") const;
  const std::string& as_string(std::string_view what = "value") const;
  std::string to_display(size_t max_items = 8) const;  // short human form
};

struct KeyValue {
  std::string key;
  Value value;
  uint64_t offset = 0;  // byte offset of the key in the file (0 for built ones)
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;  // ne[0] is the fastest-varying (row) dimension
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;
  uint64_t info_offset = 0;  // where its description starts in the file
  bool flat_blocks = false;  // rows are not whole blocks; see the header comment
  const uint8_t* data = nullptr;
  uint32_t part = 0;  // which part of a split model holds the data (File::open_model); 0: the first

  int64_t n_elements() const;
  int64_t n_rows() const { return ne.empty() ? 1 : ne[0] == 0 ? 0 : n_elements() / ne[0]; }
  std::string shape_string() const;  // "[64, 512]"
};

class File {
 public:
  // Opens and validates a file. Throws opal::Error on any problem.
  static File open(const std::string& path, LoadMode mode = LoadMode::Mmap);
  // Parses bytes the caller keeps alive (fuzzing, tests).
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");
  // Opens a model that may be split in parts (llama.cpp's gguf-split:
  // "<stem>-00001-of-0000N.gguf", ..., each part a GGUF file with split.no,
  // split.count and split.tensors.count; the first holds the metadata). Given
  // the first part, the others are opened next to it and their tensors join
  // this File's (TensorInfo::part says which part holds the data). A file
  // without split.count opens as open() does. Throws opal::Error naming a
  // missing or inconsistent part, or a later part given instead of the first.
  static File open_model(const std::string& path, LoadMode mode = LoadMode::Mmap);
  // Every part's mapping, parts()[i] holding the tensors with part i; one for an unsplit file.
  std::vector<std::shared_ptr<MappedFile>> parts() const {
    return parts_.empty() ? std::vector<std::shared_ptr<MappedFile>>{file_} : parts_;
  }

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // end of the header when there are no tensors
  uint64_t file_size() const { return file_->size(); }
  const std::string& path() const { return file_->path(); }
  const std::shared_ptr<MappedFile>& mapped() const { return file_; }

  const std::vector<KeyValue>& kvs() const { return kvs_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: throw if present with an unusable type; return def if absent.
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key, std::string def = "") const;
  // Throw a clear error if absent.
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string require_string(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  friend class Parser;
  std::shared_ptr<MappedFile> file_;
  std::vector<std::shared_ptr<MappedFile>> parts_;  // a split model's parts (file_ first); empty otherwise
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using NameIndex = std::unordered_map<std::string, size_t, NameHash, std::equal_to<>>;
  NameIndex kv_index_, tensor_index_;
};

// Builds a GGUF file (core/gguf_writer.cpp). Tensor data is laid out in the order tensors are added,
// each aligned to general.alignment (default 32) and padded with zeros, as
// ggml's and gguf-py's writers do.
class Writer {
 public:
  explicit Writer(uint32_t version = 3) : version_(version) {}
  void set(std::string key, Value v);  // replaces an existing key in place
  void remove(std::string_view key);
  // Data is copied at write() time; the pointer must stay valid until then.
  // nbytes must be what the type and shape need (checked).
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data, uint64_t nbytes);
  // A tensor whose bytes are made at write() time, some rows at a time:
  // fill(row_begin, row_end, dst) writes rows [row_begin, row_end) (rows of
  // ne[0] elements) to dst. write() calls it with chunks of at most ~16 MiB,
  // in order, so files larger than memory can be streamed.
  using RowFill = std::function<void(int64_t row_begin, int64_t row_end, uint8_t* dst)>;
  void add_tensor_rows(std::string name, DType type, std::vector<int64_t> ne, RowFill fill);
  // Copies all metadata (not tensors) of a file, in order.
  void copy_metadata(const File& f);
  void write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    const void* data;
    uint64_t nbytes;
    RowFill fill;  // set for add_tensor_rows tensors (data is null)
  };
  uint64_t checked_nbytes(const std::string& name, DType type, const std::vector<int64_t>& ne) const;
  uint64_t alignment() const;
  uint32_t version_;
  std::vector<KeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace opal::gguf
