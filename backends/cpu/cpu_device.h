// The CPU backend: runs every op (scalar reference kernels, multithreaded
// with a ThreadPool); the fallback device by role.
#pragma once
#include <cstdlib>
#include <memory>

#include "graph/backend.h"
#include "graph/host_buffer.h"
#include "graph/thread_pool.h"

namespace opal {

class CpuExecutor : public Executor {
 public:
  explicit CpuExecutor(const Device& dev, int n_threads);
  std::unique_ptr<Plan> compile(const Segment& segment) override;
  void run(Plan& plan, RunHooks* hooks) override;
  void set_threads(int n);
  int n_threads() const { return pool_->n_threads(); }
  // Running counters (CpuDevice::stats()): parallel jobs of this and earlier
  // pools, MUL_MAT groups run as one job and the nodes in them.
  uint64_t pool_jobs() const { return jobs_before_ + pool_->jobs(); }
  uint64_t groups_run() const { return groups_run_; }
  uint64_t grouped_nodes() const { return grouped_nodes_; }
  // Wall time inside run() (all plans), and the pool (its busy / wait / prefetch counters).
  uint64_t run_ns() const { return run_ns_; }
  const ThreadPool& pool() const { return *pool_; }
  // Weight bytes of the next decode MUL_MAT idle workers prefetch (0: none).
  void set_prefetch_bytes(uint64_t bytes) { prefetch_bytes_ = bytes; }
  static constexpr uint64_t kPrefetchBytes = uint64_t(1) << 20;

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // Grows the scratch to at least `bytes` (never in run(), except once after a thread-count change).
  void reserve_work(uint64_t bytes);

  const Device& dev_;
  std::unique_ptr<ThreadPool> pool_;
  // One scratch for every plan (the pool runs one job at a time, so plans
  // never run at once), sized for the largest plan compiled: plans of ever
  // new shapes cost no allocation and fragment no heap.
  std::unique_ptr<uint8_t, FreeDeleter> work_;
  uint64_t work_bytes_ = 0;
  uint64_t jobs_before_ = 0;  // jobs of the pools set_threads replaced
  uint64_t groups_run_ = 0, grouped_nodes_ = 0;
  uint64_t run_ns_ = 0;
  uint64_t prefetch_bytes_ = kPrefetchBytes;
};

// Host memory whose weights may be repacked at load into the layout the
// selected ISA's decode kernels stream best (kernels/repack.h;
// backends/cpu/weight_repack.cpp).
class CpuBufferType : public HostBufferType {
 public:
  using HostBufferType::HostBufferType;
  uint8_t repack_layout(const Tensor& t, const std::vector<const Tensor*>& consumers) const override;
  void repack_weight(Tensor& t, uint8_t layout) const override;
};

class CpuDevice : public Device {
 public:
  explicit CpuDevice(int n_threads = 0);
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  DeviceRole role() const override { return DeviceRole::Host; }
  int priority() const override { return 0; }
  Support supports(const Tensor& node) const override;
  BufferType& weight_buffer_type() override { return buffer_type_; }
  BufferType& compute_buffer_type() override { return buffer_type_; }
  Executor& executor() override { return executor_; }
  void set_threads(int n) override;
  int n_threads() const { return executor_.n_threads(); }
  // pool_jobs (parallel jobs: one barrier each), mul_mat_groups (MUL_MAT
  // groups run as one job), grouped_nodes (the MUL_MATs in them).
  DeviceStats stats() const override;

 private:
  CpuBufferType buffer_type_{"cpu"};
  CpuExecutor executor_;
};

}  // namespace opal
