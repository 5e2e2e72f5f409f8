#include "backends/thread_pool.h"

namespace opal {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    pending_.store(n_threads_ - 1);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  fn(0, n_threads_);
  // Wait for the workers: spin a little, then yield.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins)
    if (spins > 1000) std::this_thread::yield();
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job = nullptr;
    {
      // Spin briefly before sleeping: jobs come back to back.
      for (int spins = 0; spins < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spins) {
      }
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
      job = job_;
    }
    (*job)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace opal
