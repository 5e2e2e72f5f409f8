#include "backends/cpu/cpu_device.h"

#include <fmt/format.h>

#include <thread>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"

namespace opal {
namespace {

struct CpuPlan : Plan {
  std::vector<Tensor*> nodes;
  std::vector<uint8_t*> unused;
  uint8_t* work = nullptr;
  uint64_t work_bytes = 0;
  int n_threads = 1;
  ~CpuPlan() override { std::free(work); }
};

int default_threads(int n) {
  if (n > 0) return n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? int(hw) : 1;
}

}  // namespace

CpuExecutor::CpuExecutor(const Device& dev, int n_threads)
    : dev_(dev), pool_(std::make_unique<ThreadPool>(default_threads(n_threads))) {}

void CpuExecutor::set_threads(int n) {
  n = default_threads(n);
  if (n != pool_->n_threads()) pool_ = std::make_unique<ThreadPool>(n);
}

std::unique_ptr<Plan> CpuExecutor::compile(const Segment& segment) {
  auto plan = std::make_unique<CpuPlan>();
  plan->nodes = segment.nodes;
  plan->n_threads = pool_->size();
  for (const Tensor* n : segment.nodes) plan->work_bytes = std::max(plan->work_bytes, cpu::work_size(*n, plan->n_threads));
  if (plan->work_bytes) {
    plan->work = static_cast<uint8_t*>(std::aligned_alloc(64, (plan->work_bytes + 63) / 64 * 64));
    if (!plan->work) throw std::bad_alloc();
  }
  return plan;
}

void CpuExecutor::run(Plan& p, RunHooks* hooks) {
  auto& plan = static_cast<CpuPlan&>(p);
  if (plan.n_threads != pool_->size()) {  // thread count changed since compile: re-size the scratch once
    plan.n_threads = pool_->size();
    uint64_t bytes = 0;
    for (const Tensor* n : plan.nodes) bytes = std::max(bytes, cpu::work_size(*n, plan.n_threads));
    if (bytes > plan.work_bytes) {
      std::free(plan.work);
      plan.work = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      plan.work_bytes = bytes;
    }
  }
  cpu::OpContext ctx{*pool_, plan.work};
  for (const Tensor* n : plan.nodes) {
    if (n->op == Op::View) continue;
    if (hooks) hooks->before_node(dev_, *n);
    cpu::compute(*n, ctx);
    if (hooks) hooks->after_node(dev_, *n, cpu::kernel_name(*n));
  }
}

CpuDevice::CpuDevice(int n_threads) : executor_(*this, n_threads) {}

std::string CpuDevice::description() const { return fmt::format("CPU ({} threads, {} kernels)", n_threads(), cpu::isa_description()); }

Support CpuDevice::supports(const Tensor& node) const { return cpu::supports(node); }

void CpuDevice::set_threads(int n) { executor_.set_threads(n); }

}  // namespace opal
