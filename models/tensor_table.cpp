#include "models/tensor_table.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/model.h"

namespace opal {
namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += fmt::format("{}{}", i ? ", " : "", s[i]);
  return r + "]";
}
}  // namespace

std::string TensorTable::layer(int64_t il, const char* what, const char* suffix) {
  return fmt::format("blk.{}.{}.{}", il, what, suffix);
}

Tensor* TensorTable::require(const std::string& name, std::vector<int64_t> shape) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (!info) fail("{}: tensor '{}' is missing (expected shape {})", file_.path(), name, shape_str(shape));
  return add(*info, shape);
}

Tensor* TensorTable::optional(const std::string& name, std::vector<int64_t> shape) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  return info ? add(*info, shape) : nullptr;
}

Tensor* TensorTable::add(const gguf::TensorInfo& info, const std::vector<int64_t>& shape) {
  auto it = model_.by_name_.find(info.name);
  if (it != model_.by_name_.end()) return it->second;
  std::vector<int64_t> found = info.ne;
  while (found.size() > 1 && found.back() == 1) found.pop_back();
  std::vector<int64_t> want = shape;
  while (want.size() > 1 && want.back() == 1) want.pop_back();
  if (found != want)
    fail("{}: tensor '{}' has shape {}, expected {}", file_.path(), info.name, shape_str(info.ne), shape_str(shape));
  if (found.size() > size_t(kMaxDims)) fail("{}: tensor '{}' has more than 4 dimensions", file_.path(), info.name);
  Tensor& t = model_.tensors_.emplace_back();
  t.name = info.name;
  t.type = info.flat_blocks ? DType::F32 : info.type;  // flat-block tensors are dequantized at load
  for (size_t i = 0; i < found.size(); ++i) t.ne[i] = found[i];
  t.nb = contiguous_strides(t.type, t.ne);
  t.role = TensorRole::Weight;
  model_.by_name_[t.name] = &t;
  return &t;
}

}  // namespace opal
