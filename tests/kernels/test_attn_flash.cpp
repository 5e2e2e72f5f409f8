// The tiled attention's kernels (kernels/attn_flash.h) of every ISA the host
// has against the reference forms: widening is exact (f16, q8_0, q4_0 rows
// from the reference quantizers), dots / exp / accumulation agree within
// float rounding.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/isa.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace {

std::vector<const FlashKernels*> flash_kernel_sets() {
  std::vector<const FlashKernels*> v;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    v.push_back(&flash_kernels());
  }
  set_isa(before);
  return v;
}

TEST(AttnFlash, WideningIsExactForEveryCacheType) {
  const FlashKernels& ref = ref_flash_kernels();
  std::mt19937 rng(5);
  std::normal_distribution<float> val(0.0f, 2.0f);
  const int64_t d = 96, n_cells = 7, E = 2 * d;  // two heads per row; widen the second
  std::vector<float> src(size_t(n_cells * E));
  for (auto& x : src) x = val(rng);
  const std::vector<int32_t> cells = {6, 0, 3, 5};
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    const uint64_t stride = row_bytes(t, E);
    std::vector<uint8_t> rows(stride * n_cells);
    if (t == DType::F16)
      for (int64_t i = 0; i < n_cells * E; ++i)
        reinterpret_cast<uint16_t*>(rows.data())[i] = f32_to_f16(src[size_t(i)]);
    else quantize_rows(t, src.data(), rows.data(), n_cells, E);
    const uint8_t* base = rows.data() + row_bytes(t, d);
    std::vector<float> want(cells.size() * size_t(d)), full(static_cast<size_t>(E), 0.0f);
    for (size_t r = 0; r < cells.size(); ++r) {  // the reference dequantizer of the whole row
      dequantize_row(t, rows.data() + stride * uint64_t(cells[r]), full.data(), E);
      for (int64_t i = 0; i < d; ++i) want[r * d + size_t(i)] = full[size_t(d + i)];
    }
    for (const FlashKernels* k : flash_kernel_sets()) {
      auto fn = t == DType::F16 ? k->widen_f16 : t == DType::Q8_0 ? k->widen_q8_0 : k->widen_q4_0;
      auto fr = t == DType::F16 ? ref.widen_f16 : t == DType::Q8_0 ? ref.widen_q8_0 : ref.widen_q4_0;
      std::vector<float> got(cells.size() * d, -1.0f), got_ref = got;
      fn(base, stride, cells.data(), int64_t(cells.size()), d, got.data(), d);
      fr(base, stride, cells.data(), int64_t(cells.size()), d, got_ref.data(), d);
      EXPECT_EQ(got, want) << k->name << " " << dtype_name(t);
      EXPECT_EQ(got_ref, want) << "ref " << dtype_name(t);
    }
  }
}

TEST(AttnFlash, DotsExpAndAccumulationAgreeWithTheReference) {
  const FlashKernels& ref = ref_flash_kernels();
  std::mt19937 rng(9);
  std::normal_distribution<float> val(0.0f, 1.0f);
  // m and n cover whole and partial register tiles of every ISA (rows of 1-6, cells of 8 and 16, a full tile),
  // and the few-row (decode) forms: 1-4 rows, cells of 4 and 16
  for (auto [dk, m, n] : {std::tuple<int64_t, int64_t, int64_t>{32, 5, 37},
                          {64, 5, 37},
                          {80, 5, 37},
                          {128, 5, 37},
                          {64, 13, 64},
                          {64, 1, 64},
                          {40, 7, 9},
                          {256, 6, 64},
                          {64, 3, 1},
                          {64, 2, 37},
                          {64, 3, 64},
                          {128, 4, 21},
                          {64, 1, 37}}) {
    const int64_t dv = dk + 8;
    std::vector<float> q(size_t(m * dk)), k(size_t(n * dk)), v(size_t(n * dv));
    for (auto* a : {&q, &k, &v})
      for (auto& x : *a) x = val(rng);
    for (const FlashKernels* kk : flash_kernel_sets()) {
      std::vector<float> s(size_t(m * 72), -9.0f), s_ref = s;
      kk->dots(q.data(), dk, m, k.data(), dk, n, dk, 0.125f, s.data(), 72);
      ref.dots(q.data(), dk, m, k.data(), dk, n, dk, 0.125f, s_ref.data(), 72);
      for (int64_t j = 0; j < m; ++j)
        for (int64_t r = 0; r < n; ++r)
          EXPECT_NEAR(s[size_t(j * 72 + r)], s_ref[size_t(j * 72 + r)], 1e-5f) << kk->name << " dk " << dk;
      for (int64_t j = 0; j < m; ++j)
        for (int64_t r = n; r < 72; ++r) ASSERT_EQ(s[size_t(j * 72 + r)], -9.0f) << kk->name << ": wrote past n";
      // exp with a masked cell and a max above every score
      std::vector<float> e(s.begin(), s.begin() + n), e_ref;
      const size_t masked = size_t(std::min<int64_t>(3, n - 1));
      if (n > 1) e[masked] = -INFINITY;
      float mx = -INFINITY;
      for (float x : e) mx = std::max(mx, x);
      e_ref = e;
      const float sum = kk->exp_sum(e.data(), n, mx), sum_ref = ref.exp_sum(e_ref.data(), n, mx);
      if (n > 1) {
        EXPECT_EQ(e[masked], 0.0f);
      }
      EXPECT_NEAR(sum, sum_ref, 1e-5f * sum_ref) << kk->name;
      for (int64_t r = 0; r < n; ++r) EXPECT_NEAR(e[size_t(r)], e_ref[size_t(r)], 1e-6f) << kk->name << " r " << r;
      std::vector<float> acc(size_t(m * dv), 0.5f), acc_ref = acc;
      kk->accum(s.data(), 72, m, v.data(), dv, n, dv, acc.data(), dv);
      ref.accum(s.data(), 72, m, v.data(), dv, n, dv, acc_ref.data(), dv);
      for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], acc_ref[i], 1e-4f) << kk->name << " i " << i;
    }
  }
}

// The online softmax's mask and row maximum: the same scores and the same maximum (exact) as the reference, for
// whole and partial tiles, ranges at either end, in the middle, and empty.
TEST(AttnFlash, MaskMaxEqualsTheReference) {
  const FlashKernels& ref = ref_flash_kernels();
  std::mt19937 rng(21);
  std::normal_distribution<float> val(0.0f, 3.0f);
  for (const FlashKernels* fk : flash_kernel_sets())
    for (int64_t n : {64, 63, 17, 16, 9, 8, 5, 1})
      for (auto [a, e] :
           {std::pair<int64_t, int64_t>{0, n}, {0, n / 2}, {n / 3, n}, {n / 4, n - n / 4}, {n / 2, n / 2}}) {
        std::vector<float> s(72);
        for (auto& x : s) x = val(rng);
        s[size_t(n / 2)] = -INFINITY;  // a score the window masked already
        std::vector<float> s_ref = s;
        const float m = fk->mask_max(s.data(), n, a, e), m_ref = ref.mask_max(s_ref.data(), n, a, e);
        const std::string what = fmt::format("{} n {} [{}, {})", fk->name, n, a, e);
        EXPECT_EQ(m, m_ref) << what;
        EXPECT_EQ(s, s_ref) << what << ": the scores (nothing past n is written)";
      }
}

// Decode's in-place forms over an f16, q8_0 or q4_0 cache (kFlashDirectRows rows at most, d a multiple of 16 / 32)
// against the reference, and against the widened tile through dots / accum (the values they read are the widened
// ones): the cells are gathered out of order from rows holding two heads, tiles partly past a 4-cell group, 1-4
// rows.
TEST(AttnFlash, InPlaceFormsAgreeWithTheWidenedTile) {
  const FlashKernels& ref = ref_flash_kernels();
  std::mt19937 rng(13);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0})
    for (auto [d, m, n] : {std::tuple<int64_t, int64_t, int64_t>{64, 3, 64},
                           {64, 1, 37},
                           {64, 2, 5},
                           {128, 2, 64},
                           {128, 4, 23},
                           {32, 3, 2},
                           {96, 4, 64},
                           {96, 3, 1},
                           {256, 1, 17}}) {
      const int64_t E = 2 * d, n_cells = 80;  // two heads per row: the second one is read
      std::vector<float> src(size_t(n_cells * E));
      for (auto& x : src) x = val(rng);
      const uint64_t stride = row_bytes(t, E);
      std::vector<uint8_t> rows(stride * n_cells);
      if (t == DType::F16)
        for (int64_t i = 0; i < n_cells * E; ++i)
          reinterpret_cast<uint16_t*>(rows.data())[i] = f32_to_f16(src[size_t(i)]);
      else quantize_rows(t, src.data(), rows.data(), n_cells, E);
      const uint8_t* base = rows.data() + row_bytes(t, d);
      std::vector<int32_t> cells(static_cast<size_t>(n));
      std::uniform_int_distribution<int32_t> pick(0, int32_t(n_cells - 1));
      for (auto& c : cells) c = pick(rng);
      std::vector<float> q(size_t(m * d)), p(size_t(m * 72));
      for (auto& x : q) x = val(rng);
      for (auto& x : p) x = std::fabs(val(rng));
      p[0] = 0.0f;  // a masked cell's weight
      std::vector<float> tile(size_t(n * d));
      auto widen = t == DType::F16 ? ref.widen_f16 : t == DType::Q8_0 ? ref.widen_q8_0 : ref.widen_q4_0;
      widen(base, stride, cells.data(), n, d, tile.data(), d);
      for (const FlashKernels* kk : flash_kernel_sets()) {
        for (const FlashKernels* fk : {kk, &ref}) {
          auto dots = t == DType::F16 ? fk->dots_f16 : t == DType::Q8_0 ? fk->dots_q8_0 : fk->dots_q4_0;
          auto accum = t == DType::F16 ? fk->accum_f16 : t == DType::Q8_0 ? fk->accum_q8_0 : fk->accum_q4_0;
          if (!dots || !accum) {
            ADD_FAILURE() << fk->name << ": no in-place forms for " << dtype_name(t);
            continue;
          }
          const std::string what = fmt::format("{} {} d {} m {}", fk->name, dtype_name(t), d, m);
          std::vector<float> s(size_t(m * 72), -9.0f), s_tile = s;
          dots(q.data(), d, m, base, stride, cells.data(), n, d, 0.125f, s.data(), 72);
          ref.dots(q.data(), d, m, tile.data(), d, n, d, 0.125f, s_tile.data(), 72);
          for (int64_t j = 0; j < m; ++j) {
            for (int64_t r = 0; r < n; ++r)
              EXPECT_NEAR(s[size_t(j * 72 + r)], s_tile[size_t(j * 72 + r)],
                          2e-5f * std::max(1.0f, std::fabs(s_tile[size_t(j * 72 + r)])))
                  << what << " row " << j << " cell " << r;
            for (int64_t r = n; r < 72; ++r) ASSERT_EQ(s[size_t(j * 72 + r)], -9.0f) << what << ": wrote past n";
          }
          std::vector<float> acc(size_t(m * (d + 8)), 0.5f), acc_tile = acc;
          accum(p.data(), 72, m, base, stride, cells.data(), n, d, acc.data(), d + 8);
          ref.accum(p.data(), 72, m, tile.data(), d, n, d, acc_tile.data(), d + 8);
          for (size_t i = 0; i < acc.size(); ++i)
            EXPECT_NEAR(acc[i], acc_tile[i], 1e-4f * std::max(1.0f, std::fabs(acc_tile[i]))) << what << " i " << i;
        }
      }
    }
}

// The online-softmax step of a tile's rows in one call: each ISA's bits are those of its own mask_max and exp_sum
// called row by row with the scalar steps between them (the op's loop before stop 25), and within float rounding
// of the reference. The rows cover nothing visible, a first visit (m = -inf), an unchanged maximum (no rescale), a
// raised one (rescale), and partly visible tiles, over 37, 64 and 128 cells.
TEST(AttnFlash, OnlineSoftmaxIsTheRowByRowStep) {
  const FlashKernels& ref = ref_flash_kernels();
  std::mt19937 rng(17);
  std::normal_distribution<float> val(0.0f, 2.0f);
  const int64_t dv = 72, lds = 136, m = 6;
  for (int64_t n : {37, 64, 128}) {
    const int64_t r0 = 1000;
    // row j: visible cells [lo - r0, hi - r0)
    const int64_t lo[m] = {r0, r0, r0 + 5, r0, r0 - 40, r0 + n};
    const int64_t hi[m] = {r0 + n, r0 + n, r0 + n, r0 + n / 2, r0 + n + 9, r0 + n + 3};
    std::vector<float> s0(size_t(m * lds)), acc0(size_t(m * dv));
    for (auto& x : s0) x = val(rng);
    for (auto& x : acc0) x = val(rng);
    std::vector<float> m0 = {-INFINITY, 50.0f, 0.5f, -1.0f, 1.0f, 2.0f}, l0 = {0.0f, 3.0f, 2.0f, 1.5f, 7.0f, 4.0f};
    for (const FlashKernels* fk : flash_kernel_sets()) {
      for (const FlashKernels* k : {fk, &ref}) {
        std::vector<float> s = s0, acc = acc0, mr = m0, lr = l0;
        k->online_softmax(s.data(), lds, m, n, lo, hi, r0, mr.data(), lr.data(), acc.data(), dv, dv);
        // the row-by-row step with this ISA's mask_max and exp_sum
        std::vector<float> sw = s0, accw = acc0, mw = m0, lw = l0;
        for (int64_t j = 0; j < m; ++j) {
          float* sj = sw.data() + j * lds;
          const int64_t a = std::clamp<int64_t>(lo[j] - r0, 0, n), e = std::clamp<int64_t>(hi[j] - r0, 0, n);
          const float tmax = k->mask_max(sj, n, a, e);
          if (tmax == -INFINITY) {
            std::fill(sj, sj + n, 0.0f);
            continue;
          }
          const float mnew = std::max(mw[size_t(j)], tmax);
          const float alpha = mw[size_t(j)] == -INFINITY ? 0.0f
                              : mnew == mw[size_t(j)]    ? 1.0f
                                                         : std::exp(mw[size_t(j)] - mnew);
          lw[size_t(j)] = lw[size_t(j)] * alpha + k->exp_sum(sj, n, mnew);
          if (alpha != 1.0f)
            for (int64_t i = 0; i < dv; ++i) accw[size_t(j * dv + i)] *= alpha;
          mw[size_t(j)] = mnew;
        }
        for (int64_t j = 0; j < m; ++j)
          for (int64_t r = 0; r < n; ++r)
            ASSERT_EQ(s[size_t(j * lds + r)], sw[size_t(j * lds + r)]) << k->name << " n " << n << " row " << j;
        for (int64_t j = 0; j < m; ++j)
          for (int64_t r = n; r < lds; ++r) ASSERT_EQ(s[size_t(j * lds + r)], s0[size_t(j * lds + r)]) << "past n";
        EXPECT_EQ(acc, accw) << k->name << " n " << n;
        EXPECT_EQ(mr, mw) << k->name << " n " << n;
        EXPECT_EQ(lr, lw) << k->name << " n " << n;
      }
      // against the reference
      std::vector<float> s = s0, acc = acc0, mr = m0, lr = l0, sr = s0, accr = acc0, mrr = m0, lrr = l0;
      fk->online_softmax(s.data(), lds, m, n, lo, hi, r0, mr.data(), lr.data(), acc.data(), dv, dv);
      ref.online_softmax(sr.data(), lds, m, n, lo, hi, r0, mrr.data(), lrr.data(), accr.data(), dv, dv);
      EXPECT_EQ(mr, mrr) << fk->name;
      for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], sr[i], 1e-6f) << fk->name << " n " << n << " i " << i;
      for (size_t i = 0; i < lr.size(); ++i) EXPECT_NEAR(lr[i], lrr[i], 1e-5f * lrr[i]) << fk->name;
      for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], accr[i], 1e-5f) << fk->name;
    }
  }
}

}  // namespace
}  // namespace opal::cpu
