// ThreadPool (graph/thread_pool.h): every chunk runs exactly once per
// run(), run() returns only when all are done, and that holds for back-to-back
// jobs (workers spinning), jobs after a pause (workers asleep), a busy other
// thread, and destruction at any time; run_chunks() with any chunk count
// (each chunk once, slots in range and never two calls at once on one slot),
// jobs while the pool is held (workers kept spinning) and across the hold's
// release; idle workers' prefetching and the pool's counters; split_even's chunks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "graph/thread_pool.h"

namespace opal {
namespace {

void check_runs(ThreadPool& pool, int n_runs, std::chrono::microseconds pause) {
  const int n = pool.size();
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (int r = 0; r < n_runs; ++r) {
    for (auto& h : hits) h.store(0);
    std::atomic<int> wrong_nth{0};
    pool.run([&](int ith, int nth) {
      if (nth != n || ith < 0 || ith >= n) {
        wrong_nth.fetch_add(1);
        return;
      }
      hits[size_t(ith)].fetch_add(1);
    });
    // run() returned: every chunk has run exactly once.
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "run " << r << " chunk " << i;
    ASSERT_EQ(wrong_nth.load(), 0);
    if (pause.count()) std::this_thread::sleep_for(pause);
  }
}

TEST(ThreadPool, EveryChunkOnceBackToBack) {
  for (int n : {1, 2, 3, 4, 7}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.n_threads(), n);
    EXPECT_EQ(pool.size(), n == 1 ? 1 : n * ThreadPool::kChunksPerThread);
    check_runs(pool, 20000, std::chrono::microseconds(0));
  }
}

TEST(ThreadPool, EveryChunkOnceAfterWorkersSleep) {
  ThreadPool pool(3);
  // Pauses longer than the spin time: the workers go to sleep between jobs.
  check_runs(pool, 50, std::chrono::microseconds(ThreadPool::kSpinMicros * 5));
}

TEST(ThreadPool, ResultsVisibleAfterRun) {
  ThreadPool pool(4);
  std::vector<int64_t> data(1 << 16);
  for (int r = 0; r < 200; ++r) {
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      split_range(int64_t(data.size()), ith, nth, &b, &e);
      for (int64_t i = b; i < e; ++i) data[size_t(i)] = i * r;
    });
    for (size_t i = 0; i < data.size(); i += 997) ASSERT_EQ(data[i], int64_t(i) * r);
  }
}

TEST(ThreadPool, CorrectWhileAnotherThreadHogsTheCpu) {
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  ThreadPool pool(2);
  check_runs(pool, 5000, std::chrono::microseconds(0));
  stop = true;
  hog.join();
}

TEST(ThreadPool, UnevenChunks) {
  ThreadPool pool(2, 1);
  EXPECT_EQ(pool.size(), 2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 100; ++r)
    pool.run([&](int ith, int) {
      if (ith == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
      sum.fetch_add(ith + 1);
    });
  EXPECT_EQ(sum.load(), 100 * 3);
}

TEST(ThreadPool, ChunksPerThread) {
  for (int per : {1, 3, 8}) {
    ThreadPool pool(2, per);
    EXPECT_EQ(pool.size(), 2 * per);
    check_runs(pool, 2000, std::chrono::microseconds(0));
  }
  ThreadPool single(1, 8);
  EXPECT_EQ(single.size(), 1);  // one thread: one chunk, called directly
  check_runs(single, 10, std::chrono::microseconds(0));
}

TEST(ThreadPool, DestroyIdleAndBusyPools) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    if (i % 2) pool.run([](int, int) {});
  }
  SUCCEED();
}

TEST(ThreadPool, SplitRangeCoversEverything) {
  for (int64_t n : {0, 1, 5, 64, 1001})
    for (int nth : {1, 2, 3, 8}) {
      int64_t covered = 0, prev_end = 0;
      for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        split_range(n, i, nth, &b, &e);
        EXPECT_EQ(b, prev_end);
        EXPECT_LE(b, e);
        covered += e - b;
        prev_end = e;
      }
      EXPECT_EQ(covered, n);
    }
}

// run_chunks with counts below, at and far above size(): every chunk once,
// n_chunks passed as given, slot in [0, n_threads()), and no two calls on one
// slot at the same time (a per-slot busy flag that a second call would find set).
void check_chunks(ThreadPool& pool, int n_chunks, int n_runs) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n_chunks));
  std::vector<std::atomic<int>> busy(static_cast<size_t>(pool.n_threads()));
  for (int r = 0; r < n_runs; ++r) {
    for (auto& h : hits) h.store(0);
    std::atomic<int> bad{0};
    pool.run_chunks(n_chunks, [&](int chunk, int n, int slot) {
      if (n != n_chunks || chunk < 0 || chunk >= n || slot < 0 || slot >= pool.n_threads()) {
        bad.fetch_add(1);
        return;
      }
      if (busy[size_t(slot)].exchange(1) != 0) bad.fetch_add(1);
      hits[size_t(chunk)].fetch_add(1);
      if (chunk % 7 == 0) std::this_thread::yield();
      busy[size_t(slot)].store(0);
    });
    for (int i = 0; i < n_chunks; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "run " << r << " chunk " << i;
    ASSERT_EQ(bad.load(), 0) << "run " << r << ": a wrong (chunk, n, slot) or two calls on one slot";
  }
}

TEST(ThreadPool, RunChunksAnyCountEveryChunkOnceOneCallPerSlot) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    for (int chunks : {1, 2, 3, 8, 64, 300}) check_chunks(pool, chunks, n == 1 ? 20 : 500);
  }
}

TEST(ThreadPool, RunChunksAndRunInterleaved) {
  ThreadPool pool(3);
  for (int r = 0; r < 300; ++r) {
    check_chunks(pool, 1 + r % 40, 1);
    check_runs(pool, 1, std::chrono::microseconds(0));
  }
}

TEST(ThreadPool, HeldPoolRunsJobsAfterLongPausesAndAfterRelease) {
  ThreadPool pool(3);
  {
    ThreadPool::Hold hold(pool);
    EXPECT_TRUE(pool.held());
    // Pauses longer than the spin time: held workers keep spinning, and the
    // jobs still run every chunk once.
    check_runs(pool, 20, std::chrono::microseconds(ThreadPool::kSpinMicros * 3));
    check_chunks(pool, 50, 20);
  }
  EXPECT_FALSE(pool.held());
  // Released: the workers go to sleep again after a pause, and wake for the next jobs.
  check_runs(pool, 20, std::chrono::microseconds(ThreadPool::kSpinMicros * 5));
  // Taking the hold while they sleep wakes them; jobs run under it.
  std::this_thread::sleep_for(std::chrono::microseconds(ThreadPool::kSpinMicros * 5));
  pool.hold(true);
  check_chunks(pool, 17, 200);
  pool.hold(false);
}

TEST(ThreadPool, HoldToggledWhileWorkersSleepOrSpin) {
  ThreadPool pool(2);
  for (int r = 0; r < 200; ++r) {
    pool.hold(r % 3 != 0);
    if (r % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(ThreadPool::kSpinMicros * 2));
    check_runs(pool, 1, std::chrono::microseconds(0));
  }
  pool.hold(false);
}

TEST(ThreadPool, DestroyWhileHeld) {
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(1 + i % 4);
    pool.hold(true);
    if (i % 2) pool.run_chunks(9, [](int, int, int) {});
  }
  SUCCEED();
}

// Idle work: held workers prefetch a posted range to its end (the counter
// reaches its size), and prefetching never costs a job a chunk: jobs posted
// in the middle of it, and ranges replaced before they are done, still run
// every chunk once. A one-thread pool has no workers and prefetches nothing.
TEST(ThreadPool, IdleWorkersPrefetchAPostedRangeAndJobsStillRunEveryChunk) {
  std::vector<uint8_t> buf(size_t(8) << 20, 1);
  {
    ThreadPool one(1);
    one.prefetch(buf.data(), buf.size());
    one.prefetch_after_job(buf.data(), buf.size());
    one.run_chunks(4, [](int, int, int) {});
    EXPECT_EQ(one.prefetched_bytes(), 0u);
  }
  for (int n : {2, 3}) {
    ThreadPool pool(n);
    ThreadPool::Hold hold(pool);
    pool.prefetch(buf.data(), buf.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pool.prefetched_bytes() < buf.size() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Pieces run to the end of the range; a piece claimed twice is not possible (one cursor).
    EXPECT_EQ(pool.prefetched_bytes(), buf.size()) << n << " threads";
    for (int r = 0; r < 300; ++r) {
      pool.prefetch(buf.data() + (r % 7) * 4096, buf.size() / 2);
      if (r % 2) pool.prefetch_after_job(buf.data(), buf.size());
      check_chunks(pool, 1 + r % 40, 1);
      check_runs(pool, 1, std::chrono::microseconds(0));
    }
  }
}

// The counters: the chunk time of every slot adds up to at least the time the
// chunks slept, and only a job's other threads' chunks make the caller wait.
TEST(ThreadPool, BusyAndWaitCounters) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.busy_ns(0) + pool.busy_ns(1), 0u);
  EXPECT_EQ(pool.busy_ns(2), 0u);  // no such slot
  const int chunks = 8;
  pool.run_chunks(chunks, [](int, int, int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  // A worker adds its time after its last chunk is counted done: it may land just after run_chunks returns.
  const uint64_t want = uint64_t(chunks) * 2000000u;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.busy_ns(0) + pool.busy_ns(1) < want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(pool.busy_ns(0) + pool.busy_ns(1), want);
  ThreadPool one(1);
  one.run_chunks(chunks, [](int, int, int) {});
  EXPECT_EQ(one.wait_ns(), 0u);
}

TEST(ThreadPool, SplitEvenCoversEverythingWithSizesWithinOne) {
  for (int64_t n : {0, 1, 5, 10, 64, 1001, 18992})
    for (int nth : {1, 2, 3, 8, 13, 64}) {
      int64_t covered = 0, prev_end = 0, lo = n, hi = 0;
      for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        split_even(n, i, nth, &b, &e);
        EXPECT_EQ(b, prev_end) << n << " into " << nth;
        EXPECT_LE(b, e);
        lo = std::min(lo, e - b);
        hi = std::max(hi, e - b);
        covered += e - b;
        prev_end = e;
      }
      EXPECT_EQ(covered, n);
      EXPECT_LE(hi - lo, 1) << n << " into " << nth;
    }
}

}  // namespace
}  // namespace opal
