// ThreadPool: chunk claiming on one atomic word, spin-then-sleep workers, a
// hold that keeps them spinning through a graph run (see the header for the
// algorithm and why). OPAL_PIN_THREADS=1 pins each slot to its own CPU,
// `auto` only while the host is otherwise idle (off by default: on a busy
// host a pinned thread cannot leave a taken vCPU; docs/cpu-kernels.md
// "Threads at decode").
#include "graph/thread_pool.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace opal {
namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// state_: generation (32 bits) | the job's chunk count (16) | next chunk (16).
// The count travels with the generation, so a thread never pairs one job's
// count with another job's chunk index.
constexpr int kMaxChunks = 0xffff;
constexpr uint32_t generation_of(uint64_t state) { return uint32_t(state >> 32); }
constexpr uint32_t count_of(uint64_t state) { return uint32_t(state >> 16) & 0xffff; }
constexpr uint32_t chunk_of(uint64_t state) { return uint32_t(state) & 0xffff; }

uint64_t ns_since(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// OPAL_PIN_THREADS: `1` pins slot i to the i-th CPU of the process's affinity
// mask as it was when the first pool was made (round robin past its end):
// workers at start, the caller when it takes the hold. `auto` pins while the
// host runs little but this pool's threads and frees them otherwise, looked
// at every kPlaceEvery holds (/proc/loadavg: the 1-minute load at most the
// pool's threads + 0.5, the threads running now at most the pool's). On a quiet host the
// scheduler may keep the worker on the caller's vCPU; on a busy one a pinned
// thread cannot leave a vCPU another process holds.
enum class PinMode { off, on, automatic };
PinMode pin_mode() {
  static const PinMode m = [] {
    const char* e = std::getenv("OPAL_PIN_THREADS");
    if (!e) return PinMode::off;
    if (std::string_view(e) == "1") return PinMode::on;
    if (std::string_view(e) == "auto") return PinMode::automatic;
    return PinMode::off;
  }();
  return m;
}

#if defined(__linux__)
const std::vector<int>& allowed_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> v;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) v.push_back(c);
    return v;
  }();
  return cpus;
}

// Thread t on slot's CPU (pin), or free on every CPU of the mask.
void place(pthread_t t, int slot, bool pin) {
  const std::vector<int>& cpus = allowed_cpus();
  if (cpus.size() < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pin) CPU_SET(cpus[size_t(slot) % cpus.size()], &set);
  else
    for (int c : cpus) CPU_SET(c, &set);
  pthread_setaffinity_np(t, sizeof(set), &set);
}

// Whether the host runs little but n threads: the 1-minute load average at
// most n + 0.5 (the pool's own spinning threads count in it) and at most n
// threads running now (/proc/loadavg).
bool host_idle_but(int n) {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return false;
  double l1 = 0, l5, l15;
  int running = 0, total;
  const bool ok = std::fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5;
  std::fclose(f);
  return ok && l1 <= double(n) + 0.5 && running <= n;
}

constexpr uint32_t kPlaceEvery = 16;
thread_local bool caller_pinned = false;  // OPAL_PIN_THREADS=1: the caller pinned itself
thread_local uint32_t caller_holds = 0;   // auto: holds taken, to place every kPlaceEvery
#else
void allowed_cpus() {}
#endif

}  // namespace

ThreadPool::ThreadPool(int n_threads, int chunks_per_thread)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      n_chunks_(n_threads_ == 1 ? 1 : n_threads_ * std::max(1, chunks_per_thread)),
      busy_ns_(size_t(n_threads_)) {
  if (pin_mode() != PinMode::off) allowed_cpus();  // the process's mask, read before any thread is pinned
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lk(mu_); }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(uint32_t gen, int slot) {
  uint64_t s = state_.load(std::memory_order_acquire);
  Clock::time_point t0;
  bool ran = false;
  for (;;) {
    if (generation_of(s) != gen || chunk_of(s) >= count_of(s)) break;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    if (!ran) t0 = Clock::now();
    ran = true;
    // Claimed chunk chunk_of(s) of this generation: the caller cannot publish
    // another job (and overwrite job_) before it is counted done.
    (*job_)(int(chunk_of(s)), int(count_of(s)), slot);
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
  if (ran) busy_ns_[size_t(slot)].fetch_add(ns_since(t0), std::memory_order_relaxed);
}

uint64_t ThreadPool::busy_ns(int slot) const {
  return slot >= 0 && slot < n_threads_ ? busy_ns_[size_t(slot)].load(std::memory_order_relaxed) : 0;
}

void ThreadPool::prefetch(const void* p, uint64_t bytes) {
  if (n_threads_ == 1) return;
  idle_ptr_.store(static_cast<const uint8_t*>(p), std::memory_order_relaxed);
  idle_bytes_.store(bytes, std::memory_order_relaxed);
  idle_cursor_.store(0, std::memory_order_relaxed);
  idle_gen_.fetch_add(1, std::memory_order_release);
  posts_.store(posts_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void ThreadPool::prefetch_after_job(const void* p, uint64_t bytes) {
  if (n_threads_ == 1) return;
  pending_ptr_ = p;
  pending_bytes_ = bytes;
}

template <class Stop>
bool ThreadPool::prefetch_pieces(uint32_t gen, const Stop& stop) {
  const uint8_t* p = idle_ptr_.load(std::memory_order_relaxed);
  const uint64_t n = idle_bytes_.load(std::memory_order_relaxed);
  for (;;) {
    if (idle_gen_.load(std::memory_order_relaxed) != gen) return true;  // replaced
    if (stop()) return false;
    const uint64_t off = idle_cursor_.fetch_add(kPrefetchPiece, std::memory_order_relaxed);
    if (off >= n) return true;
    const uint64_t end = std::min(n, off + kPrefetchPiece);
    // Into L2 (prefetcht1): the next job's chunks run on either thread.
    for (uint64_t o = off; o < end; o += 64) __builtin_prefetch(p + o, 0, 2);
    prefetched_.fetch_add(end - off, std::memory_order_relaxed);
  }
}

void ThreadPool::wake_sleepers() {
  if (sleeping_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
  }
}

void ThreadPool::hold(bool on) {
  held_.store(on);  // seq_cst: ordered against sleeping_ below, as state_ in run_chunks
#if defined(__linux__)
  if (on && n_threads_ > 1 && pin_mode() == PinMode::on && !caller_pinned) {
    place(pthread_self(), 0, true);
    caller_pinned = true;
  }
  if (on && n_threads_ > 1 && pin_mode() == PinMode::automatic && caller_holds++ % kPlaceEvery == 0) {
    const bool pin = host_idle_but(n_threads_);
    place(pthread_self(), 0, pin);
    for (size_t i = 0; i < threads_.size(); ++i) place(threads_[i].native_handle(), int(i) + 1, pin);
  }
#endif
  if (on) wake_sleepers();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_chunks_ == 1) {
    fn(0, 1);
    return;
  }
  run_chunks(n_chunks_, [&fn](int chunk, int n, int) { fn(chunk, n); });
}

void ThreadPool::run_chunks(int n_chunks, const ChunkFn& fn) {
  n_chunks = std::clamp(n_chunks, 1, kMaxChunks);
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int c = 0; c < n_chunks; ++c) fn(c, n_chunks, 0);
    return;
  }
  job_ = &fn;
  jobs_.store(jobs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(uint64_t(gen) << 32 | uint64_t(n_chunks) << 16);  // seq_cst: ordered against sleeping_ below
  wake_sleepers();
  if (pending_ptr_) {  // after publishing: workers take it only once no chunk is left
    prefetch(pending_ptr_, pending_bytes_);
    pending_ptr_ = nullptr;
  }
  work_on(gen, 0);
  // Chunks claimed by workers: prefetch the idle work's pieces meanwhile,
  // spin for kYieldMicros, then yield the vCPU (the worker may be waiting for it).
  if (done_.load(std::memory_order_acquire) >= n_chunks) return;
  const auto t0 = Clock::now();
  const auto yield_at = t0 + std::chrono::microseconds(kYieldMicros);
  auto all_done = [&] { return done_.load(std::memory_order_acquire) >= n_chunks; };
  prefetch_pieces(idle_gen_.load(std::memory_order_acquire), all_done);
  bool yielding = false;
  for (int i = 0; !all_done(); ++i) {
    if (yielding) {
      std::this_thread::yield();
      continue;
    }
    cpu_relax();
    if ((i & 63) == 63 && Clock::now() >= yield_at) yielding = true;
  }
  wait_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
}

void ThreadPool::worker(int slot) {
#if defined(__linux__)
  if (pin_mode() == PinMode::on) place(pthread_self(), slot, true);
#endif
  uint32_t seen = 0, idle_seen = 0;
  auto new_job = [&] {
    return generation_of(state_.load(std::memory_order_acquire)) != seen || stop_.load(std::memory_order_relaxed);
  };
  for (;;) {
    // Spin for new work: while held, until it comes (yielding every
    // kYieldMicros); else for about kSpinMicros. Idle work posted meanwhile
    // runs first (and restarts the spin).
    auto now = Clock::now();
    auto spin_end = now + std::chrono::microseconds(kSpinMicros);
    auto yield_at = now + std::chrono::microseconds(kYieldMicros);
    bool fresh = false;
    for (int i = 0;; ++i) {
      if (new_job()) {
        fresh = true;
        break;
      }
      if (const uint32_t ig = idle_gen_.load(std::memory_order_acquire); ig != idle_seen) {
        // Done with it unless a job came first (then it goes on after the job).
        if (prefetch_pieces(ig, new_job)) idle_seen = ig;
        now = Clock::now();
        spin_end = now + std::chrono::microseconds(kSpinMicros);
        yield_at = now + std::chrono::microseconds(kYieldMicros);
        continue;
      }
      cpu_relax();
      if ((i & 63) != 63) continue;
      now = Clock::now();
      if (held_.load(std::memory_order_relaxed)) {
        spin_end = now + std::chrono::microseconds(kSpinMicros);  // released: spin kSpinMicros more
      } else if (now >= spin_end) {
        break;
      }
      if (now >= yield_at) {
        std::this_thread::yield();
        yield_at = Clock::now() + std::chrono::microseconds(kYieldMicros);
      }
    }
    if (!fresh) {
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.fetch_add(1);  // seq_cst: ordered against the caller's state_ / held_ store
      cv_.wait(lk, [&] { return generation_of(state_.load()) != seen || stop_.load() || held_.load(); });
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_of(state_.load(std::memory_order_acquire));
    work_on(seen, slot);
  }
}

}  // namespace opal
