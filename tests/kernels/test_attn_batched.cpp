// The batched attention helpers (kernels/attn_kernels.h: dots_f16,
// accumulate_f16, softmax_exp, and the block forms widen_f16,
// dots_f32_lanes16, attend_v_lanes16) give exactly the bits of the per-cell
// forms and of llama_order's scalar formulas they replace in ops/attention.cpp,
// under every ISA the host has (AVX-512 and AVX2 both have them).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant/blocks.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"
#include "support/attention_node.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace {

// Every table the covered ISAs select, under both decode prefetch choices (AVX-512 has a table for each).
std::vector<const AttnKernels*> batched_kernels() {
  std::vector<const AttnKernels*> v;
  const Isa before = selected_isa();
  const DecodePrefetch prefetch_before = decode_prefetch_choice();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
    for (DecodePrefetch pf : {DecodePrefetch::off, DecodePrefetch::on}) {
      set_isa(isa);
      set_decode_prefetch(pf);
      const AttnKernels* k = attn_kernels();
      if (k && k->dots_f16 && k->accumulate_f16 && k->softmax_exp && k->reduce_lanes && k->to_f16 &&
          std::find(v.begin(), v.end(), k) == v.end())
        v.push_back(k);
    }
  set_decode_prefetch(prefetch_before);
  set_isa(before);
#if defined(__x86_64__) || defined(__i386__)
  // AVX2's table with the whole-row V walk, which attn_kernels() does not pick on AMD's cores.
  if (std::find(v.begin(), v.end(), &avx2::kAttnKernels) != v.end() &&
      std::find(v.begin(), v.end(), &avx2::kAttnKernelsPrefetch) == v.end())
    v.push_back(&avx2::kAttnKernelsPrefetch);
#endif
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(AttnBatched, DotsAndAccumulationEqualThePerCellForms) {
  if (host_supports(Isa::avx512)) {
    ASSERT_FALSE(batched_kernels().empty()) << "AVX-512 has the batched helpers";
  }
  std::mt19937 rng(21);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    for (auto [dim, n_cells] : {std::pair<int64_t, int64_t>{64, 37},
                                {128, 37},
                                {80, 37},
                                {64, 150},
                                {128, 150},
                                {32, 150},
                                {48, 150},
                                {16, 150}}) {
      const int64_t stride = dim + 16;  // rows with a gap, cells out of order (150: several cells per lane)
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      std::vector<int32_t> cells;
      for (int32_t c = n_cells - 1; c >= 0; c -= 2) cells.push_back(c);
      for (int32_t c = 0; c < n_cells; c += 2) cells.push_back(c);
      const int64_t n = int64_t(cells.size());
      std::vector<float> q(static_cast<size_t>(dim));
      for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data());
      for (bool lanes16 : {true, false}) {
        if (lanes16 && dim % 16) continue;
        std::vector<float> got(static_cast<size_t>(n));
        k->dots_f16(base, uint64_t(stride) * 2, cells.data(), n, q.data(), dim, lanes16, got.data());
        for (int64_t r = 0; r < n; ++r) {
          const uint16_t* row = cache.data() + cells[size_t(r)] * stride;
          const float want = lanes16 ? k->dot_f16_lanes16(row, q.data(), dim) : k->dot_f16_vec(row, q.data(), dim);
          ASSERT_TRUE(same_bits(got[size_t(r)], want)) << "dim " << dim << " cell " << r;
        }
      }
      for (int64_t lanes : {16, 64}) {
        std::vector<float> p(static_cast<size_t>(n));
        for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
        std::vector<float> got(size_t(lanes * dim), 0.0f), want(size_t(lanes * dim), 0.0f);
        k->accumulate_f16(p.data(), base, uint64_t(stride) * 2, cells.data(), n, lanes, dim, got.data());
        for (int64_t r = 0; r < n; ++r)
          k->axpy_f16(p[size_t(r)], cache.data() + cells[size_t(r)] * stride, want.data() + (r % lanes) * dim, dim);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_TRUE(same_bits(got[i], want[i])) << "lanes " << lanes << " i " << i;
      }
    }
  }
}

// The decode's materialized path walks the cells chunk by chunk (whole 64s: each cell keeps its lane) for every
// head of a token, so that the cache rows are read in address order: dots and the V lanes over such chunks give
// the bits of one call over all the cells.
TEST(AttnBatched, ChunksOfWhole64CellsGiveTheBitsOfOneCall) {
  std::mt19937 rng(23);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t dim : {64, 128}) {
      const int64_t n_cells = 300, stride = 3 * dim;  // three heads per row: the middle one is read
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data() + dim);
      std::vector<int32_t> cells;
      for (int32_t c = 0; c < n_cells; ++c) cells.push_back(c);
      const int64_t n = int64_t(cells.size());
      std::vector<float> q(static_cast<size_t>(dim)), p(static_cast<size_t>(n));
      for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
      for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
      for (bool lanes16 : {true, false}) {
        const int64_t lanes = lanes16 ? 16 : 64;
        std::vector<float> s_one(static_cast<size_t>(n)), acc_one(size_t(lanes * dim), 0.0f);
        k->dots_f16(base, uint64_t(stride) * 2, cells.data(), n, q.data(), dim, lanes16, s_one.data());
        k->accumulate_f16(p.data(), base, uint64_t(stride) * 2, cells.data(), n, lanes, dim, acc_one.data());
        for (int64_t chunk : {64, 128, 256}) {
          std::vector<float> s(static_cast<size_t>(n)), acc(size_t(lanes * dim), 0.0f);
          for (int64_t c = 0; c < n; c += chunk) {
            const int64_t nn = std::min(chunk, n - c);
            k->dots_f16(base, uint64_t(stride) * 2, cells.data() + c, nn, q.data(), dim, lanes16, s.data() + c);
            k->accumulate_f16(p.data() + c, base, uint64_t(stride) * 2, cells.data() + c, nn, lanes, dim, acc.data());
          }
          for (int64_t r = 0; r < n; ++r)
            ASSERT_TRUE(same_bits(s[size_t(r)], s_one[size_t(r)]))
                << "dim " << dim << " chunk " << chunk << " cell " << r;
          for (size_t i = 0; i < acc.size(); ++i)
            ASSERT_TRUE(same_bits(acc[i], acc_one[i])) << "dim " << dim << " chunk " << chunk << " i " << i;
        }
      }
    }
  }
}

// A decode's ATTENTION (-fa 0) over an f16 cache with 128-dim heads stages a token's heads together and walks
// the cells 64 at a time for all of them (ops/attention.cpp, stage_scores): every ISA's result has the bits of
// the scalar per-cell path (llama_order's formulas), with and without a sliding window, at 1 and 3 threads.
// dots_f16_heads (the decode's K dots for the query heads of one kv head, each K vector widened once; AVX-512 by fours,
// threes and twos, and AVX2 at dk 64 and 128 in ggml_vec_dot_f16's order, two or three heads at a time at 128) gives
// every head the bits of dots_f16 and of the scalar reference (which has dots_f16's bits under every ISA), in both
// orders: head sizes 64, 128, 192, 80 and 32 (tails of the ggml_vec_dot_f16 order), 1-9 and 12 heads (AVX2 takes 8
// at a time), cell counts around the kernels' groups of 8 and 16, cells out of order with gaps, signed zeros (a row of
// -0: the sum of products from +0 is +0, also against head 0's all-positive q, whose products by vmulps are all -0), q
// rows and score rows at strides; nothing past a head's n scores is written.
TEST(AttnBatched, HeadsDotsEqualDotsF16PerHeadAndTheScalarOrder) {
  if (host_supports(Isa::avx512) || host_supports(Isa::avx2)) {
    ASSERT_FALSE(batched_kernels().empty());
  }
  std::mt19937 rng(29);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    ASSERT_NE(k->dots_f16_heads, nullptr);
    for (int64_t dk : {64, 128, 192, 80, 32}) {
      const int64_t stride = 3 * dk + 16, n_cells = 160;  // a kv head's slice inside wider rows
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      for (size_t i = 0; i < cache.size(); i += 7) cache[i] = i % 2 ? 0x8000 : 0;
      std::fill_n(cache.begin() + (n_cells - 4) * stride, stride, uint16_t(0x8000));  // a row of -0 (2nd in all)
      std::vector<int32_t> all;
      for (int32_t c = n_cells - 1; c >= 0; c -= 3) all.push_back(c);
      for (int32_t c = 0; c < n_cells; c += 3) all.push_back(c);
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data()) + 2 * dk;  // kv head 1
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12}) {
        const int64_t ldq = dk + 16;
        std::vector<float> q(size_t(m * ldq));
        for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
        // Head 0's q all positive: every product with the row of -0 is -0 (+0 from an FMA, as ggml's).
        for (int64_t i = 0; i < dk; ++i) q[size_t(i)] = std::fabs(q[size_t(i)]);
        for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 63, 65, 107}) {
          const int64_t ldo = n + 5;
          for (bool lanes16 : {true, false}) {
            if (lanes16 && dk % 16) continue;
            std::vector<float> got(size_t(m * ldo), -3.0f), ref(got.size(), -3.0f);
            k->dots_f16_heads(base, uint64_t(stride) * 2, all.data(), n, q.data(), ldq, m, dk, lanes16, got.data(),
                              ldo);
            dots_f16_heads_ref(base, uint64_t(stride) * 2, all.data(), n, q.data(), ldq, m, dk, lanes16, ref.data(),
                               ldo);
            for (int64_t h = 0; h < m; ++h) {
              std::vector<float> one(size_t(n) + 1);
              k->dots_f16(base, uint64_t(stride) * 2, all.data(), n, q.data() + h * ldq, dk, lanes16, one.data());
              for (int64_t r = 0; r < ldo; ++r) {
                const float g = got[size_t(h * ldo + r)];
                if (r >= n) {
                  ASSERT_EQ(g, -3.0f) << "written past n: dk " << dk << " m " << m << " n " << n << " head " << h;
                  continue;
                }
                ASSERT_TRUE(same_bits(g, one[size_t(r)]) && same_bits(g, ref[size_t(h * ldo + r)]))
                    << "dk " << dk << " m " << m << " n " << n << " lanes16 " << lanes16 << " head " << h << " cell "
                    << r << ": " << g << " vs dots_f16 " << one[size_t(r)] << ", ref " << ref[size_t(h * ldo + r)];
              }
            }
          }
        }
      }
    }
  }
}

TEST(AttnBatched, StagedDecodeHasTheScalarBits) {
  const int64_t hq = 6, hkv = 2, d = 128, n_cells = 700;
  std::mt19937 rng(24);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> q(size_t(d * hq));
  for (auto& x : q) x = val(rng);
  std::vector<uint16_t> kc(size_t(n_cells * hkv * d)), vc(kc.size());
  for (auto& h : kc) h = f32_to_f16(val(rng));
  for (auto& h : vc) h = f32_to_f16(val(rng));
  // sequence 0 in most cells (positions in cell order), sequence 1 in every 7th, one cell empty
  std::vector<int32_t> info(size_t(2 * n_cells));
  int32_t pos0 = 0, pos1 = 0;
  for (int64_t c = 0; c < n_cells; ++c) {
    const bool other = c % 7 == 3, empty = c == 100;
    info[size_t(2 * c)] = empty ? -1 : other ? pos1++ : pos0++;
    info[size_t(2 * c + 1)] = empty ? -1 : other ? 1 : 0;
  }
  const std::vector<int32_t> tok = {pos0 - 1, 0};
  auto run = [&](Isa isa, int threads, int32_t window) {
    set_isa(isa);
    return test::attention_output({hq, hkv, d, 0.088f, window}, q.data(), DType::F16, kc.data(), DType::F16, vc.data(),
                                  tok, info, threads);
  };
  const Isa before = selected_isa();
  for (int32_t window : {0, 300}) {
    const std::vector<float> want = run(Isa::scalar, 1, window);
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
      for (int threads : {1, 3}) {
        const std::vector<float> got = run(isa, threads, window);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_TRUE(same_bits(got[i], want[i])) << isa_name(isa) << " threads " << threads << " window " << window
                                                  << " i " << i << ": " << got[i] << " vs " << want[i];
      }
  }
  set_isa(before);
}

// softmax_exp's scalar form: each score's exponential (0 for -inf) in chunks of 16, the chunks' sums
// (reduce_add16) added in order into `sum`.
std::vector<float> scalar_softmax_exp(std::vector<float> s, float mx, double& sum) {
  sum = 0.0;
  for (size_t c = 0; c < s.size(); c += 16) {
    for (size_t j = c; j < c + 16; ++j) s[j] = s[j] == -INFINITY ? 0.0f : llama_order::expf_avx512(s[j] - mx);
    sum += double(llama_order::reduce_add16(s.data() + c));
  }
  return s;
}

TEST(AttnBatched, SoftmaxExpEqualsTheScalarPolynomial) {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> val(-260.0f, 0.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    std::vector<float> s(160);
    for (auto& x : s) x = val(rng);
    s[3] = s[40] = -INFINITY;
    s[7] = 0.0f;
    s[8] = -192.5f;
    s[9] = -0.0f;
    for (int i = 150; i < 160; ++i) s[size_t(i)] = -INFINITY;  // a padded last chunk
    const float mx = 0.0f;
    double want_sum = 0.0;
    const std::vector<float> want = scalar_softmax_exp(s, mx, want_sum);
    std::vector<float> got = s;
    const double sum = k->softmax_exp(got.data(), int64_t(got.size()), mx);
    EXPECT_EQ(sum, want_sum);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << i << " s=" << s[i];
  }
}

// A row of 37 chunks (AVX-512 reduces 16 chunks' sums at once, then adds them in order): the same
// exponentials and the same double sum as the scalar chunk-by-chunk loop.
TEST(AttnBatched, SoftmaxExpOfLongRowsEqualsTheScalarChunkLoop) {
  std::mt19937 rng(33);
  std::normal_distribution<float> val(-6.0f, 4.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {256, 592}) {
      std::vector<float> s(static_cast<size_t>(n));
      for (auto& x : s) x = std::min(val(rng), 0.0f);
      s[5] = s[300 % n] = -INFINITY;
      for (int64_t i = n - 9; i < n; ++i) s[size_t(i)] = -INFINITY;  // a padded last chunk
      const float mx = -0.5f;
      double want_sum = 0.0;
      const std::vector<float> want = scalar_softmax_exp(s, mx, want_sum);
      std::vector<float> got = s;
      EXPECT_EQ(k->softmax_exp(got.data(), n, mx), want_sum) << "n " << n;
      for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "n " << n << " at " << i;
    }
  }
}

// The block path's exp_sum_block (AVX2: four vectors a step, 2^n in one product where every n of a step lies in
// [-126, 127], expf8's two products otherwise) gives softmax_exp's values and sum: rows whose steps all take the
// one product (scores within 80 of the maximum), rows with -inf cells, scores far below the maximum (n < -126:
// subnormal and zero results), single cells just past the range among near ones, and a lone 16-cell step at the end,
// over lengths that end inside and at the edges of the steps and of the kept chunk sums' segments.
TEST(AttnBatched, BlockExpSumEqualsSoftmaxExp) {
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> near(-80.0f, 0.0f), wide(-200.0f, 0.0f);
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->exp_sum_block) continue;
    SCOPED_TRACE(k->name);
    for (int64_t n : {16, 32, 48, 1024, 1040, 2064}) {
      for (int kind = 0; kind < 4; ++kind) {
        std::vector<float> s(static_cast<size_t>(n));
        for (auto& x : s) x = kind == 1 ? wide(rng) : near(rng);
        if (kind == 2) {
          s[size_t(n / 2)] = -INFINITY;
          s[size_t(n - 1)] = -INFINITY;
          s[0] = -0.0f;
        }
        if (kind == 1) s[size_t(n / 3)] = -104.0f;  // 2^n subnormal
        if (kind == 3)  // lone cells just past the one product's range among near ones: n = -127, -128, -137
          for (int64_t i = 3; i < n; i += 29) s[size_t(i)] = i % 3 == 0 ? -87.9f : i % 3 == 1 ? -88.6f : -95.0f;
        const float mx = 0.25f;
        std::vector<float> want = s, got = s;
        const double want_sum = k->softmax_exp(want.data(), n, mx);
        EXPECT_EQ(k->exp_sum_block(got.data(), n, mx), want_sum) << "n " << n << " kind " << kind;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_TRUE(same_bits(got[i], want[i])) << "n " << n << " kind " << kind << " at " << i << " s=" << s[i];
      }
    }
  }
}

// accumulate_reduce_f16 gives accumulate_f16 into zeroed 64 lanes, then reduce_lanes, bit for bit: cells fewer
// than, as many as and more than the lanes, gathered out of order, p with zeros and signs.
TEST(AttnBatched, FusedVLanesEqualAccumulateThenReduce) {
  std::mt19937 rng(41);
  std::normal_distribution<float> val(0.0f, 1.0f);
  bool ran = false;
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->accumulate_reduce_f16) continue;
    SCOPED_TRACE(k->name);
    ran = true;
    const int64_t n_rows = 300;
    for (int64_t dv : {64, 128, 16})
      for (int64_t n : {1, 7, 63, 64, 65, 128, 200}) {
        std::vector<uint16_t> v(size_t(n_rows * dv));
        for (auto& h : v) h = f32_to_f16(val(rng));
        std::vector<int32_t> cells(static_cast<size_t>(n));
        for (auto& c : cells) c = int32_t(rng() % n_rows);
        std::vector<float> p(static_cast<size_t>(n));
        for (auto& x : p) x = rng() % 5 == 0 ? 0.0f : val(rng);
        const auto* vb = reinterpret_cast<const uint8_t*>(v.data());
        const uint64_t stride = uint64_t(dv) * 2;
        std::vector<float> acc(size_t(64 * dv), 0.0f), want(static_cast<size_t>(dv)), got(static_cast<size_t>(dv));
        k->accumulate_f16(p.data(), vb, stride, cells.data(), n, 64, dv, acc.data());
        k->reduce_lanes(acc.data(), 64, std::min<int64_t>(64, n), dv, want.data());
        k->accumulate_reduce_f16(p.data(), vb, stride, cells.data(), n, dv, got.data());
        for (int64_t i = 0; i < dv; ++i)
          ASSERT_TRUE(same_bits(got[size_t(i)], want[size_t(i)])) << "dv " << dv << " n " << n << " i " << i;
      }
  }
  if (host_supports(Isa::avx512)) {
    EXPECT_TRUE(ran) << "the AVX-512 table has no accumulate_reduce_f16";
  }
}

TEST(AttnBatched, LaneReductionAndF16StoreEqualTheScalarForms) {
  std::mt19937 rng(23);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t lanes : {16, 64})
      for (int64_t used : {int64_t(1), int64_t(5), int64_t(16), lanes})
        for (int64_t dv : {64, 128, 40}) {
          std::vector<float> acc(static_cast<size_t>(lanes * dv));
          for (auto& x : acc) x = val(rng);
          std::vector<float> got(static_cast<size_t>(dv)), t(16);
          k->reduce_lanes(acc.data(), lanes, used, dv, got.data());
          auto at = [&](int64_t lane, int64_t i) { return lane < used ? acc[size_t(lane * dv + i)] : 0.0f; };
          for (int64_t i = 0; i < dv; ++i) {
            for (int l = 0; l < 16; ++l)
              t[size_t(l)] = lanes == 16 ? at(l, i) : (at(l, i) + at(32 + l, i)) + (at(16 + l, i) + at(48 + l, i));
            ASSERT_TRUE(same_bits(got[size_t(i)], llama_order::reduce_add16(t.data())))
                << "lanes " << lanes << " used " << used << " dv " << dv << " i " << i;
          }
        }
    std::vector<float> x(1000);
    for (auto& v : x) v = val(rng) * std::ldexp(1.0f, int(rng() % 40) - 25);
    x[0] = 70000.0f;
    x[1] = 65520.0f;
    x[2] = 3.0e-8f;
    std::vector<uint16_t> got(x.size() + 1, 0xABCD);
    k->to_f16(x.data(), got.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], f32_to_f16(x[i])) << "x = " << x[i];
    EXPECT_EQ(got.back(), 0xABCD) << "wrote past n";
  }
}

std::vector<const AttnKernels*> block_kernels() {
  std::vector<const AttnKernels*> v;
  for (const AttnKernels* k : batched_kernels())
    if (k->widen_f16 && k->dots_f32_lanes16 && k->attend_v_lanes16) v.push_back(k);
  return v;
}

TEST(AttnBatched, BlockDotsEqualTheScalarTinyBlasOrder) {
  if (host_supports(Isa::avx512) || host_supports(Isa::avx2)) {
    ASSERT_FALSE(block_kernels().empty()) << "AVX-512 and AVX2 have the block helpers";
  }
  std::mt19937 rng(24);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t dk : {64, 128}) {
      const int64_t n_cells = 101, stride = dk + 16;  // rows with a gap, cells out of order
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng) * 3.0f);
      std::vector<int32_t> cells;
      for (int32_t c = n_cells - 1; c >= 0; c -= 2) cells.push_back(c);
      for (int32_t c = 0; c < n_cells; c += 2) cells.push_back(c);
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data());
      for (int64_t n : {1, 15, 17, 100}) {
        const int64_t ldk = dk + 8;
        std::vector<float> wide(size_t(n * ldk), -7.0f);
        k->widen_f16(base, uint64_t(stride) * 2, cells.data(), n, dk, wide.data(), ldk);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < ldk; ++i) {
            const float want = i < dk ? f16_to_f32(cache[size_t(cells[size_t(r)] * stride + i)]) : -7.0f;
            ASSERT_TRUE(same_bits(wide[size_t(r * ldk + i)], want)) << "widen row " << r << " i " << i;
          }
        for (int64_t m : {1, 3, 4, 5, 16}) {
          const int64_t ldq = dk + 16, ldo = n + 5;
          std::vector<float> q(size_t(m * ldq));
          for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
          std::vector<float> got(size_t(m * ldo), -3.0f);
          std::vector<int64_t> rows(static_cast<size_t>(m));  // per query: n, or fewer
          for (int64_t j = 0; j < m; ++j)
            rows[size_t(j)] = j % 3 == 1 ? n / 2 : j % 3 == 2 ? std::max<int64_t>(0, n - 3) : n;
          k->dots_f32_lanes16(wide.data(), ldk, rows.data(), q.data(), ldq, m, dk, got.data(), ldo);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t r = 0; r < ldo; ++r) {
              const float* qj = q.data() + j * ldq;
              const bool live = r < rows[size_t(j)];
              const float want = live ? llama_order::dot_lanes16(wide.data() + r * ldk, qj, dk) : -3.0f;
              ASSERT_TRUE(same_bits(got[size_t(j * ldo + r)], want))
                  << "dk " << dk << " n " << n << " m " << m << " query " << j << " cell " << r;
              if (live) {  // and the per-cell f16 helper the block path replaces
                ASSERT_TRUE(same_bits(want, k->dot_f16_lanes16(cache.data() + cells[size_t(r)] * stride, qj, dk)));
              }
            }
        }
      }
    }
  }
}

TEST(AttnBatched, BlockValueAccumulationEqualsTheLanesAndTheirReduction) {
  std::mt19937 rng(25);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t dv : {64, 128, 80, 40}) {
      const int64_t n_max = 100, ldv = dv + 16, ldp = n_max + 12, lane_rows = 7;  // rows stored lane by lane
      std::vector<float> v(size_t(16 * lane_rows * ldv));
      for (auto& x : v) x = f16_to_f32(f32_to_f16(val(rng)));
      auto row = [&](int64_t r) { return v.data() + ((r % 16) * lane_rows + r / 16) * ldv; };
      row(60)[3] = INFINITY;  // seen only by the queries with n_vis > 60
      for (int64_t m : {1, 3, 4, 5, 9}) {
        std::vector<float> p(size_t(m * ldp));
        for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
        p[size_t(2)] = 0.0f;
        std::vector<int64_t> n_vis(static_cast<size_t>(m));
        const int64_t counts[] = {17, 100, 1, 15, 0, 60, 61, 16, 33};
        for (int64_t j = 0; j < m; ++j) n_vis[size_t(j)] = counts[(j + m) % 9];
        std::vector<float> got(size_t(m * dv + 1), -5.0f);
        std::vector<float*> outs;
        for (int64_t j = 0; j < m; ++j) outs.push_back(got.data() + j * dv);
        k->attend_v_lanes16(p.data(), ldp, n_vis.data(), m, v.data(), ldv, lane_rows, dv, outs.data());
        EXPECT_EQ(got.back(), -5.0f) << "wrote past the last row";
        for (int64_t j = 0; j < m; ++j) {
          const int64_t nj = n_vis[size_t(j)];
          // the scalar form: 16 lane accumulators in cell order, then reduce_add16
          std::vector<float> acc(size_t(16 * dv), 0.0f);
          for (int64_t r = 0; r < nj; ++r)
            for (int64_t i = 0; i < dv; ++i)
              acc[size_t((r % 16) * dv + i)] =
                  std::fma(row(r)[i], p[size_t(j * ldp + r)], acc[size_t((r % 16) * dv + i)]);
          // and the per-pair helpers: accumulate_f16 over the f16 rows, reduce_lanes
          std::vector<uint16_t> half(size_t(n_max * dv));
          for (int64_t r = 0; r < n_max; ++r)
            for (int64_t i = 0; i < dv; ++i) half[size_t(r * dv + i)] = f32_to_f16(row(r)[i]);
          std::vector<int32_t> cells(static_cast<size_t>(n_max));
          for (int32_t c = 0; c < n_max; ++c) cells[size_t(c)] = c;
          std::vector<float> lanes(size_t(16 * dv), 0.0f), per_pair(static_cast<size_t>(dv));
          k->accumulate_f16(p.data() + j * ldp, reinterpret_cast<const uint8_t*>(half.data()), uint64_t(dv) * 2,
                            cells.data(), nj, 16, dv, lanes.data());
          k->reduce_lanes(lanes.data(), 16, std::min<int64_t>(16, nj), dv, per_pair.data());
          float t[16];
          for (int64_t i = 0; i < dv; ++i) {
            for (int l = 0; l < 16; ++l) t[l] = acc[size_t(l * dv + i)];
            const float want = llama_order::reduce_add16(t);
            ASSERT_TRUE(same_bits(got[size_t(j * dv + i)], want))
                << "dv " << dv << " m " << m << " query " << j << " n_vis " << nj << " i " << i;
            ASSERT_TRUE(same_bits(want, per_pair[size_t(i)])) << "per-pair helpers, i " << i;
          }
          if (nj <= 60) {
            ASSERT_TRUE(std::isfinite(got[size_t(j * dv + 3)])) << "a cell past n_vis leaked in";
          }
        }
      }
    }
  }
}

// The block path walks its cells in chunks: attend_v_lanes16_keep over the
// chunks (each laid out lane by lane, the accumulators kept across them) and
// reduce_lanes after the last must give attend_v_lanes16's bits over all cells.
TEST(AttnBatched, ChunkedValueAccumulationEqualsOnePass) {
  if (host_supports(Isa::avx512) || host_supports(Isa::avx2)) {
    for (const AttnKernels* k : block_kernels()) EXPECT_NE(k->attend_v_lanes16_keep, nullptr) << k->name;
  }
  std::mt19937 rng(27);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    if (!k->attend_v_lanes16_keep || !k->reduce_lanes) continue;
    for (int64_t dv : {128, 64, 80}) {
      const int64_t n_max = 150, ldv = dv + 16, ldp = n_max + 12;
      std::vector<float> rows(size_t(n_max * dv));
      for (auto& x : rows) x = f16_to_f32(f32_to_f16(val(rng)));
      auto lay = [&](int64_t r0, int64_t n, std::vector<float>& out) {  // cells r0.. lane by lane
        const int64_t lane_rows = (n + 15) / 16;
        out.assign(size_t(16 * lane_rows * ldv), -9.0f);
        for (int64_t r = 0; r < n; ++r)
          std::memcpy(out.data() + ((r % 16) * lane_rows + r / 16) * ldv, rows.data() + (r0 + r) * dv, size_t(dv) * 4);
        return lane_rows;
      };
      for (int64_t m : {1, 2, 5, 7}) {
        std::vector<float> p(size_t(m * ldp));
        for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
        std::vector<int64_t> n_vis(static_cast<size_t>(m));
        const int64_t counts[] = {150, 31, 0, 149, 64, 1, 97};
        for (int64_t j = 0; j < m; ++j) n_vis[size_t(j)] = counts[(j + m) % 7];
        std::vector<float> whole;
        const int64_t all_rows = lay(0, n_max, whole);
        std::vector<float> want(size_t(m * dv)), got(size_t(m * dv), -5.0f);
        std::vector<float*> outs;
        for (int64_t j = 0; j < m; ++j) outs.push_back(want.data() + j * dv);
        k->attend_v_lanes16(p.data(), ldp, n_vis.data(), m, whole.data(), ldv, all_rows, dv, outs.data());
        for (int64_t chunk : {32, 48, 128}) {
          std::vector<float> acc(size_t(m * 16 * dv), 0.0f), part;
          std::vector<int64_t> nvc(static_cast<size_t>(m));
          for (int64_t c0 = 0; c0 < n_max; c0 += chunk) {
            const int64_t nc = std::min(chunk, n_max - c0);
            const int64_t lane_rows = lay(c0, nc, part);
            for (int64_t j = 0; j < m; ++j) nvc[size_t(j)] = std::clamp<int64_t>(n_vis[size_t(j)] - c0, 0, nc);
            k->attend_v_lanes16_keep(p.data() + c0, ldp, nvc.data(), m, part.data(), ldv, lane_rows, dv, acc.data());
          }
          for (int64_t j = 0; j < m; ++j) k->reduce_lanes(acc.data() + j * 16 * dv, 16, 16, dv, got.data() + j * dv);
          for (int64_t i = 0; i < m * dv; ++i)
            ASSERT_TRUE(same_bits(got[size_t(i)], want[size_t(i)]))
                << "dv " << dv << " m " << m << " chunk " << chunk << " query " << i / dv << " i " << i % dv;
        }
      }
    }
  }
}

TEST(AttnBatched, ScaledMaximumAndProbabilityRoundingEqualTheScalarLoops) {
  std::mt19937 rng(26);
  std::normal_distribution<float> val(0.0f, 4.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    if (!k->scale_max || !k->scale_round_f16) continue;
    const float scale = 0.08838834764f;
    for (int64_t n : {0, 1, 15, 17, 100}) {
      for (int variant = 0; variant < 5; ++variant) {
        std::vector<float> s(size_t(n + 3), 9.0f);
        for (int64_t i = 0; i < n; ++i) s[size_t(i)] = variant >= 2 ? -std::fabs(val(rng)) - 1.0f : val(rng);
        if (n > 5) {
          s[3] = NAN;
          if (variant == 2) s[1] = -0.0f, s[size_t(n - 1)] = 0.0f;  // a zero maximum: the first zero wins
          if (variant == 3) s[1] = 0.0f, s[size_t(n - 1)] = -0.0f;
          if (variant == 4) s[size_t(n - 2)] = -INFINITY;
        }
        std::vector<float> want = s;
        float want_mx = -INFINITY;
        for (int64_t i = 0; i < n; ++i) {
          want[size_t(i)] *= scale;
          want_mx = std::max(want_mx, want[size_t(i)]);
        }
        std::vector<float> got = s;
        const float mx = k->scale_max(got.data(), n, scale);
        ASSERT_TRUE(same_bits(mx, want_mx)) << "n " << n << " variant " << variant << ": " << mx << " vs " << want_mx;
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "n " << n << " i " << i;
        const float inv = 1.0f / 37.0f;
        for (int64_t i = 0; i < n; ++i) want[size_t(i)] = f16_to_f32(f32_to_f16(want[size_t(i)] * inv));
        k->scale_round_f16(got.data(), n, inv);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "n " << n << " i " << i;
      }
    }
  }
}

// A prompt's ATTENTION (-fa 0) at depth over an f16 (or q8_0) K and an f16 V takes the block path on AVX-512
// and AVX2 (ops/attention.cpp, attention_blocks): several blocks of query rows, each walking more cells than
// one chunk (kBlockCells), the scores' maximum folded chunk by chunk and p rounded chunk by chunk; V in one pass
// with the lanes reduced in registers up to kBlockVCells (1024) cells, in lane-major chunks beyond. Every ISA's
// result has the bits of the scalar per-(token, head) path, with and without a sliding window, at 1 and 3
// threads, for 128-dim heads in groups of 2 and 64-dim heads in groups of 3, at depths on both sides of 1024.
TEST(AttnBatched, BlockPromptAtDepthHasTheScalarBits) {
  struct Case {
    int64_t hq, hkv, d;
    DType k_type;
    int64_t depth;
  };
  for (const Case& cs :
       {Case{4, 2, 128, DType::F16, 530}, Case{3, 1, 64, DType::F16, 530}, Case{4, 2, 64, DType::Q8_0, 530},
        Case{4, 2, 128, DType::F16, 1100}, Case{3, 1, 64, DType::F16, 1100}}) {
    SCOPED_TRACE(std::string("d ") + std::to_string(cs.d) + " " + dtype_name(cs.k_type) + " depth " +
                 std::to_string(cs.depth));
    const int64_t depth = cs.depth, T = 70, n_cells = (depth + T) * 9 / 8 + 20, e = cs.hkv * cs.d;
    std::mt19937 rng(28);
    std::normal_distribution<float> val(0.0f, 1.0f);
    std::vector<float> q(size_t(cs.d * cs.hq * T)), kf(size_t(n_cells * e));
    for (auto& x : q) x = val(rng) * 2.0f;
    for (auto& x : kf) x = val(rng);
    std::vector<uint8_t> kc(size_t(row_bytes(cs.k_type, e) * uint64_t(n_cells)));
    quantize_rows(cs.k_type, kf.data(), kc.data(), n_cells, e);
    std::vector<uint16_t> vc(size_t(n_cells * e));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    // sequence 0 at positions in cell order (depth cached, then the batch), sequence 1 in every 9th cell, one
    // cell empty, the rest unused
    std::vector<int32_t> info(size_t(2 * n_cells), -1);
    int32_t pos0 = 0, pos1 = 0;
    for (int64_t c = 0; c < n_cells - 5; ++c) {
      if (c == 200) continue;
      const bool other = c % 9 == 4 || pos0 >= depth + T;
      info[size_t(2 * c)] = other ? pos1++ : pos0++;
      info[size_t(2 * c + 1)] = other ? 1 : 0;
    }
    ASSERT_EQ(pos0, depth + T);
    std::vector<int32_t> tok(size_t(2 * T));
    for (int64_t t = 0; t < T; ++t) tok[size_t(2 * t)] = int32_t(depth + t), tok[size_t(2 * t + 1)] = 0;
    auto run = [&](Isa isa, int threads, int32_t window) {
      set_isa(isa);
      return test::attention_output({cs.hq, cs.hkv, cs.d, 0.0f, window}, q.data(), cs.k_type, kc.data(), DType::F16,
                                    vc.data(), tok, info, threads);
    };
    const Isa before = selected_isa();
    for (int32_t window : {0, 300}) {
      const std::vector<float> want = run(Isa::scalar, 1, window);
      for (float x : want) ASSERT_TRUE(std::isfinite(x));
      for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
        for (int threads : {1, 3}) {
          const std::vector<float> got = run(isa, threads, window);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << isa_name(isa) << " threads " << threads << " window " << window
                                                    << " i " << i << ": " << got[i] << " vs " << want[i];
        }
    }
    set_isa(before);
  }
}

// dots_f32_lanes16 takes K transposed (cells in lanes) for dk up to 256 on AVX-512 (64 on AVX2: tiles of up to 6
// queries, so 7 queries end in a tile of one) and tiles of single cells beyond: both give
// llama_order::dot_lanes16's bits for every head size, row count and partial row.
TEST(AttnBatched, BlockDotsOfEveryHeadSizeEqualTheScalarOrder) {
  std::mt19937 rng(29);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t dk : {16, 48, 80, 256, 272, 512}) {
      for (int64_t n : {1, 6, 37}) {
        const int64_t ldk = dk + 16, ldq = dk + 32, ldo = n + 3;
        std::vector<float> kr(size_t(n * ldk));
        for (auto& x : kr) x = f16_to_f32(f32_to_f16(val(rng)));
        for (int64_t m : {2, 5, 7, 8}) {
          std::vector<float> q(size_t(m * ldq)), got(size_t(m * ldo), -3.0f);
          for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
          std::vector<int64_t> rows(static_cast<size_t>(m));
          for (int64_t j = 0; j < m; ++j) rows[size_t(j)] = j % 4 == 1 ? n / 2 : j % 4 == 3 ? n - 1 : n;
          k->dots_f32_lanes16(kr.data(), ldk, rows.data(), q.data(), ldq, m, dk, got.data(), ldo);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t r = 0; r < ldo; ++r) {
              const bool live = r < rows[size_t(j)];
              const float want = live ? llama_order::dot_lanes16(kr.data() + r * ldk, q.data() + j * ldq, dk) : -3.0f;
              ASSERT_TRUE(same_bits(got[size_t(j * ldo + r)], want))
                  << "dk " << dk << " n " << n << " m " << m << " query " << j << " cell " << r;
            }
        }
      }
    }
  }
}

// The block path's shapes (ops/attention.cpp: up to 64 query rows x 256-cell chunks, dk 64 and 128 unrolled):
// K transposed per group of cells gives llama_order::dot_lanes16's bits for queries that see none, one, part
// of a group or all of the chunk, an odd query count, a last group past the rows, and signed zeros and
// products that cancel in K and q (the same FMA chains and reduce_add16 adds, so the same signs); nothing past
// a query's cells is written.
TEST(AttnBatched, BlockDotsOfBlockShapesEqualTheScalarOrder) {
  std::mt19937 rng(31);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t dk : {64, 128}) {
      for (int64_t n : {256, 203}) {
        const int64_t ldk = dk, ldq = dk, ldo = 256 + 16;
        std::vector<float> kr(size_t(n * ldk));
        for (auto& x : kr) x = f16_to_f32(f32_to_f16(val(rng)));
        for (int64_t i = 0; i < dk; i += 5) kr[size_t(i)] = (i % 2) ? -0.0f : 0.0f;  // cell 0: signed zeros
        for (int64_t i = 0; i < dk; ++i) kr[size_t(ldk + i)] = i < 16 ? -kr[size_t(2 * ldk + i)] : 0.0f;
        for (int64_t m : {63, 64}) {
          std::vector<float> q(size_t(m * ldq)), got(size_t(m * ldo), -3.0f);
          for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
          std::vector<int64_t> rows(static_cast<size_t>(m));
          const int64_t counts[] = {n, 0, 1, 31, 32, 33, 8, 9, n - 1, 17};
          for (int64_t j = 0; j < m; ++j) rows[size_t(j)] = j < 10 ? counts[j] : n - (j * 7) % 40;
          k->dots_f32_lanes16(kr.data(), ldk, rows.data(), q.data(), ldq, m, dk, got.data(), ldo);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t r = 0; r < ldo; ++r) {
              const bool live = r < rows[size_t(j)];
              const float want = live ? llama_order::dot_lanes16(kr.data() + r * ldk, q.data() + j * ldq, dk) : -3.0f;
              ASSERT_TRUE(same_bits(got[size_t(j * ldo + r)], want))
                  << "dk " << dk << " n " << n << " m " << m << " query " << j << " cell " << r;
            }
        }
      }
    }
  }
}

// The flash decode's in-place f16 forms (kernels/attn_flash.h) take dk 64 and 128 unrolled and up to 2 rows of
// 128 V columns in one pass (AVX-512; ops/attention_flash.cpp then relies on the hardware prefetcher): the same
// arithmetic as the general forms. A dk of 64 (128) gives the bits of a dk of 80 (144) whose last 16 q values are
// 0 (the general loop, one more FMA of +0 per accumulator); 128 columns of V the bits of two 64-column calls.
// Every ISA the host has, 1-4 rows, a tile of 64 cells and one of 23 (a partial 4-cell group), cells out of order.
TEST(AttnBatched, FlashInPlaceUnrolledFormsGiveTheGeneralFormsBits) {
  std::mt19937 rng(31);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<const FlashKernels*> sets;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    sets.push_back(&flash_kernels());
  }
  set_isa(before);
  sets.push_back(&ref_flash_kernels());
  constexpr int64_t kCells = 90, kE = 2 * 144, kLd = 72;  // a cache row holds 2 heads of up to 144 values
  std::vector<uint16_t> rows(size_t(kCells * kE));
  for (auto& x : rows) x = f32_to_f16(val(rng));
  const uint64_t stride = kE * 2;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(rows.data()) + 144 * 2;  // the second head
  for (const FlashKernels* fk : sets)
    for (int64_t n : {64, 23})
      for (int64_t m = 1; m <= kFlashDirectRows; ++m) {
        SCOPED_TRACE(fmt::format("{} n {} m {}", fk->name, n, m));
        std::vector<int32_t> cells(static_cast<size_t>(n));
        for (auto& c : cells) c = int32_t(rng() % kCells);
        for (int64_t dk : {64, 128}) {
          const int64_t dx = dk + 16;
          std::vector<float> q(size_t(m * dx), 0.0f);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t i = 0; i < dk; ++i) q[size_t(j * dx + i)] = val(rng);
          std::vector<float> s(size_t(m * kLd), -7.0f), sx = s;
          fk->dots_f16(q.data(), dx, m, base, stride, cells.data(), n, dk, 0.125f, s.data(), kLd);
          fk->dots_f16(q.data(), dx, m, base, stride, cells.data(), n, dx, 0.125f, sx.data(), kLd);
          for (size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(same_bits(s[i], sx[i])) << "dk " << dk << " i " << i;
        }
        std::vector<float> p(size_t(m * kLd));
        for (auto& x : p) x = std::fabs(val(rng));
        std::vector<float> acc(size_t(m * 136));
        for (auto& x : acc) x = val(rng);
        std::vector<float> halves = acc;
        fk->accum_f16(p.data(), kLd, m, base, stride, cells.data(), n, 128, acc.data(), 136);
        fk->accum_f16(p.data(), kLd, m, base, stride, cells.data(), n, 64, halves.data(), 136);
        fk->accum_f16(p.data(), kLd, m, base + 128, stride, cells.data(), n, 64, halves.data() + 64, 136);
        for (size_t i = 0; i < acc.size(); ++i) ASSERT_TRUE(same_bits(acc[i], halves[i])) << "accum i " << i;
      }
}

// The -fa 0 decode's V side for the query heads of one kv head at once (accumulate_f16_heads, ops/attention.cpp's
// heads_output): every head's lanes get accumulate_f16's bits, from accumulators that already hold values (the
// op calls it block after block), for 1-5 heads, head sizes that take the unmasked tiles (64, 128, 80, 48, 16) and
// the fallback (40 and 36 on AVX-512, 36 on AVX2), 16 and 64 lanes, 37, 300 and 2600 cells out of order (2600: the
// AVX-512 form's 1024-cell chunks, two whole and a part), rows up to 1 KiB apart and wider (AVX2's V prefetch
// hint follows the stride); and calls over whole 64s of cells give the bits of one call.
TEST(AttnBatched, HeadsAccumulationEqualsAccumulateF16PerHead) {
  if (host_supports(Isa::avx512)) {
    bool any = false;
    for (const AttnKernels* k : batched_kernels()) any = any || k->accumulate_f16_heads;
    ASSERT_TRUE(any) << "AVX-512 has accumulate_f16_heads";
  }
  std::mt19937 rng(41);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->accumulate_f16_heads) continue;
    for (int64_t dv : {64, 128, 80, 48, 16, 40, 36})
      for (int64_t n_cells : {37, 300, 2600}) {
        // Two kv heads per row and a gap (the second head is read); at 300 cells, rows over 1 KiB apart.
        const int64_t stride = 2 * dv + (n_cells == 300 ? 520 : 8);
        std::vector<uint16_t> cache(size_t(n_cells * stride));
        for (auto& h : cache) h = f32_to_f16(val(rng));
        const auto* base = reinterpret_cast<const uint8_t*>(cache.data() + dv);
        std::vector<int32_t> cells;
        for (int32_t c = n_cells - 1; c >= 0; c -= 3) cells.push_back(c);
        for (int32_t c = 0; c < n_cells; ++c)
          if ((n_cells - 1 - c) % 3 != 0) cells.push_back(c);
        const int64_t n = int64_t(cells.size()), ldp = n + 5;
        for (int64_t nh = 1; nh <= 5; ++nh)
          for (int64_t lanes : {16, 64}) {
            SCOPED_TRACE(fmt::format("{} dv {} cells {} heads {} lanes {}", k->name, dv, n_cells, nh, lanes));
            std::vector<float> p(size_t(nh * ldp));
            for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
            std::vector<float> start(size_t(nh * lanes * dv));
            for (auto& x : start) x = val(rng);
            std::vector<float> want = start, got = start, chunked = start;
            for (int64_t h = 0; h < nh; ++h)
              k->accumulate_f16(p.data() + h * ldp, base, uint64_t(stride) * 2, cells.data(), n, lanes, dv,
                                want.data() + h * lanes * dv);
            k->accumulate_f16_heads(p.data(), ldp, nh, base, uint64_t(stride) * 2, cells.data(), n, lanes, dv,
                                    got.data());
            for (int64_t c0 = 0; c0 < n; c0 += 128)
              k->accumulate_f16_heads(p.data() + c0, ldp, nh, base, uint64_t(stride) * 2, cells.data() + c0,
                                      std::min<int64_t>(128, n - c0), lanes, dv, chunked.data());
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_TRUE(same_bits(got[i], want[i])) << "i " << i << ": " << got[i] << " vs " << want[i];
              ASSERT_TRUE(same_bits(chunked[i], want[i])) << "chunked i " << i;
            }
          }
      }
  }
}

// accumulate_f16_groups (every kv head of a token's V in one walk over whole rows, AVX-512 where the decode
// prefetches) gives each head the bits of accumulate_f16_heads over its own kv head's slice: Qwen3's row (8 kv heads
// x 2 heads x 128, 2 KiB: chunks of 256 cells, so 700 cells take three), Llama-3.2-1B's (8 x 4 x 64), SmolLM2's
// (3 x 3 x 64), 80 values (a 64- and a 16-column tile), 48 (three 16s), 40 (the masked fallback), from accumulators
// that already hold values, 16 and 64 lanes, cells out of order, the groups from kv head 1 of a row with a gap; and
// in parts of the lanes, each writing its own.
TEST(AttnBatched, GroupsAccumulationEqualsHeadsPerKvHead) {
  if (host_supports(Isa::avx512)) {
    bool any = false;
    for (const AttnKernels* k : batched_kernels()) any = any || k->accumulate_f16_groups;
    ASSERT_TRUE(any) << "AVX-512's prefetch table has accumulate_f16_groups";
  }
  std::mt19937 rng(83);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->accumulate_f16_groups) continue;
    struct Case {
      int64_t groups, m, dv;
    };
    for (const Case cs :
         {Case{8, 2, 128}, Case{8, 4, 64}, Case{3, 3, 64}, Case{2, 3, 80}, Case{3, 1, 48}, Case{3, 2, 40}}) {
      const int64_t groups = cs.groups, m = cs.m, dv = cs.dv, heads = groups * m;
      const int64_t stride = (groups + 1) * dv + 8, n_cells = 700;  // the groups from kv head 1, a gap after
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data() + dv);
      std::vector<int32_t> cells;
      for (int32_t c = 0; c < n_cells; ++c) cells.push_back(c % 5 == 3 ? n_cells - 1 - c : c);
      for (int64_t n : {37, 700})
        for (int64_t lanes : {16, 64}) {
          SCOPED_TRACE(fmt::format("{} groups {} m {} dv {} n {} lanes {}", k->name, groups, m, dv, n, lanes));
          const int64_t ldp = n + 3;
          std::vector<float> p(size_t(heads * ldp));
          for (auto& x : p) x = f16_to_f32(f32_to_f16(std::fabs(val(rng)) * 0.1f));
          std::vector<float> want(size_t(heads * lanes * dv));
          for (auto& x : want) x = val(rng);
          const std::vector<float> before = want;
          std::vector<float> got = want;
          for (int64_t g = 0; g < groups; ++g)
            k->accumulate_f16_heads(p.data() + g * m * ldp, ldp, m, base + g * dv * 2, uint64_t(stride) * 2,
                                    cells.data(), n, lanes, dv, want.data() + g * m * lanes * dv);
          k->accumulate_f16_groups(p.data(), ldp, groups, m, base, uint64_t(stride) * 2, uint64_t(dv) * 2, cells.data(),
                                   n, lanes, 0, lanes, dv, got.data());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << "i " << i << ": " << got[i] << " vs " << want[i];
          if (dv % 16 != 0) continue;
          // A split decode's thread takes a part of the lanes (attention_split_pairs): those lanes' bits, the rest
          // untouched. Three uneven parts; with 37 cells the last 64-lane part has none.
          const int64_t cut[4] = {0, lanes / 3, lanes * 2 / 3 + 1, lanes};
          for (int part = 0; part < 3; ++part) {
            std::vector<float> one = before;
            k->accumulate_f16_groups(p.data(), ldp, groups, m, base, uint64_t(stride) * 2, uint64_t(dv) * 2,
                                     cells.data(), n, lanes, cut[part], cut[part + 1], dv, one.data());
            for (size_t i = 0; i < want.size(); ++i) {
              const int64_t lane = int64_t(i) / dv % lanes;
              const bool inside = lane >= cut[part] && lane < cut[part + 1];
              ASSERT_TRUE(same_bits(one[i], inside ? want[i] : before[i]))
                  << "part " << part << " i " << i << " lane " << lane << ": " << one[i];
            }
          }
        }
    }
  }
}

// A decode's ATTENTION (-fa 0) takes V for the staged heads of a token together (heads_output: heads of 128+
// values from the ISA's heads_min_cells visible cells, AVX-512 at any depth of the staged path, AVX2 from 8192):
// every ISA's result has the bits of the scalar per-cell path, with GQA 2 and 3, at 530, 700 and 8300 cells,
// with a sliding window, at 1 and 2 threads (9 heads on 2 threads: a thread's heads start inside a kv head).
// Heads of 64 and 80 values take the unstaged GQA group path: their K dots through dots_f16_heads, their V per
// pair or through heads_output (heads_small_min_cells: AVX2 always, AVX-512 from 8192 without the decode prefetch
// and always with it; a group of four, heads_small4_min_cells: always), also at SmolLM2's shape past 4096 and 8192
// cells and at Llama-3.2-1B's (its four heads of a kv head in one pass) past 8192. A one-thread decode's K dots go
// through dots_f16_groups where the table has it (AVX2; AVX-512 with the decode prefetch on). AVX-512 runs under
// both decode prefetch choices (its two tables, attn_kernels()), AVX2 too (its whole-row V walk off AMD). Past 2048
// cells 9 heads on 2 threads (8 pool chunks) take the split path (attention_split_pairs): its K dots by (kv head,
// range) through dots_f16_heads (d 64 and 128), its V by (kv head, column part) through accumulate_f16_heads (3 x 2
// parts, d 64 and 128).
TEST(AttnBatched, DecodeHeadsTogetherHaveTheScalarBits) {
  struct Case {
    int64_t hq, hkv, d, n_cells;
  };
  std::mt19937 rng(42);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const Isa before = selected_isa();
  const DecodePrefetch prefetch_before = decode_prefetch_choice();
  for (const Case cs : {Case{8, 4, 128, 700}, Case{9, 3, 128, 530}, Case{4, 2, 128, 8300}, Case{9, 3, 64, 700},
                        Case{4, 4, 80, 300}, Case{32, 8, 64, 300}, Case{16, 8, 128, 300}, Case{4, 2, 80, 300},
                        Case{9, 3, 64, 4200}, Case{9, 3, 64, 8300}, Case{32, 8, 64, 8300}, Case{9, 3, 128, 8300}}) {
    const int64_t hq = cs.hq, hkv = cs.hkv, d = cs.d, n_cells = cs.n_cells;
    std::vector<float> q(size_t(d * hq));
    for (auto& x : q) x = val(rng);
    std::vector<uint16_t> kc(size_t(n_cells * hkv * d)), vc(kc.size());
    for (auto& h : kc) h = f32_to_f16(val(rng));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    std::vector<int32_t> info(size_t(2 * n_cells));
    for (int64_t c = 0; c < n_cells; ++c) info[size_t(2 * c)] = int32_t(c), info[size_t(2 * c + 1)] = 0;
    std::vector<int32_t> tok = {int32_t(n_cells - 1), 0};
    auto run = [&](Isa isa, int threads, int32_t window) {
      set_isa(isa);
      return test::attention_output({hq, hkv, d, 0.088f, window}, q.data(), DType::F16, kc.data(), DType::F16,
                                    vc.data(), tok, info, threads);
    };
    for (int32_t window : {0, 200}) {
      if (n_cells > 1000 && window > 0) continue;  // the deep case once
      const std::vector<float> want = run(Isa::scalar, 1, window);
      for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
        for (DecodePrefetch pf : {DecodePrefetch::off, DecodePrefetch::on})
          for (int threads : {1, 2}) {
            if (pf == DecodePrefetch::on && isa == Isa::scalar) continue;  // no table there
            set_decode_prefetch(pf);
            const std::vector<float> got = run(isa, threads, window);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_TRUE(same_bits(got[i], want[i]))
                  << isa_name(isa) << " prefetch " << (pf == DecodePrefetch::on) << " hq " << hq << " d " << d
                  << " threads " << threads << " window " << window << " i " << i << ": " << got[i] << " vs "
                  << want[i];
          }
    }
  }
  set_decode_prefetch(prefetch_before);
  set_isa(before);
}

// AVX-512's attention table follows the decode prefetch choice (attn_kernels()): with it on (an Intel core) the
// one-thread decode takes its K dots in one walk over whole rows (dots_f16_groups) and heads of under 128 values take
// V together, both from a few hundred cells, and a token's V goes over whole rows too (accumulate_f16_groups), as do
// the staged heads' K dots (groups_staged); with it off (AMD's AVX-512 cores) no walk, and the heads V from 8192
// cells. Both tables are otherwise the same helpers.
// attn_kernels() for `isa` with the decode prefetch on, then off (the choices restored after).
std::pair<const AttnKernels*, const AttnKernels*> tables_by_prefetch(Isa isa) {
  const Isa before = selected_isa();
  const DecodePrefetch prefetch_before = decode_prefetch_choice();
  set_isa(isa);
  set_decode_prefetch(DecodePrefetch::on);
  const AttnKernels* on = attn_kernels();
  set_decode_prefetch(DecodePrefetch::off);
  const AttnKernels* off = attn_kernels();
  set_decode_prefetch(prefetch_before);
  set_isa(before);
  return {on, off};
}

TEST(AttnBatched, Avx512TableFollowsTheDecodePrefetch) {
  if (!host_supports(Isa::avx512)) GTEST_SKIP() << "no AVX-512 on this host";
  const auto [on, off] = tables_by_prefetch(Isa::avx512);
  ASSERT_TRUE(on && off);
  EXPECT_TRUE(on->dots_f16_groups);
  EXPECT_TRUE(on->accumulate_f16_groups);
  EXPECT_TRUE(on->groups_staged);
  EXPECT_FALSE(off->accumulate_f16_groups);
  EXPECT_FALSE(off->groups_staged);
  EXPECT_LT(on->heads_small_min_cells, off->heads_small_min_cells);
  EXPECT_LE(on->groups_min_cells, 4096);
  EXPECT_FALSE(off->dots_f16_groups);
  EXPECT_GT(off->heads_small_min_cells, 4096);
  EXPECT_EQ(on->dots_f16_heads, off->dots_f16_heads);
  EXPECT_EQ(on->accumulate_f16_heads, off->accumulate_f16_heads);
}

#if defined(__x86_64__) || defined(__i386__)
// AVX2's table takes the whole-row V walk (accumulate_f16_groups) where the decode prefetches, except on AMD's cores,
// where that walk measured slower; with the prefetch off, the plain table.
TEST(AttnBatched, Avx2TableTakesTheRowWalkExceptOnAmd) {
  if (!host_supports(Isa::avx2)) GTEST_SKIP() << "no AVX2 on this host";
  const auto [on, off] = tables_by_prefetch(Isa::avx2);
  EXPECT_EQ(on, host_is_amd() ? &avx2::kAttnKernels : &avx2::kAttnKernelsPrefetch);
  EXPECT_EQ(off, &avx2::kAttnKernels);
  EXPECT_TRUE(avx2::kAttnKernelsPrefetch.accumulate_f16_groups);
  EXPECT_FALSE(avx2::kAttnKernels.accumulate_f16_groups);
}
#endif

// Since stop 19 the block path walks V in chunks of kBlockVCells with p rounded into a lane-major copy
// (round_p_lanes) and the lanes outermost (attend_v_lanes16_cells). For every ISA that has them: round_p_lanes
// stores scale_round_f16's values (zeros past each row's cells) at the lane-major places, and the accumulators
// after the chunks equal attend_v_lanes16_keep's over the same chunks, bit for bit: head sizes 128, 64 and 80
// (a masked 16-column part), 1-9 queries with their own cell counts (0, partial lanes, every cell), several
// chunk lengths (one partial lane group among them), accumulators that start non-zero.
TEST(AttnBatched, LaneMajorValueChunksEqualTheRowMajorOnes) {
  if (host_supports(Isa::avx512) || host_supports(Isa::avx2)) {
    for (const AttnKernels* k : block_kernels()) EXPECT_TRUE(k->round_p_lanes && k->attend_v_lanes16_cells) << k->name;
  }
  std::mt19937 rng(33);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : block_kernels()) {
    SCOPED_TRACE(k->name);
    if (!k->round_p_lanes || !k->attend_v_lanes16_cells || !k->attend_v_lanes16_keep) continue;
    for (int64_t dv : {128, 64, 80}) {
      for (int64_t m : {1, 3, 4, 9}) {
        const int64_t n_max = 300, ldv = dv + 16, lds = n_max + 20, ldt = (m + 15) / 16 * 16 + 16;
        std::vector<float> rows(size_t(n_max * dv)), e(size_t(m * lds)), inv(static_cast<size_t>(m));
        for (auto& x : rows) x = f16_to_f32(f32_to_f16(val(rng)));
        for (auto& x : e) x = std::exp(-std::fabs(val(rng)) * 3.0f);
        for (auto& x : inv) x = 1.0f / (50.0f + std::fabs(val(rng)) * 20.0f);
        const int64_t counts[] = {300, 45, 0, 299, 17, 1, 256, 160, 283};
        std::vector<int64_t> n_vis(static_cast<size_t>(m));
        for (int64_t j = 0; j < m; ++j) n_vis[size_t(j)] = counts[(j + m) % 9];
        std::vector<float> acc0(size_t(m * 16 * dv));
        for (auto& x : acc0) x = val(rng);
        for (int64_t chunk : {300, 144, 37}) {
          SCOPED_TRACE(fmt::format("dv {} m {} chunk {}", dv, m, chunk));
          std::vector<float> want = acc0, got = acc0, part, pt, s;
          std::vector<int64_t> nvc(static_cast<size_t>(m));
          for (int64_t c0 = 0; c0 < n_max; c0 += chunk) {
            const int64_t nc = std::min(chunk, n_max - c0), lane_rows = (nc + 15) / 16;
            part.assign(size_t(16 * lane_rows * ldv), -9.0f);
            for (int64_t r = 0; r < nc; ++r)
              std::memcpy(part.data() + ((r % 16) * lane_rows + r / 16) * ldv, rows.data() + (c0 + r) * dv,
                          size_t(dv) * 4);
            for (int64_t j = 0; j < m; ++j) nvc[size_t(j)] = std::clamp<int64_t>(n_vis[size_t(j)] - c0, 0, nc);
            s = e;  // the row-major way: p rounded in place, then attend_v_lanes16_keep
            for (int64_t j = 0; j < m; ++j)
              if (nvc[size_t(j)] > 0) k->scale_round_f16(s.data() + j * lds + c0, nvc[size_t(j)], inv[size_t(j)]);
            k->attend_v_lanes16_keep(s.data() + c0, lds, nvc.data(), m, part.data(), ldv, lane_rows, dv, want.data());
            pt.assign(size_t(16 * lane_rows * ldt), -4.0f);
            k->round_p_lanes(e.data() + c0, lds, nvc.data(), inv.data(), m, nc, lane_rows, pt.data(), ldt);
            for (int64_t j = 0; j < m; ++j)
              for (int64_t r = 0; r < nc; ++r) {
                const float p = pt[size_t(((r % 16) * lane_rows + r / 16) * ldt + j)];
                const float p_want = r < nvc[size_t(j)] ? s[size_t(j * lds + c0 + r)] : 0.0f;
                ASSERT_TRUE(same_bits(p, p_want)) << "p of query " << j << " cell " << c0 + r;
              }
            k->attend_v_lanes16_cells(pt.data(), ldt, nvc.data(), m, part.data(), ldv, lane_rows, dv, got.data());
          }
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << "accumulator " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

// The block path past one V chunk (kBlockVCells = 1024 cells): a 40-token prompt at depth 2300 over an f16 K
// and V (three V chunks, the last partial; K in 256-cell chunks), 128-dim heads in groups of 2 and 64-dim heads
// in groups of 3, with and without a sliding window, 1 and 2 threads: every ISA's result has the bits of the
// scalar per-(token, head) path.
TEST(AttnBatched, BlockPromptPastOneValueChunkHasTheScalarBits) {
  struct Case {
    int64_t hq, hkv, d;
  };
  for (const Case& cs : {Case{4, 2, 128}, Case{3, 1, 64}}) {
    SCOPED_TRACE(fmt::format("d {}", cs.d));
    const int64_t depth = 2300, T = 40, n_cells = depth + T + 7, e = cs.hkv * cs.d;
    std::mt19937 rng(34);
    std::normal_distribution<float> val(0.0f, 1.0f);
    std::vector<float> q(size_t(cs.d * cs.hq * T));
    for (auto& x : q) x = val(rng) * 2.0f;
    std::vector<uint16_t> kc(size_t(n_cells * e)), vc(size_t(n_cells * e));
    for (auto& h : kc) h = f32_to_f16(val(rng));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    std::vector<int32_t> info(size_t(2 * n_cells), -1);  // the sequence in cell order, the last 7 cells unused
    for (int64_t c = 0; c < depth + T; ++c) info[size_t(2 * c)] = int32_t(c), info[size_t(2 * c + 1)] = 0;
    std::vector<int32_t> tok(size_t(2 * T));
    for (int64_t t = 0; t < T; ++t) tok[size_t(2 * t)] = int32_t(depth + t), tok[size_t(2 * t + 1)] = 0;
    auto run = [&](Isa isa, int threads, int32_t window) {
      set_isa(isa);
      return test::attention_output({cs.hq, cs.hkv, cs.d, 0.0f, window}, q.data(), DType::F16, kc.data(), DType::F16,
                                    vc.data(), tok, info, threads);
    };
    const Isa before = selected_isa();
    for (int32_t window : {0, 1500}) {
      const std::vector<float> want = run(Isa::scalar, 1, window);
      for (float x : want) ASSERT_TRUE(std::isfinite(x));
      for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
        for (int threads : {1, 2}) {
          const std::vector<float> got = run(isa, threads, window);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << isa_name(isa) << " threads " << threads << " window " << window
                                                    << " i " << i << ": " << got[i] << " vs " << want[i];
        }
    }
    set_isa(before);
  }
}

// The flash decode's integer K·q over a q8_0 / q4_0 cache (kernels/attn_flash.h dots_q8_0_int / dots_q4_0_int,
// q rounded once per row by flash_q8_row): the integer lanes are exact and the float steps one order
// (llama.cpp's vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0), so every ISA the host has gives the reference's bits: dk
// 64 and 128 (unrolled) and 96 / 256 (the general loop), 1-4 rows, a tile of 64 cells and partial 4-cell groups
// (23, 2), cells out of order from rows holding two heads, quants at their extremes (q8_0 K -128 and 127, a
// block of q all zero). The scores are within q's 8-bit rounding of the f32 dots of the widened K (the bound
// from |q - dequant(q8)| <= 0.6 d_q per element), and, q8_0 at scale 1, the bits of the reference MUL_MAT
// Q8_0 kernel on the same rows (llama.cpp's vec_dot of a weight row by the q8_0 activation).
TEST(AttnBatched, FlashIntegerKDotsGiveTheReferenceBits) {
  std::mt19937 rng(41);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<const FlashKernels*> sets;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    sets.push_back(&flash_kernels());
  }
  set_isa(before);
  const FlashKernels& ref = ref_flash_kernels();
  constexpr int64_t kCells = 90, kLd = 72;
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t dk : {64, 128, 96, 256}) {
      const int64_t e = 2 * dk;  // two heads a row: the second is read
      std::vector<float> src(size_t(kCells * e));
      for (auto& x : src) x = val(rng);
      const uint64_t stride = row_bytes(t, e);
      std::vector<uint8_t> rows(stride * kCells);
      quantize_rows(t, src.data(), rows.data(), kCells, e);
      const uint8_t* base = rows.data() + row_bytes(t, dk);
      if (t == DType::Q8_0) {  // extreme quants in a few blocks of the read head
        for (int64_t c = 0; c < kCells; c += 7) {
          auto* b = reinterpret_cast<quant::BlockQ8_0*>(const_cast<uint8_t*>(base) + uint64_t(c) * stride);
          for (int i = 0; i < 32; ++i) b->qs[i] = int8_t(i % 2 ? 127 : -128);
        }
      }
      std::vector<float> tile(size_t(kCells * dk));
      std::vector<int32_t> all(kCells);
      for (int32_t c = 0; c < kCells; ++c) all[size_t(c)] = c;
      (t == DType::Q8_0 ? ref.widen_q8_0 : ref.widen_q4_0)(base, stride, all.data(), kCells, dk, tile.data(), dk);
      for (int64_t n : {64, 23, 2})
        for (int64_t m = 1; m <= kFlashDirectRows; ++m) {
          std::vector<int32_t> cells(static_cast<size_t>(n));
          for (auto& c : cells) c = int32_t(rng() % kCells);
          std::vector<float> q(size_t(m * dk));
          for (auto& x : q) x = val(rng) * 3.0f;
          std::fill(q.begin(), q.begin() + 32, 0.0f);  // d_q 0
          const int64_t ldq8 = flash_q8_row_bytes(dk);
          std::vector<uint8_t> q8(size_t(m * ldq8));
          for (int64_t j = 0; j < m; ++j) flash_q8_row(t, q.data() + j * dk, dk, q8.data() + j * ldq8);
          const float scale = 0.088f;
          std::vector<float> want(size_t(m * kLd), -9.0f);
          auto ref_dots = t == DType::Q8_0 ? ref.dots_q8_0_int : ref.dots_q4_0_int;
          ref_dots(q8.data(), ldq8, m, base, stride, cells.data(), n, dk, scale, want.data(), kLd);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t r = 0; r < n; ++r) {
              const float* k = tile.data() + cells[size_t(r)] * dk;
              double exact = 0.0, bound = 0.0;
              for (int64_t i = 0; i < dk; ++i) {
                exact += double(q[size_t(j * dk + i)]) * k[i];
                float qd;
                std::memcpy(&qd, q8.data() + j * ldq8 + 128 * (dk / 32) + 4 * (i / 32), 4);
                bound += 0.6 * qd * std::fabs(k[i]) + 1e-5 * std::fabs(double(q[size_t(j * dk + i)]) * k[i]);
              }
              ASSERT_NEAR(want[size_t(j * kLd + r)], exact * scale, bound * scale + 1e-6)
                  << dtype_name(t) << " dk " << dk << " n " << n << " m " << m << " row " << j << " cell " << r;
            }
          for (const FlashKernels* fk : sets) {
            SCOPED_TRACE(fmt::format("{} {} dk {} n {} m {}", fk->name, dtype_name(t), dk, n, m));
            auto dots = t == DType::Q8_0 ? fk->dots_q8_0_int : fk->dots_q4_0_int;
            ASSERT_NE(dots, nullptr);
            std::vector<float> s(size_t(m * kLd), -9.0f);
            dots(q8.data(), ldq8, m, base, stride, cells.data(), n, dk, scale, s.data(), kLd);
            for (size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(same_bits(s[i], want[i])) << "i " << i;
          }
        }
      if (t != DType::Q8_0) continue;
      // llama.cpp's vec_dot bits: the reference MUL_MAT Q8_0 kernel with the head rows as weight rows.
      const MatmulKernels* mk = matmul_kernels(DType::Q8_0, Isa::scalar);
      ASSERT_NE(mk, nullptr);
      std::vector<float> q(static_cast<size_t>(dk));
      for (auto& x : q) x = val(rng);
      std::vector<uint8_t> act(mk->act_row_bytes(dk));
      mk->convert_act(mk->act_type, q.data(), act.data(), dk);
      std::vector<float> scratch(size_t(mk->scratch_floats(dk)) + 64), out(kCells);
      GemmArgs g;
      g.w = base;
      g.w_row_bytes = stride;
      g.k = dk;
      g.row_begin = 0;
      g.row_end = g.n_rows = kCells;
      g.act = act.data();
      g.act_row_bytes = act.size();
      g.n_act = 1;
      g.out = out.data();
      g.out_stride = kCells;
      g.scratch = scratch.data();
      g.single_rows = true;
      mk->gemm(g);
      std::vector<uint8_t> q8(size_t(flash_q8_row_bytes(dk)));
      flash_q8_row(DType::Q8_0, q.data(), dk, q8.data());
      std::vector<float> s(kCells);
      ref.dots_q8_0_int(q8.data(), 0, 1, base, stride, all.data(), kCells, dk, 1.0f, s.data(), kCells);
      for (int64_t c = 0; c < kCells; ++c)
        ASSERT_TRUE(same_bits(s[size_t(c)], out[size_t(c)])) << "dk " << dk << " cell " << c;
    }
}

// A decode ATTENTION (-fa 1) over a q8_0 / q4_0 K (and q8_0, q4_0 or f16 V) takes the integer K·q: its output
// is the softmax-weighted V of the scores of q rounded to q8_0 (flash_q8_row) against the cache's values,
// computed here in double, within float rounding; and within that rounding's cost of the f32-q math. 1100
// cells: two cell ranges merged, the last tile partial (12 cells); GQA groups of 2 and 3, heads of 64 and 128;
// every ISA the host has, at 1 and 3 threads with the same bits.
TEST(AttnBatched, FlashQuantizedKDecodeIsTheRoundedQMath) {
  struct Case {
    int64_t hq, hkv, d;
    DType k, v;
  };
  const Case cases[] = {{4, 2, 128, DType::Q8_0, DType::Q8_0},
                        {6, 2, 64, DType::Q8_0, DType::Q8_0},
                        {4, 2, 128, DType::Q4_0, DType::Q4_0},
                        {6, 2, 64, DType::Q4_0, DType::Q4_0},
                        {4, 2, 128, DType::Q8_0, DType::F16}};
  const int64_t n_cells = 1100;
  std::mt19937 rng(43);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const Isa before = selected_isa();
  for (const Case& cs : cases) {
    const int64_t e = cs.hkv * cs.d, group = cs.hq / cs.hkv;
    std::vector<float> q(size_t(cs.d * cs.hq)), kf(size_t(n_cells * e)), vf(kf.size());
    for (auto& x : q) x = val(rng);
    for (auto& x : kf) x = val(rng);
    for (auto& x : vf) x = val(rng);
    std::vector<uint8_t> kc(row_bytes(cs.k, e) * n_cells), vc(row_bytes(cs.v, e) * n_cells);
    quantize_rows(cs.k, kf.data(), kc.data(), n_cells, e);
    quantize_rows(cs.v, vf.data(), vc.data(), n_cells, e);
    // the cache's values
    std::vector<float> kw(kf.size()), vw(vf.size());
    for (int64_t c = 0; c < n_cells; ++c) {
      dequantize_row(cs.k, kc.data() + row_bytes(cs.k, e) * uint64_t(c), kw.data() + c * e, e);
      dequantize_row(cs.v, vc.data() + row_bytes(cs.v, e) * uint64_t(c), vw.data() + c * e, e);
    }
    std::vector<int32_t> info(size_t(2 * n_cells));
    for (int64_t c = 0; c < n_cells; ++c) info[size_t(2 * c)] = int32_t(c), info[size_t(2 * c + 1)] = 0;
    std::vector<int32_t> tok = {int32_t(n_cells - 1), 0};
    const float scale = 1.0f / std::sqrt(float(cs.d));
    // The math in double, with q rounded to q8_0 (as the kernels take it) and with q in f32.
    std::vector<double> want(size_t(cs.d * cs.hq)), want_f32 = want;
    for (int64_t h = 0; h < cs.hq; ++h) {
      const float* qh = q.data() + h * cs.d;
      std::vector<uint8_t> q8(size_t(flash_q8_row_bytes(cs.d)));
      flash_q8_row(cs.k, qh, cs.d, q8.data());
      std::vector<double> qr(size_t(cs.d));
      for (int64_t i = 0; i < cs.d; ++i) {
        float qd;
        std::memcpy(&qd, q8.data() + 128 * (cs.d / 32) + 4 * (i / 32), 4);
        qr[size_t(i)] = double(qd) * double(int8_t(q8[size_t(64 * (i / 32) + i % 32)]));
      }
      const int64_t g = h / group;
      for (int rounded = 0; rounded < 2; ++rounded) {
        std::vector<double> sc(static_cast<size_t>(n_cells));
        double mx = -1e300;
        for (int64_t c = 0; c < n_cells; ++c) {
          double a = 0.0;
          for (int64_t i = 0; i < cs.d; ++i)
            a += (rounded ? qr[size_t(i)] : double(qh[i])) * kw[size_t(c * e + g * cs.d + i)];
          sc[size_t(c)] = a * scale;
          mx = std::max(mx, sc[size_t(c)]);
        }
        double sum = 0.0;
        std::vector<double> o(size_t(cs.d), 0.0);
        for (int64_t c = 0; c < n_cells; ++c) {
          const double p = std::exp(sc[size_t(c)] - mx);
          sum += p;
          for (int64_t i = 0; i < cs.d; ++i) o[size_t(i)] += p * vw[size_t(c * e + g * cs.d + i)];
        }
        for (int64_t i = 0; i < cs.d; ++i) (rounded ? want : want_f32)[size_t(h * cs.d + i)] = o[size_t(i)] / sum;
      }
    }
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
      set_isa(isa);
      std::vector<float> first;
      for (int threads : {1, 3}) {
        const std::string what = fmt::format("{} {}/{} hq {} d {} threads {}", isa_name(isa), dtype_name(cs.k),
                                             dtype_name(cs.v), cs.hq, cs.d, threads);
        const test::AttentionArgs args{cs.hq, cs.hkv, cs.d, scale, 0, true};
        const std::vector<float> out =
            test::attention_output(args, q.data(), cs.k, kc.data(), cs.v, vc.data(), tok, info, threads);
        double worst = 0.0, worst_f32 = 0.0;
        for (size_t i = 0; i < out.size(); ++i) {
          worst = std::max(worst, std::fabs(double(out[i]) - want[i]));
          worst_f32 = std::max(worst_f32, std::fabs(double(out[i]) - want_f32[i]));
        }
        // Measured (every ISA): 0.8-1.2e-7 against the rounded-q math, 0.8-1.2e-3 against the f32-q math (q's
        // rounding): the old f32-q kernels fail the first bound by 1e-3, a wrong cell or block by far more.
        EXPECT_LT(worst, 1e-6) << what << ": against the rounded-q math";
        EXPECT_LT(worst_f32, 5e-3) << what << ": against the f32-q math";
        if (threads == 1) first = out;
        else EXPECT_EQ(out, first) << what << ": 3 threads vs 1";
      }
    }
  }
  set_isa(before);
}

// dots_f16_groups over `groups` kv heads of m heads each (the K rows at base, stride bytes apart) against
// dots_f16_heads kv head by kv head, bit for bit, over n cells (output rows ldo floats apart, pre-filled).
void expect_groups_equal_heads(const AttnKernels* k, const uint8_t* base, int64_t stride, const int32_t* cells,
                               int64_t n, const float* q, int64_t ldq, int64_t groups, int64_t m, int64_t dk,
                               bool lanes16, int64_t ldo) {
  std::vector<float> got(size_t(groups * m * ldo), -3.0f), want(got.size(), -3.0f);
  k->dots_f16_groups(base, uint64_t(stride) * 2, uint64_t(dk) * 2, cells, n, q, ldq, groups, m, dk, lanes16, got.data(),
                     ldo);
  for (int64_t g = 0; g < groups; ++g)
    k->dots_f16_heads(base + g * dk * 2, uint64_t(stride) * 2, cells, n, q + g * m * ldq, ldq, m, dk, lanes16,
                      want.data() + g * m * ldo, ldo);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(same_bits(got[i], want[i])) << "i " << i << ": " << got[i] << " vs " << want[i];
}

// dots_f16_groups (the one-thread decode's K dots for all kv heads of a token in one walk over the rows, stop 29):
// every head's scores equal dots_f16_heads' over its own kv head's slice, bit for bit: SmolLM2's 3 kv heads x 3 heads
// and 4 x 4 (16 heads, the most the kernel takes whole) at dk 64, the fallbacks (dk 128; 5 x 4 heads, past 16; the
// tinyBLAS order), cell counts below, at and past the 8-cell groups and past the prefetch distance (32 rows) with a
// partial last group, cells out of order, a row of -0 against an all-positive q; nothing past n is written.
TEST(AttnBatched, GroupsDotsEqualHeadsDotsPerKvHead) {
  std::mt19937 rng(53);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->dots_f16_groups) continue;
    SCOPED_TRACE(k->name);
    struct Case {
      int64_t groups, m, dk;
    };
    for (const Case cs : {Case{3, 3, 64}, Case{4, 4, 64}, Case{2, 3, 64}, Case{2, 2, 128}, Case{5, 4, 64}}) {
      const int64_t groups = cs.groups, m = cs.m, dk = cs.dk, heads = groups * m;
      const int64_t stride = (groups + 1) * dk + 8, n_cells = 700;  // the groups from kv head 1, a gap after
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      std::fill_n(cache.begin() + 5 * stride, stride, uint16_t(0x8000));  // a row of -0
      std::vector<int32_t> cells;
      for (int32_t c = 0; c < n_cells; ++c) cells.push_back(c % 5 == 3 ? n_cells - 1 - c : c);
      const auto* base = reinterpret_cast<const uint8_t*>(cache.data() + dk);
      const int64_t ldq = dk + 8;
      std::vector<float> q(size_t(heads * ldq));
      for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
      for (int64_t i = 0; i < dk; ++i) q[size_t(i)] = std::fabs(q[size_t(i)]);
      for (int64_t n : {1, 7, 8, 9, 40, 333, 700}) {
        for (bool lanes16 : {false, true}) {
          SCOPED_TRACE(fmt::format("groups {} m {} dk {} n {} lanes16 {}", groups, m, dk, n, lanes16));
          expect_groups_equal_heads(k, base, stride, cells.data(), n, q.data(), ldq, groups, m, dk, lanes16, n + 3);
        }
      }
    }
  }
}

// dots_f16_groups at Llama-3.2-1B's shape (stop 30): 8 kv heads x 4 query heads at dk 64 (32 heads, the most the
// AVX2 kernel takes in one walk), laid out as its K cache (a 1 KiB row, the kv heads side by side, no gap), half of
// it (4 x 4, one of two walks over 16 staged heads), 8 x 3, and 9 x 4 (36 heads: kv head by kv head). Every head's
// scores equal dots_f16_heads' over its own kv head's slice, bit for bit, for cell counts under, at and past the
// 8-cell groups and the prefetch distance (12 rows of 1 KiB), cells out of order; nothing past n is written. Each
// head gets its own q (a head given another head's q, or a kv head's slice read for another, fails).
TEST(AttnBatched, GroupsDotsOfLlama1BShapeEqualPerKvHeadDots) {
  std::mt19937 rng(71);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (const AttnKernels* k : batched_kernels()) {
    if (!k->dots_f16_groups) continue;
    SCOPED_TRACE(k->name);
    struct Case {
      int64_t groups, m, row_heads;  // row_heads: the kv heads of a cache row (the groups from the first)
    };
    for (const Case cs : {Case{8, 4, 8}, Case{4, 4, 8}, Case{8, 3, 8}, Case{9, 4, 9}}) {
      const int64_t groups = cs.groups, m = cs.m, dk = 64, heads = groups * m, stride = cs.row_heads * dk;
      const int64_t n_cells = 300;
      std::vector<uint16_t> cache(size_t(n_cells * stride));
      for (auto& h : cache) h = f32_to_f16(val(rng));
      std::vector<int32_t> cells;
      for (int32_t c = 0; c < n_cells; ++c) cells.push_back(c % 7 == 2 ? n_cells - 1 - c : c);
      for (int64_t first : {int64_t(0), cs.row_heads - groups}) {
        const auto* base = reinterpret_cast<const uint8_t*>(cache.data() + first * dk);
        const int64_t ldq = dk;
        std::vector<float> q(size_t(heads * ldq));
        for (auto& x : q) x = f16_to_f32(f32_to_f16(val(rng)));
        for (int64_t n : {1, 8, 13, 40, 299}) {
          SCOPED_TRACE(fmt::format("groups {} m {} first {} n {}", groups, m, first, n));
          expect_groups_equal_heads(k, base, stride, cells.data(), n, q.data(), ldq, groups, m, dk, false, n + 5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace opal::cpu
