// A fixed pool of worker threads that run one parallel job at a time:
// run(fn) calls fn(i, n) once for every chunk i in [0, n), n = size(), and
// returns when all calls are done. size() is the number of chunks a job is
// cut into: n_threads() x kChunksPerThread (1 for a single thread). Ops split
// their work by (i, n) and index per-chunk scratch by i, so they never need to
// know how many OS threads there are.
//
// Algorithm (chunk claiming, spin-then-sleep):
//   * The caller publishes a job by bumping one 64-bit atomic `state_` that
//     holds (generation << 32 | next chunk index). Every thread, the caller
//     included, claims chunk indices from it by compare-and-swap until none is
//     left, runs fn(chunk, n) for each and counts it done. The generation in
//     the same word keeps a late worker from claiming a chunk of a newer job.
//   * So no thread waits for a particular other thread: if a worker is slow to
//     wake (its vCPU is busy with another process), the others run its
//     chunks. Several chunks per thread bound what a worker preempted in the
//     middle of a chunk can hold up to a fraction of the job. On a 2-vCPU
//     machine this is what keeps 2 threads from being slower than 1 when the
//     other vCPU is briefly taken.
//   * Idle workers spin (with a CPU pause hint) for about kSpinMicros, since
//     graph nodes come back to back, then sleep on a condition variable; the
//     caller only takes the mutex to wake them when some are asleep.
//   * The caller waits for chunks claimed by others by spinning, then yielding.
// Callers must not assume that different i run on different OS threads (one
// thread runs several chunks one after another), only that calls with
// different i never overlap on the same scratch.
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
  explicit ThreadPool(int n_threads, int chunks_per_thread = kChunksPerThread);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Chunks per job (the nth every fn call gets; scratch is sized by it).
  int size() const { return n_chunks_; }
  // OS threads, the caller included.
  int n_threads() const { return n_threads_; }
  // Runs fn(ith, nth) for every ith in [0, nth), nth = size(). Not reentrant:
  // one run() at a time (fn must not call run()).
  void run(const std::function<void(int ith, int nth)>& fn);

  // How long idle workers spin before sleeping.
  static constexpr int kSpinMicros = 200;
  // Chunks per thread when there are several threads.
  static constexpr int kChunksPerThread = 4;

 private:
  void worker();
  // Claims and runs chunks of generation `gen` until none is left.
  void work_on(uint32_t gen);

  int n_threads_;
  int n_chunks_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  alignas(64) std::atomic<uint64_t> state_{0};  // generation << 32 | next chunk
  alignas(64) std::atomic<int> done_{0};        // chunks finished in the current generation
  alignas(64) std::atomic<int> sleeping_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
};

// Splits [0, n) into nth near-equal chunks; returns chunk ith as [begin, end).
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = (n + nth - 1) / nth;
  *begin = std::min<int64_t>(n, per * ith);
  *end = std::min<int64_t>(n, *begin + per);
}

}  // namespace opal
