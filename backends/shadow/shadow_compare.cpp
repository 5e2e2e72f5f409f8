#include "backends/shadow/shadow_compare.h"

#include <fmt/format.h>

#include <cstring>

#include "backends/cpu/ops/ops.h"
#include "backends/shadow/tolerance.h"

namespace opal {
namespace {

// Copies a tensor's bytes (nbytes() from its data, wherever it lives) to dst.
void read_to_host(const Tensor& t, std::vector<uint8_t>& dst) {
  const uint64_t n = t.nbytes();
  dst.resize(n + 64);
  const Tensor* st = t.storage();
  Buffer* buf = t.buffer ? t.buffer : st->buffer;
  if (!buf || buf->type().host_visible()) {
    if (n) std::memcpy(dst.data(), t.data, n);
    return;
  }
  const uint64_t off = uint64_t(static_cast<const uint8_t*>(t.data) - static_cast<const uint8_t*>(buf->base()));
  buf->read(off, dst.data(), n);
}

}  // namespace

ShadowCompare::ShadowCompare(int n_threads) : pool_(std::make_unique<ThreadPool>(n_threads < 1 ? 1 : n_threads)) {}
ShadowCompare::~ShadowCompare() = default;

void ShadowCompare::after_node(const Device& dev, const Tensor& node, const char* kernel) {
  if (dev.role() == DeviceRole::Host) return;
  if (node.op == Op::View || node.op == Op::None) return;
  if (node.op == Op::KvStore || !cpu::supports(node)) {
    ++skipped_;
    return;
  }
  // Host copies of every source, with the same strides.
  std::array<Tensor, kMaxSrc> srcs{};
  Tensor ref = node;
  src_bytes_.resize(kMaxSrc);
  for (int i = 0; i < kMaxSrc; ++i) {
    if (!node.src[i]) continue;
    read_to_host(*node.src[i], src_bytes_[size_t(i)]);
    srcs[size_t(i)] = *node.src[i];
    srcs[size_t(i)].op = Op::None;
    srcs[size_t(i)].src = {};
    srcs[size_t(i)].role = TensorRole::Input;
    srcs[size_t(i)].buffer = nullptr;
    srcs[size_t(i)].data = src_bytes_[size_t(i)].data();
    ref.src[size_t(i)] = &srcs[size_t(i)];
  }
  out_bytes_.assign(node.nbytes() + 64, 0);
  ref.buffer = nullptr;
  ref.data = out_bytes_.data();
  const uint64_t work = cpu::work_size(ref, pool_->size());
  if (work_.size() < work + 64) work_.resize(work + 64);
  uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(work_.data()) + 63) / 64 * 64);
  cpu::OpContext ctx{*pool_, aligned};
  cpu::compute(ref, ctx);

  // The device's output, read back.
  read_to_host(node, dev_bytes_);
  const int64_t n = node.n_elements();
  out_f32_.resize(size_t(n));
  ref_f32_.resize(size_t(n));
  tensor_to_f32(node, dev_bytes_.data(), out_f32_.data());
  tensor_to_f32(ref, out_bytes_.data(), ref_f32_.data());
  const ErrorStats e = compare_outputs(out_f32_.data(), ref_f32_.data(), n);
  const double tol = max_nmse(node);
  ++compared_;
  if (e.nmse > tol) {
    if (!first_) {
      first_ = std::make_unique<ShadowDivergence>();
      first_->tensor = node.name;
      first_->op = op_name(node.op);
      first_->backend = dev.name();
      first_->kernel = kernel ? kernel : "";
      first_->shape = node.shape_string();
      first_->nmse = e.nmse;
      first_->max_abs = e.max_abs;
      first_->tolerance = tol;
      first_->node_index = compared_ - 1;
    }
  } else if (tol > 0) {
    worst_ratio_ = std::max(worst_ratio_, e.nmse / tol);
  }
}

std::string ShadowCompare::report() const {
  std::string s = fmt::format("shadow: {} node(s) re-run on the CPU reference, {} skipped; ", compared_, skipped_);
  if (!first_) return s + fmt::format("no divergence (worst NMSE at {:.3g} of its tolerance)", worst_ratio_);
  return s + fmt::format("first divergence: '{}' ({} {} on {}, kernel {}): max |err| {:.4g}, NMSE {:.3g} > {:.3g}",
                         first_->tensor, first_->op, first_->shape, first_->backend, first_->kernel, first_->max_abs,
                         first_->nmse, first_->tolerance);
}

}  // namespace opal
