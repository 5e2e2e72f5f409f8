// libFuzzer target for the GGUF reader (see docs/fuzzing.md).
//
// Any input must either parse or throw opal::Error: never crash, read out of
// bounds, hang or allocate absurdly. When it parses, the target also checks
// what the reader promises: every tensor's bytes lie inside the input (touched
// so that ASan sees a stray pointer), no two tensors overlap, the metadata can
// be displayed, and writing the file back with gguf::Writer and reading that
// again gives the same metadata and tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>

#include "core/error.h"
#include "core/gguf.h"

namespace {

using namespace opal;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_parse: broken promise: %s\n", what);
    std::abort();
  }
}

bool same_value(const gguf::Value& a, const gguf::Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case gguf::ValueType::STRING: return a.str == b.str;
    case gguf::ValueType::ARRAY:
      if (a.elem_type != b.elem_type || a.array.size() != b.array.size()) return false;
      for (size_t k = 0; k < a.array.size(); ++k)
        if (!same_value(a.array[k], b.array[k])) return false;
      return true;
    case gguf::ValueType::F32: return a.u == b.u;  // raw bits, NaN payloads included
    case gguf::ValueType::F64: return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;
    default: return a.u == b.u && a.i == b.i;
  }
}

void exercise(const gguf::File& f, std::span<const uint8_t> bytes) {
  volatile uint8_t sink = 0;
  for (const auto& kv : f.kvs()) {
    check(f.find(kv.key) == &kv.value, "find() returns each key's value");
    sink = sink + uint8_t(kv.value.to_display(4).size());
  }
  const uint8_t* begin = bytes.data();
  const uint8_t* end = begin + bytes.size();
  for (const auto& t : f.tensors()) {
    check(f.find_tensor(t.name) == &t, "find_tensor() returns each tensor");
    check(t.data >= begin && t.nbytes <= uint64_t(end - t.data), "tensor data inside the file");
    check(uint64_t(t.data - begin) % f.alignment() == 0, "tensor data aligned");
    check(t.n_elements() >= 0 && t.n_rows() >= 0, "sane element counts");
    if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  (void)sink;
}

void round_trip(const gguf::File& f) {
  gguf::Writer w(f.version() == 1 ? 3 : f.version());  // the writer writes versions 2 and 3
  w.copy_metadata(f);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  const std::vector<uint8_t> out = w.to_bytes();
  const gguf::File g = gguf::File::parse(out, "round-trip");
  check(g.kvs().size() == f.kvs().size(), "round trip keeps the key count");
  for (size_t k = 0; k < f.kvs().size(); ++k) {
    check(g.kvs()[k].key == f.kvs()[k].key, "round trip keeps keys in order");
    check(same_value(g.kvs()[k].value, f.kvs()[k].value), "round trip keeps values");
  }
  check(g.tensors().size() == f.tensors().size(), "round trip keeps the tensor count");
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const auto& a = f.tensors()[k];
    const auto& b = g.tensors()[k];
    check(
        a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes && a.flat_blocks == b.flat_blocks,
        "round trip keeps tensor infos");
    check(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0, "round trip keeps tensor data");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  std::optional<gguf::File> f;
  try {
    f = gguf::File::parse(bytes, "fuzz");
  } catch (const opal::Error&) {
    return 0;  // rejecting a bad file with a clear error is the expected outcome
  }
  // From here an exception is a finding: the writer must accept what the reader did.
  exercise(*f, bytes);
  round_trip(*f);
  return 0;
}
