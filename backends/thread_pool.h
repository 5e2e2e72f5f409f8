// A fixed pool of worker threads that run one parallel job at a time:
// run(n, fn) calls fn(i, n) for i in [0, n) on the caller plus n-1 workers
// and returns when all are done. Workers spin briefly, then sleep on a
// condition variable, so back-to-back small jobs (one per graph node) stay cheap.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace opal {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(ith, nth) with nth = size() (the caller is ith = 0).
  void run(const std::function<void(int ith, int nth)>& fn);

 private:
  void worker(int ith);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

// Splits [0, n) into nth near-equal chunks; returns chunk ith as [begin, end).
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = (n + nth - 1) / nth;
  *begin = std::min<int64_t>(n, per * ith);
  *end = std::min<int64_t>(n, *begin + per);
}

}  // namespace opal
