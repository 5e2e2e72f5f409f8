// ThreadPool: chunk claiming on one atomic word, spin-then-sleep workers
// (see the header for the algorithm and why).
#include "graph/thread_pool.h"

#include <chrono>

namespace opal {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

constexpr uint32_t generation_of(uint64_t state) { return uint32_t(state >> 32); }
constexpr uint32_t chunk_of(uint64_t state) { return uint32_t(state); }

}  // namespace

ThreadPool::ThreadPool(int n_threads, int chunks_per_thread)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      n_chunks_(n_threads_ == 1 ? 1 : n_threads_ * std::max(1, chunks_per_thread)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lk(mu_); }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(uint32_t gen) {
  const uint32_t n = uint32_t(n_chunks_);
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(s) != gen || chunk_of(s) >= n) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Claimed chunk chunk_of(s) of this generation: the caller cannot publish
    // another job (and overwrite job_) before it is counted done.
    (*job_)(int(chunk_of(s)), n_chunks_);
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_chunks_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(uint64_t(gen) << 32);  // seq_cst: ordered against sleeping_ below
  if (sleeping_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
  }
  work_on(gen);
  // Chunks claimed by workers: spin a little, then yield the vCPU (the worker
  // may be waiting for it).
  for (int spins = 0; done_.load(std::memory_order_acquire) < n_chunks_; ++spins) {
    if (spins < 4000) cpu_relax();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker() {
  using Clock = std::chrono::steady_clock;
  uint32_t seen = 0;
  for (;;) {
    // Spin for new work for about kSpinMicros.
    const auto spin_end = Clock::now() + std::chrono::microseconds(kSpinMicros);
    bool fresh = false;
    for (int i = 0;; ++i) {
      if (generation_of(state_.load(std::memory_order_acquire)) != seen || stop_.load(std::memory_order_relaxed)) {
        fresh = true;
        break;
      }
      cpu_relax();
      if ((i & 63) == 63 && Clock::now() >= spin_end) break;
    }
    if (!fresh) {
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.fetch_add(1);  // seq_cst: ordered against the caller's state_ store
      cv_.wait(lk, [&] { return generation_of(state_.load()) != seen || stop_.load(); });
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_of(state_.load(std::memory_order_acquire));
    work_on(seen);
  }
}

}  // namespace opal
