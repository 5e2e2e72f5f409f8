#include "backends/cpu/cpu_device.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "core/error.h"

namespace opal {
namespace {

using Clock = std::chrono::steady_clock;

struct CpuPlan : Plan {
  std::vector<Tensor*> nodes;
  // Runs of MUL_MATs that one parallel job computes (cpu::mul_mat_groupable):
  // group_of[i] is node i's group or -1; a group runs at its first member.
  std::vector<std::vector<const Tensor*>> groups;
  std::vector<int> group_of;
  std::vector<size_t> group_last;  // each group's last member's index in nodes
  // Node i's successor MUL_MAT at decode: the weight the next decode-sized
  // MUL_MAT after node i reads (null: none), which the pool's idle workers
  // prefetch while node i's job ends and the serial ops after it run.
  std::vector<const Tensor*> next_weight;
  const Tensor* first_weight = nullptr;  // the plan's first one, prefetched after the run for the next
  uint64_t work_bytes = 0;               // scratch its nodes need (the executor holds it)
  int n_threads = 1;
};

// Groups consecutive MUL_MATs (Views between them compute nothing) that read
// the same activations, so that on several threads they take one barrier.
void find_groups(CpuPlan& plan) {
  plan.group_of.assign(plan.nodes.size(), -1);
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const Tensor& first = *plan.nodes[i];
    if (first.op != Op::MulMat || !cpu::mul_mat_groupable(first, first)) continue;
    std::vector<const Tensor*> members = {&first};
    std::vector<size_t> at = {i};
    for (size_t j = i + 1; j < plan.nodes.size() && int(members.size()) < cpu::kMaxMulMatGroup; ++j) {
      const Tensor& n = *plan.nodes[j];
      if (n.op == Op::View) continue;
      if (!cpu::mul_mat_groupable(first, n)) break;
      members.push_back(&n);
      at.push_back(j);
    }
    if (members.size() < 2) continue;
    for (size_t j : at) plan.group_of[j] = int(plan.groups.size());
    plan.group_last.push_back(at.back());
    plan.groups.push_back(std::move(members));
    i = at.back();
  }
}

// For each node, the weight of the next decode-sized MUL_MAT after it, and the plan's first.
void find_next_weights(CpuPlan& plan) {
  plan.next_weight.assign(plan.nodes.size(), nullptr);
  const Tensor* next = nullptr;
  for (size_t i = plan.nodes.size(); i-- > 0;) {
    plan.next_weight[i] = next;
    if (cpu::mul_mat_prefetchable(*plan.nodes[i])) next = plan.nodes[i]->src[0];
  }
  plan.first_weight = next;
}

uint64_t plan_work_bytes(const CpuPlan& plan) {
  uint64_t bytes = 0;
  for (const Tensor* n : plan.nodes) bytes = std::max(bytes, cpu::work_size(*n, plan.n_threads));
  for (const auto& g : plan.groups)
    bytes = std::max(bytes, cpu::mul_mat_group_work_size(g.data(), int(g.size()), plan.n_threads));
  return bytes;
}

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
  if (n == pool_->n_threads()) return;
  jobs_before_ += pool_->jobs();
  pool_ = std::make_unique<ThreadPool>(n);
}

void CpuExecutor::reserve_work(uint64_t bytes) {
  if (bytes <= work_bytes_) return;
  work_.reset();
  work_bytes_ = 0;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (!p) throw std::bad_alloc();
  work_.reset(p);
  work_bytes_ = bytes;
}

namespace {

// A weight repacked at load (Tensor::layout, backends/cpu/weight_repack.cpp)
// is read only by the ops taught its layout: MUL_MAT as the weight and
// GET_ROWS as the table, never through a view. The load-time probe graph
// decides what is repacked; a graph that reads such a weight any other way
// is refused here, at compile, rather than read as the GGUF's bytes.
void check_repacked_sources(const Tensor& n) {
  if (n.op == Op::View || n.op == Op::None) return;
  for (int i = 0; i < kMaxSrc; ++i) {
    const Tensor* s = n.src[i];
    if (!s || s->storage()->layout == 0) continue;
    const bool taught = i == 0 && s->storage() == s && (n.op == Op::MulMat || n.op == Op::GetRows);
    if (!taught)
      fail(
          "{} '{}' reads weight '{}', which was repacked at load for the CPU's {} kernels; only MUL_MAT and "
          "GET_ROWS read it: load the model with --no-repack",
          op_name(n.op), n.name, s->storage()->name, int(s->storage()->layout));
  }
}

}  // namespace

std::unique_ptr<Plan> CpuExecutor::compile(const Segment& segment) {
  auto plan = std::make_unique<CpuPlan>();
  plan->nodes = segment.nodes;
  plan->n_threads = pool_->size();
  for (const Tensor* n : segment.nodes) check_repacked_sources(*n);
  find_groups(*plan);
  find_next_weights(*plan);
  plan->work_bytes = plan_work_bytes(*plan);
  reserve_work(plan->work_bytes);
  return plan;
}

void CpuExecutor::run(Plan& p, RunHooks* hooks) {
  auto& plan = static_cast<CpuPlan&>(p);
  if (plan.n_threads != pool_->size()) {  // thread count changed since compile: re-size the scratch once
    plan.n_threads = pool_->size();
    plan.work_bytes = plan_work_bytes(plan);
    reserve_work(plan.work_bytes);
  }
  const auto t0 = Clock::now();
  cpu::LiveCellsMemo live_cells;
  cpu::OpContext ctx{*pool_, work_.get(), &live_cells};
  // Workers spin through the whole plan (the serial small ops, a long node's
  // last chunk) instead of falling asleep between its jobs (graph/thread_pool.h).
  ThreadPool::Hold hold(*pool_);
  // Groups run as one job on several threads; with hooks (perf events, the
  // trace, --shadow) every node runs alone, so that each is timed and seen.
  const bool grouped = !hooks && pool_->n_threads() > 1;
  const bool prefetch = pool_->n_threads() > 1 && prefetch_bytes_ > 0;
  auto prefetch_weight = [&](const Tensor* w, bool now) {
    const uint64_t bytes = std::min<uint64_t>(prefetch_bytes_, w->nbytes());
    if (now) pool_->prefetch(w->data, bytes);
    else pool_->prefetch_after_job(w->data, bytes);
  };
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const Tensor* n = plan.nodes[i];
    if (n->op == Op::View) continue;
    if (grouped && plan.group_of[i] >= 0) {
      const auto& g = plan.groups[size_t(plan.group_of[i])];
      if (g.front() == n) {
        if (const Tensor* w = prefetch ? plan.next_weight[plan.group_last[size_t(plan.group_of[i])]] : nullptr)
          prefetch_weight(w, false);
        cpu::compute_mul_mat_group(g.data(), int(g.size()), ctx);
        ++groups_run_;
        grouped_nodes_ += g.size();
      }
      continue;
    }
    // The next MUL_MAT's first weights, taken up by idle threads once this
    // MUL_MAT's job has handed out its last chunk and through the serial ops after it.
    if (prefetch && plan.next_weight[i] && (n->op == Op::MulMat || n->op == Op::MulMatId))
      prefetch_weight(plan.next_weight[i], false);
    if (hooks) hooks->before_node(dev_, *n);
    cpu::compute(*n, ctx);
    if (hooks) hooks->after_node(dev_, *n, cpu::kernel_name(*n));
  }
  // The next run of this plan (the next decode step) starts with its first
  // MUL_MAT: the workers warm it while the caller samples.
  if (prefetch && plan.first_weight) prefetch_weight(plan.first_weight, true);
  run_ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

CpuDevice::CpuDevice(int n_threads) : executor_(*this, n_threads) {}

std::string CpuDevice::description() const {
  return fmt::format("CPU ({} threads, {} kernels)", n_threads(), cpu::isa_description());
}

Support CpuDevice::supports(const Tensor& node) const { return cpu::supports(node); }

void CpuDevice::set_threads(int n) { executor_.set_threads(n); }

DeviceStats CpuDevice::stats() const {
  DeviceStats d;
  d.values = {{"pool_jobs", double(executor_.pool_jobs())},
              {"mul_mat_groups", double(executor_.groups_run())},
              {"grouped_nodes", double(executor_.grouped_nodes())},
              {"run_us", double(executor_.run_ns()) * 1e-3},
              {"wait_us", double(executor_.pool().wait_ns()) * 1e-3},
              {"prefetched_bytes", double(executor_.pool().prefetched_bytes())},
              {"prefetch_posts", double(executor_.pool().prefetch_posts())}};
  for (int s = 0; s < executor_.n_threads(); ++s)
    d.values.push_back({fmt::format("busy_us_{}", s), double(executor_.pool().busy_ns(s)) * 1e-3});
  return d;
}

}  // namespace opal
