// The decode split inside the (token, head) pairs (ops/attention.cpp, attention_split_pairs: a decode whose pairs
// do not divide among the pool's chunks, forced here at any depth with OPAL_ATTN_SPLIT_MIN_CELLS=0) gives every
// pair the bits of the one-thread per-pair path, on every SIMD ISA of the host, for each shape of its units:
// K by (token, cell range) over whole rows through dots_f16_groups (AVX2; AVX-512 with the decode prefetch on), by
// (kv head, cell range) through dots_f16_heads or by (pair, range), V by (kv head, column part) through
// accumulate_f16_heads or by (pair, column part), the parts chosen so that the units divide among the OS threads.
// AVX-512 runs under both decode prefetch choices (its two attention tables).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"
#include "support/attention_node.h"
#include "support/isa_coverage.h"

namespace opal {
namespace {

using namespace opal::cpu;

// Sets OPAL_ATTN_SPLIT_MIN_CELLS for the test's life, restoring what was there.
struct SplitAtAnyDepth {
  const char* before = std::getenv("OPAL_ATTN_SPLIT_MIN_CELLS");
  std::string saved = before ? before : "";
  SplitAtAnyDepth() { setenv("OPAL_ATTN_SPLIT_MIN_CELLS", "0", 1); }
  ~SplitAtAnyDepth() {
    if (before) setenv("OPAL_ATTN_SPLIT_MIN_CELLS", saved.c_str(), 1);
    else unsetenv("OPAL_ATTN_SPLIT_MIN_CELLS");
  }
};

uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

struct SplitCase {
  int64_t hq, hkv, d, cells;
  int threads;  // the pool's OS threads (4 chunks each)
  DType k;
  int32_t window;
  const char* what;
};

// One decode token at position cells - 1 over a cache of `cells` cells of sequence 0, on `threads` threads.
std::vector<float> decode(const SplitCase& cs, int threads, const std::vector<float>& q, const std::vector<uint8_t>& kc,
                          const std::vector<uint16_t>& vc) {
  const test::AttentionArgs args{cs.hq, cs.hkv, cs.d, 1.0f / 8.0f, cs.window};
  return test::attention_output(args, q.data(), cs.k, kc.data(), DType::F16, vc.data(),
                                test::seq0_positions(1, cs.cells - 1), test::seq0_positions(cs.cells), threads);
}

TEST(AttentionSplit, EveryUnitShapeHasTheOneThreadBits) {
  const SplitAtAnyDepth split;
  const SplitCase cases[] = {
      // SmolLM2: K 3 kv heads x 4 ranges (1500 cells: 5 ranges of 256 at most, 4 divide), V 3 x 2 parts of 32 (2
      // parts of the lanes where the table has accumulate_f16_groups, as in every case of a head size of 16s)
      {9, 3, 64, 1500, 2, DType::F16, 0, "smollm2 2 threads"},
      {9, 3, 64, 3000, 2, DType::F16, 0, "smollm2 2 threads, 8 ranges"},
      {9, 3, 128, 1500, 2, DType::F16, 0, "9 heads of 128: V 3 x 2 parts of 64"},
      {9, 3, 64, 1500, 3, DType::F16, 0, "3 threads: V 3 x 1 part (whole rows)"},
      {7, 7, 64, 1500, 2, DType::F16, 0, "7 heads, no GQA: (pair, range) and (pair, column part) units"},
      {5, 1, 64, 1500, 2, DType::F16, 0, "one kv head of 5: K 1 x 4 ranges, V 1 x 2 parts"},
      {6, 2, 80, 1500, 4, DType::F16, 0, "head size 80 on 4 threads: V parts of 32 and 48 columns"},
      {9, 3, 64, 1500, 2, DType::Q8_0, 0, "q8_0 K: (pair, range) units"},
      {9, 3, 64, 1500, 2, DType::F16, 300, "sliding window"},
      // Where the table has accumulate_f16_groups V goes by parts of the lanes (split_v_parts), and pairs that divide
      // among the threads split too
      {16, 8, 128, 1500, 2, DType::F16, 0, "Qwen3-0.6B on 2 threads: K (token, range) units, V 2 parts of the lanes"},
      {32, 8, 64, 1500, 2, DType::F16, 0, "Llama-3.2-1B on 2 threads: V 2 parts of the lanes"},
      {16, 8, 128, 1500, 4, DType::F16, 0, "Qwen3-0.6B on 4 threads: V 4 parts of the lanes"},
  };
  std::mt19937 rng(29);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const Isa before = selected_isa();
  const DecodePrefetch prefetch_before = decode_prefetch_choice();
  for (const SplitCase& cs : cases) {
    SCOPED_TRACE(cs.what);
    std::vector<float> q(size_t(cs.d * cs.hq)), krow(size_t(cs.hkv * cs.d));
    for (auto& x : q) x = val(rng);
    const uint64_t kb = row_bytes(cs.k, cs.hkv * cs.d);
    std::vector<uint8_t> kc(size_t(kb * uint64_t(cs.cells)));
    for (int64_t c = 0; c < cs.cells; ++c) {
      for (auto& x : krow) x = val(rng);
      quantize_rows(cs.k, krow.data(), kc.data() + uint64_t(c) * kb, 1, cs.hkv * cs.d);
    }
    std::vector<uint16_t> vc(size_t(cs.cells * cs.hkv * cs.d));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
      for (DecodePrefetch pf : {DecodePrefetch::off, DecodePrefetch::on}) {
        // One attention table for both on scalar; avx2 / avx2-vnni and avx512 have a second where the decode
        // prefetches (with accumulate_f16_groups, but on AMD's cores for avx2).
        if (pf == DecodePrefetch::on && isa == Isa::scalar) continue;
        set_isa(isa);
        set_decode_prefetch(pf);
        const std::vector<float> want = decode(cs, 1, q, kc, vc), got = decode(cs, cs.threads, q, kc, vc);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i]))
              << isa_name(isa) << " prefetch " << (pf == DecodePrefetch::on) << " threads " << cs.threads << " i " << i
              << ": " << got[i] << " vs " << want[i];
      }
  }
  set_decode_prefetch(prefetch_before);
  set_isa(before);
}

// A one-token decode of up to 9 x 256 (heads x live cells) runs on the calling thread (ops/attention.cpp,
// serial_max_work: the idle workers prefetch weights meanwhile); a longer one, or any with
// OPAL_ATTN_SERIAL_MAX_WORK=0, publishes a pool job. Every way, the one-thread bits.
TEST(AttentionSplit, SmallDecodesRunOnTheCallingThreadWithTheSameBits) {
  const char* before = std::getenv("OPAL_ATTN_SERIAL_MAX_WORK");
  const std::string saved = before ? before : "";
  std::mt19937 rng(31);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int64_t hq = 9, hkv = 3, d = 64;
  for (int64_t cells : {100, 256, 257, 600}) {
    SCOPED_TRACE("cells " + std::to_string(cells));
    std::vector<float> q(size_t(d * hq));
    for (auto& x : q) x = val(rng);
    std::vector<uint16_t> kc(size_t(cells * hkv * d)), vc(kc.size());
    for (auto& h : kc) h = f32_to_f16(val(rng));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    const test::AttentionArgs args{hq, hkv, d, 1.0f / 8.0f, 0};
    auto run = [&](int threads, const char* serial_max, uint64_t* jobs) {
      if (serial_max) setenv("OPAL_ATTN_SERIAL_MAX_WORK", serial_max, 1);
      else unsetenv("OPAL_ATTN_SERIAL_MAX_WORK");
      std::vector<float> out(size_t(d * hq), -7.0f);
      test::AttentionNode node(args, q.data(), out.data(), DType::F16, kc.data(), DType::F16, vc.data(),
                               test::seq0_positions(1, int32_t(cells - 1)), test::seq0_positions(int32_t(cells)));
      ThreadPool pool(threads);
      node.compute(pool);
      *jobs = pool.jobs();
      return out;
    };
    uint64_t jobs1 = 0, jobs_default = 0, jobs_pool = 0;
    const auto want = run(1, nullptr, &jobs1);
    const auto by_default = run(2, nullptr, &jobs_default);
    const auto on_pool = run(2, "0", &jobs_pool);
    EXPECT_EQ(jobs_default, cells <= 256 ? 0u : 1u);
    EXPECT_EQ(jobs_pool, 1u);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(f32_bits(by_default[i]), f32_bits(want[i])) << "default, i " << i;
      ASSERT_EQ(f32_bits(on_pool[i]), f32_bits(want[i])) << "pool, i " << i;
    }
  }
  if (before) setenv("OPAL_ATTN_SERIAL_MAX_WORK", saved.c_str(), 1);
  else unsetenv("OPAL_ATTN_SERIAL_MAX_WORK");
}

// live_cell_count: one past the last cell in use, the same with or without the run's memo; with one, later calls
// for the same cache take the memo's value (the metadata cannot change within a graph run), and a second cache
// gets its own entry.
TEST(AttentionLiveCells, TheRunsMemoGivesTheScansCountOncePerCache) {
  auto cache = [](int64_t n_cells, std::vector<int32_t>& info) {
    Tensor t;
    t.type = DType::I32;
    t.ne = {2, n_cells, 1, 1};
    info.assign(size_t(2 * n_cells), -1);
    t.data = info.data();
    return t;
  };
  std::vector<int32_t> a_info, b_info;
  Tensor a = cache(4096, a_info), b = cache(64, b_info);
  ThreadPool pool(1);
  const OpContext plain{pool, nullptr};
  EXPECT_EQ(live_cell_count(a, plain), 0);
  for (const int64_t last : {0, 17, 4095}) {  // cells 0..3 and `last` in use, a hole between
    std::fill(a_info.begin(), a_info.end(), -1);
    for (int64_t c : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), last})
      a_info[size_t(2 * c)] = 5, a_info[size_t(2 * c + 1)] = 0;
    EXPECT_EQ(live_cell_count(a, plain), std::max<int64_t>(last, 3) + 1) << "last " << last;
  }
  b_info[2 * 40 + 1] = 2;  // sequence 2 in cell 40
  LiveCellsMemo memo;
  const OpContext run{pool, nullptr, &memo};
  EXPECT_EQ(live_cell_count(a, run), 4096);
  EXPECT_EQ(live_cell_count(b, run), 41);
  a_info[2 * 4095 + 1] = -1;  // not within a run; the memo keeps the run's value
  EXPECT_EQ(live_cell_count(a, run), 4096);
  EXPECT_EQ(live_cell_count(a, plain), 4);
  LiveCellsMemo next;
  EXPECT_EQ(live_cell_count(a, OpContext{pool, nullptr, &next}), 4);
  EXPECT_EQ(live_cell_count(b, run), 41);
}

}  // namespace
}  // namespace opal
