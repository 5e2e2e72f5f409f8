#include "backends/test_accel/test_accel.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/error.h"

namespace opal {
namespace {

// "Device memory": bytes the CPU-side code only reaches through read/write.
class TestAccelBuffer : public Buffer {
 public:
  TestAccelBuffer(BufferType& t, uint64_t n) : type_(t), bytes_(n) {}
  BufferType& type() const override { return type_; }
  uint64_t size() const override { return bytes_.size(); }
  void* base() override { return bytes_.data(); }
  void write(uint64_t off, const void* src, uint64_t n) override {
    if (off + n > bytes_.size()) fail("test_accel: write past the end of a buffer");
    if (n) std::memcpy(bytes_.data() + off, src, n);
  }
  void read(uint64_t off, void* dst, uint64_t n) const override {
    if (off + n > bytes_.size()) fail("test_accel: read past the end of a buffer");
    if (n) std::memcpy(dst, bytes_.data() + off, n);
  }

 private:
  BufferType& type_;
  std::vector<uint8_t> bytes_;
};

struct AccelPlan : Plan {
  std::vector<Tensor*> nodes;
  std::vector<float> act;  // rounded activations of the largest node
};

bool accepted_type(DType t) { return t == DType::Q8_0 || t == DType::F16; }

}  // namespace

std::unique_ptr<Buffer> TestAccelBufferType::allocate(uint64_t size) {
  return std::make_unique<TestAccelBuffer>(*this, size);
}

uint64_t TestAccelBufferType::weight_size(const Tensor& t) const { return uint64_t(t.n_elements()) * 4; }

void TestAccelBufferType::upload_weight(Tensor& t, const void* host, Buffer& buf, uint64_t offset) {
  // Transform: dequantize to f32 rows on the way in.
  std::vector<float> rows(size_t(t.n_elements()));
  const uint64_t rb = row_bytes(t.type, t.ne[0]);
  for (int64_t r = 0; r < t.n_rows(); ++r)
    cpu::row_to_f32(t.type, static_cast<const uint8_t*>(host) + uint64_t(r) * rb, rows.data() + r * t.ne[0], t.ne[0]);
  buf.write(offset, rows.data(), rows.size() * 4);
  original_[&t] = t.type;
  t.type = DType::F32;
  t.nb = contiguous_strides(DType::F32, t.ne);
  t.buffer = &buf;
  t.data = static_cast<uint8_t*>(buf.base()) + offset;
  bytes_uploaded_ += rows.size() * 4;
}

DType TestAccelBufferType::original_type(const Tensor& t) const {
  auto it = original_.find(&t);
  return it == original_.end() ? t.type : it->second;
}

Support TestAccelDevice::supports(const Tensor& node) const {
  if (node.op != Op::MulMat) return Support::no(fmt::format("test_accel runs only MUL_MAT, not {}", op_name(node.op)));
  const Tensor* w = node.src[0];
  const Tensor* x = node.src[1];
  const DType wt = buffer_type_.original_type(*w);
  if (!accepted_type(wt))
    return Support::no(fmt::format("weight type {}: test_accel takes q8_0 and f16", dtype_name(wt)));
  if (w->role != TensorRole::Weight) return Support::no("test_accel multiplies by weights only");
  if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return Support::no("test_accel: 2-D only");
  if (x->type != DType::F32 || !x->is_contiguous()) return Support::no("activations must be contiguous f32");
  return Support::yes();
}

std::unique_ptr<Plan> TestAccelExecutor::compile(const Segment& segment) {
  auto p = std::make_unique<AccelPlan>();
  p->nodes = segment.nodes;
  size_t most = 0;
  for (const Tensor* n : segment.nodes) most = std::max(most, size_t(n->src[1]->n_elements()));
  p->act.resize(most);
  ++plans_compiled_;
  return p;
}

void TestAccelExecutor::run(Plan& plan, RunHooks* hooks) {
  auto& p = static_cast<AccelPlan&>(plan);
  for (const Tensor* n : p.nodes) {
    if (hooks) hooks->before_node(dev_, *n);
    const Tensor& w = *n->src[0];
    const Tensor& x = *n->src[1];
    const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
    const DType act = cpu::activation_type_for(dev_.buffers().original_type(w));
    const float* xs = static_cast<const float*>(x.data);
    for (int64_t t = 0; t < T; ++t) cpu::round_activations(act, xs + t * K, p.act.data() + t * K, K);
    const float* ws = static_cast<const float*>(w.data);
    float* out = static_cast<float*>(n->data);
    const DType wt = dev_.buffers().original_type(w);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t t = 0; t < T; ++t)  // the CPU reference's order (matmul_kernels.h)
        out[t * N + r] = cpu::reference_dot(wt, ws + r * K, p.act.data() + t * K, K, T >= 2);
    ++nodes_run_;
    if (hooks) hooks->after_node(dev_, *n, "test_accel");
  }
}

}  // namespace opal
