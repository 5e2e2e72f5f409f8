// A fixed pool of worker threads that run one parallel job at a time:
// run(fn) calls fn(i, n) once for every chunk i in [0, n), n = size(), and
// returns when all calls are done. size() is the number of chunks a job is
// cut into: n_threads() x kChunksPerThread (1 for a single thread). Ops split
// their work by (i, n) and index per-chunk scratch by i, so they never need to
// know how many OS threads there are. run_chunks(n, fn) cuts a job into n
// chunks of the caller's choosing and passes the running thread's slot for
// per-thread scratch (a long matmul cut finer than size()).
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
//   * While the pool is held (hold(), Hold: the CPU executor holds it for a
//     whole plan run) idle workers never sleep. A worker that finished its
//     chunks of a long node early (a decode's output matrix) or waits through
//     the caller's serial small ops would otherwise fall asleep in the middle
//     of a token, and waking it cost 50-250 us per job for the next several
//     jobs (stop 15: a 2-thread decode token's first layer ran 4x slower
//     than the others). Taking the hold also wakes sleeping workers, so they
//     wake while the caller runs the first serial nodes.
//   * Spinning threads yield the vCPU: a worker every kYieldMicros, the
//     caller waiting for chunks others claimed after kYieldMicros. On a busy
//     host the two may share one vCPU, and a spinner that never yields keeps
//     the thread it waits for off the CPU for a time slice.
//   * Idle work (prefetch()): the caller may name bytes the next job will
//     read (the CPU executor: the next MUL_MAT's first weight rows). A worker
//     with no chunk left to claim (it finished its share of a job early, or
//     the caller runs serial small ops between jobs) streams them into its
//     caches with software prefetches, a kPrefetchPiece piece at a time from
//     a shared cursor, and stops at the next piece once a new job is
//     published. At decode the memory bus is the bottleneck and sits idle
//     while the caller runs the serial ops; this keeps it busy. A prefetch
//     never faults and never changes memory, so a range that went stale is
//     harmless (and no chunk of a job ever waits for it).
//   * Counters (always on, two clock reads per thread per job): each slot's
//     time inside chunk calls, the caller's time waiting for others' chunks,
//     the bytes prefetched.
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
  // Runs fn(chunk, n_chunks, slot) for every chunk in [0, n_chunks), any
  // n_chunks >= 1. slot, in [0, n_threads()), names the OS thread that runs
  // the call (0: the caller); calls with the same slot never overlap, so
  // per-thread scratch is indexed by slot. Not reentrant, as run().
  using ChunkFn = std::function<void(int chunk, int n_chunks, int slot)>;
  void run_chunks(int n_chunks, const ChunkFn& fn);

  // While held, idle workers spin instead of going to sleep; taking the hold
  // wakes sleeping workers. Not counted: hold(false) releases it. Hold is the
  // scoped form.
  void hold(bool on);
  bool held() const { return held_.load(std::memory_order_relaxed); }
  // Jobs run on several threads since the pool was made (the calls of run()
  // and run_chunks() that published work to the workers): each is one
  // barrier. A running counter for Device::stats().
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }
  // Idle work: workers with nothing to claim prefetch [p, p + bytes) into
  // their caches until done or the next job (see above). Replaces the range
  // not yet prefetched; a no-op on one thread.
  void prefetch(const void* p, uint64_t bytes);
  // The same, posted by the next job run on several threads right after it
  // is published (so workers turn to it when its chunks are all claimed).
  void prefetch_after_job(const void* p, uint64_t bytes);
  // Running counters (nanoseconds; bytes): slot's time running chunks of
  // jobs published to the workers (a worker adds a job's time after its
  // last chunk is counted done, so it may land just after the job returns),
  // the caller's time waiting for chunks other threads claimed, and the
  // bytes workers prefetched.
  uint64_t busy_ns(int slot) const;
  uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }
  uint64_t prefetched_bytes() const { return prefetched_.load(std::memory_order_relaxed); }
  // Ranges posted as idle work (prefetch() calls on several threads, and
  // prefetch_after_job's when their job was published).
  uint64_t prefetch_posts() const { return posts_.load(std::memory_order_relaxed); }
  class Hold {
   public:
    explicit Hold(ThreadPool& p) : p_(p) { p_.hold(true); }
    ~Hold() { p_.hold(false); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    ThreadPool& p_;
  };

  // How long idle workers spin before sleeping (when not held).
  static constexpr int kSpinMicros = 200;
  // How often a spinning worker yields its vCPU, and how long the caller
  // spins for chunks others claimed before yielding.
  static constexpr int kYieldMicros = 50;
  // Chunks per thread when there are several threads.
  static constexpr int kChunksPerThread = 4;
  // Bytes a worker prefetches between checks for a new job.
  static constexpr uint64_t kPrefetchPiece = 16 << 10;

 private:
  void worker(int slot);
  // Claims and runs chunks of generation `gen` until none is left.
  void work_on(uint32_t gen, int slot);
  void wake_sleepers();
  // Prefetches pieces of idle work generation `gen` until none is left or
  // the work is replaced (returns true), or stop() (checked between pieces;
  // returns false: the rest is left for later).
  template <class Stop>
  bool prefetch_pieces(uint32_t gen, const Stop& stop);

  int n_threads_;
  int n_chunks_;
  std::vector<std::thread> threads_;
  const ChunkFn* job_ = nullptr;
  alignas(64) std::atomic<uint64_t> state_{0};  // generation << 32 | next chunk
  alignas(64) std::atomic<int> done_{0};        // chunks finished in the current generation
  alignas(64) std::atomic<int> sleeping_{0};
  std::atomic<bool> held_{false};
  std::atomic<uint64_t> jobs_{0};  // written by the caller only
  // Idle work: its range and generation (written by the caller), the cursor workers claim pieces with.
  alignas(64) std::atomic<uint32_t> idle_gen_{0};
  std::atomic<const uint8_t*> idle_ptr_{nullptr};
  std::atomic<uint64_t> idle_bytes_{0};
  alignas(64) std::atomic<uint64_t> idle_cursor_{0};
  // Counters: per slot (each written by its own thread), the caller's wait, bytes prefetched.
  std::vector<std::atomic<uint64_t>> busy_ns_;
  std::atomic<uint64_t> wait_ns_{0};
  std::atomic<uint64_t> prefetched_{0};
  std::atomic<uint64_t> posts_{0};     // written by the caller only
  const void* pending_ptr_ = nullptr;  // prefetch_after_job's (the caller's only)
  uint64_t pending_bytes_ = 0;
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

// Splits [0, n) into nth chunks whose sizes differ by at most one (the first
// n % nth are one longer); returns chunk ith as [begin, end). split_range
// rounds every chunk up instead, which leaves the last chunks short or empty
// when nth is near n (10 into 8: 2, 2, 2, 2, 2, 0, 0, 0).
inline void split_even(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t q = n / nth, r = n % nth;
  *begin = q * ith + std::min<int64_t>(ith, r);
  *end = *begin + q + (ith < r ? 1 : 0);
}

}  // namespace opal
