// The kernels whose summation order reproduces llama.cpp's (docs/fidelity.md)
// must give the scalar reference's results bit for bit under every ISA the
// host has: F32/F16/BF16/Q8_0 gemm (both the batched tinyBLAS order and the
// one-row / single_rows ggml_vec_dot order, with and without a tail), Q5_0
// (the same 8-lane block order), Q4_0 (llama.cpp's repacked order: each
// block's exact sum, then one FMA; batches of 4+ rows take the AVX-512
// rows-in-lanes kernel, so they are checked on 53 weight rows too) and the
// attention helpers. Plus properties of the emulated pieces that follow from
// their definitions: the exp polynomial is within 2 ulp of exp and exact
// where the polynomial is, the reductions add in ggml's tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "support/isa_coverage.h"
#include "support/kernel_call.h"

namespace opal::cpu {
namespace {

// Announces the ISAs covered and fails on one $OPAL_REQUIRE_ISA names that the host lacks.
std::vector<Isa> simd_isas() {
  return test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false);
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// n_act activation rows of k values drawn from N(0, 2).
std::vector<float> llama_order_activations(int64_t n_act, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> val(0.0f, 2.0f);
  std::vector<float> x(size_t(n_act * k));
  for (auto& v : x) v = val(rng);
  return x;
}

std::vector<float> gemm(const MatmulKernels& kern, const std::vector<uint8_t>& w, DType t, int64_t rows, int64_t k,
                        const std::vector<float>& x, int64_t n_act, bool single_rows) {
  test::GemmCall call;
  call.fill = -1.0f;
  call.single_rows = single_rows;
  return test::run_gemm(kern, w, t, rows, k, test::convert_acts(kern, x.data(), n_act, k), n_act, call);
}

TEST(LlamaOrder, GemmKernelsEqualTheReferenceBitForBit) {
  set_batch_order(BatchOrder::llama);  // Q8_0 / Q5_0 batches: llama.cpp's order (the lanes order is not)
  std::mt19937 rng(7);
  for (Isa isa : simd_isas())
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
      const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
      const MatmulKernels* fast = isa_matmul_kernels(t, isa);
      if (!fast) continue;  // e.g. NEON has no float kernels
      for (int64_t k : {32, 64, 96, 172, 256, 4352}) {
        if (!is_float(t) && k % 32 != 0) continue;
        const int64_t rows = 9;
        const auto w = test::random_weights(t, rows, k, rng);
        for (int64_t n_act : {1, 2, 7, 16, 17})  // 16 / 17: the last small batch, the first prompt tile
          for (bool single : {false, true}) {
            const std::vector<float> x = llama_order_activations(n_act, k, rng);
            const auto a = gemm(*ref, w, t, rows, k, x, n_act, single);
            const auto b = gemm(*fast, w, t, rows, k, x, n_act, single);
            EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k=" << k << " n_act=" << n_act
                << (single ? " single_rows" : "");
          }
      }
    }
}

// Prompt batches of F32/F16 (register tiles, each k-block run once per 8-lane
// half on AVX2) and Q8_0 / Q5_0 in llama.cpp's order (AVX2, AVX-VNNI: 4 x 2 tiles;
// AVX-512: repacked groups of 8 rows, 21 = two groups and 5) on row
// counts that leave a remainder of every tile height, batches that leave
// every activation remainder and cross the 64-row activation chunk, and k
// over several k-blocks with a short last one.
TEST(LlamaOrder, PromptTilesEqualTheReferenceBitForBit) {
  const BatchOrder before = batch_order();
  set_batch_order(BatchOrder::llama);
  std::mt19937 rng(1813);
  for (Isa isa : simd_isas())
    for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q5_0}) {
      const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
      const MatmulKernels* fast = isa_matmul_kernels(t, isa);
      if (!fast) continue;
      for (int64_t k : {32, 1056, 2080})
        for (int64_t rows : {10, 11, 13, 21})
          for (int64_t n_act : {17, 18, 19, 66, 70}) {
            const auto w = test::random_weights(t, rows, k, rng);
            const std::vector<float> x = llama_order_activations(n_act, k, rng);
            const auto a = gemm(*ref, w, t, rows, k, x, n_act, false);
            const auto b = gemm(*fast, w, t, rows, k, x, n_act, false);
            EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k=" << k << " rows=" << rows << " n_act=" << n_act;
          }
    }
  set_batch_order(before);
}

// Q8_0 quants of -128: our quantizer never writes them, but a GGUF may hold
// them. The AVX2 forms take |w| (128 as an unsigned byte) and move the sign to
// the activation, which is exact; a form that took |x| and sign(w, x) instead
// would turn -128 * -x into -128 * x. Decode, small batches and prompt tiles
// (the GGUF layout; 4- and 8-row tiles, remainders of 1-3 rows) against the
// scalar reference, bit for bit, under every ISA.
TEST(LlamaOrder, Q8_0QuantsOfMinus128AreExact) {
  const BatchOrder before = batch_order();
  set_batch_order(BatchOrder::llama);
  std::mt19937 rng(128);
  const DType t = DType::Q8_0;
  const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
  for (int64_t k : {64, 1056})
    for (int64_t rows : {13, 19}) {
      auto w = test::random_weights(t, rows, k, rng);
      const uint64_t rb = row_bytes(t, k);
      std::uniform_int_distribution<int> pick(0, 3);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t e = 0; e < k; ++e)
          if (pick(rng) == 0) w[uint64_t(r) * rb + uint64_t(e / 32) * 34 + 2 + uint64_t(e % 32)] = 0x80;  // -128
      for (int64_t n_act : {1, 5, 17, 70}) {
        // Activations of both signs (so that -128 meets negative x) and large enough to quantize to +-127.
        const std::vector<float> x = llama_order_activations(n_act, k, rng);
        const auto a = gemm(*ref, w, t, rows, k, x, n_act, false);
        for (Isa isa : simd_isas()) {
          const MatmulKernels* fast = isa_matmul_kernels(t, isa);
          if (!fast) continue;
          const auto b = gemm(*fast, w, t, rows, k, x, n_act, false);
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << isa_name(isa) << " k=" << k << " rows=" << rows << " n_act=" << n_act;
        }
      }
    }
  set_batch_order(before);
}

// The Q8_0 prompt kernels of AVX-512 and AVX-VNNI read the flipped quants
// (x + 128) their activation converter appends to each row
// (convert_q8_0_flipped; stops 38 and 47). Activation rows from another
// entry's converter, without them, are refused with an error, not read past
// their end. Without a scratch for its repack, avx2-vnni's entry runs the
// plain AVX2 tiles instead: the same bits.
TEST(LlamaOrder, Q8_0PromptTilesRefuseRowsWithoutTheFlippedQuants) {
  const BatchOrder before = batch_order();
  set_batch_order(BatchOrder::llama);
  std::mt19937 rng(38);
  const int64_t k = 256, rows = 16, n_act = 24;
  int checked = 0;
  for (Isa isa : {Isa::avx512, Isa::avx2_vnni}) {
    if (!host_supports(isa)) continue;
    const MatmulKernels* q8 = isa_matmul_kernels(DType::Q8_0, isa);
    const MatmulKernels* q4 = isa_matmul_kernels(DType::Q4_0, isa);
    ASSERT_NE(q8, nullptr);
    ASSERT_NE(q4, nullptr);
    ASSERT_GT(q8->act_row_bytes(k), q4->act_row_bytes(k)) << isa_name(isa);
    const auto w = test::random_weights(DType::Q8_0, rows, k, rng);
    const std::vector<float> x = llama_order_activations(n_act, k, rng);
    const auto short_rows = test::convert_acts(*q4, x.data(), n_act, k);
    std::vector<float> out(size_t(rows * n_act)), scratch(size_t(q8->scratch_floats(k) + 1));
    GemmArgs g;
    g.w = w.data();
    g.w_row_bytes = row_bytes(DType::Q8_0, k);
    g.k = k;
    g.row_end = g.n_rows = rows;
    g.act = short_rows.data();
    g.act_row_bytes = q4->act_row_bytes(k);
    g.n_act = n_act;
    g.out = out.data();
    g.out_stride = rows;
    g.scratch = scratch.data();
    EXPECT_THROW(q8->gemm(g), Error) << isa_name(isa);
    const auto a = gemm(*matmul_kernels(DType::Q8_0, Isa::scalar), w, DType::Q8_0, rows, k, x, n_act, false);
    const auto b = gemm(*q8, w, DType::Q8_0, rows, k, x, n_act, false);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << isa_name(isa);
    if (isa == Isa::avx2_vnni) {
      const auto rows_with = test::convert_acts(*q8, x.data(), n_act, k);
      g.act = rows_with.data();
      g.act_row_bytes = q8->act_row_bytes(k);
      g.scratch = nullptr;
      std::fill(out.begin(), out.end(), -1.0f);
      q8->gemm(g);
      EXPECT_EQ(0, std::memcmp(a.data(), out.data(), a.size() * sizeof(float))) << "no scratch";
    }
    ++checked;
  }
  set_batch_order(before);
  if (checked == 0) GTEST_SKIP() << "neither AVX-512 nor AVX-VNNI on this host";
}

// x86 Q8_0 prompts in llama.cpp's order put the weight rows in the lanes through the call's scratch (repacked per
// call in slices of 4 rows and chunks of 64 activation rows) and fall back to the one-pair-a-vector tiles without
// one: both the reference's bits, on a partial last slice (15 rows) and a partial last chunk with an odd tail.
TEST(LlamaOrder, Q8_0PromptsWithAndWithoutAScratchAreTheReferenceBits) {
  const BatchOrder before = batch_order();
  set_batch_order(BatchOrder::llama);
  std::mt19937 rng(48);
  const int64_t k = 320, rows = 15;
  const MatmulKernels* ref = matmul_kernels(DType::Q8_0, Isa::scalar);
  int checked = 0;
  for (Isa isa : {Isa::avx2, Isa::avx2_vnni, Isa::avx512}) {
    const MatmulKernels* q8 = host_supports(isa) ? isa_matmul_kernels(DType::Q8_0, isa) : nullptr;
    if (!q8) continue;
    const auto w = test::random_weights(DType::Q8_0, rows, k, rng);
    for (int64_t n_act : {17, 70}) {
      const std::vector<float> x = llama_order_activations(n_act, k, rng);
      const auto a = gemm(*ref, w, DType::Q8_0, rows, k, x, n_act, false);
      const auto act = test::convert_acts(*q8, x.data(), n_act, k);
      test::GemmCall call;
      call.fill = -1.0f;
      for (bool scratch : {true, false}) {
        call.scratch = scratch;
        const auto b = test::run_gemm(*q8, w, DType::Q8_0, rows, k, act, n_act, call);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << isa_name(isa) << " n_act " << n_act << (scratch ? " with" : " without") << " a scratch";
      }
    }
    ++checked;
  }
  set_batch_order(before);
  if (checked == 0) GTEST_SKIP() << "no x86 SIMD ISA on this host";
}

// One-row F32/F16 products (decode, single_rows) on 37 weight rows: slices of 16
// rows in the lanes (AVX-512), then 4 x 1 and 1 x 1 tiles; k with no tail, a
// tail under 8 (fused only), one of 8+ (rounded products, then fused), and a
// tail-only row (k < 64: RWKV-7's rank-32 LoRA).
TEST(LlamaOrder, FloatDecodeRowsInLanesEqualTheReferenceBitForBit) {
  std::mt19937 rng(11);
  for (Isa isa : simd_isas())
    for (DType t : {DType::F32, DType::F16}) {
      const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
      const MatmulKernels* fast = isa_matmul_kernels(t, isa);
      if (!fast) continue;
      for (int64_t k : {32, 64, 69, 128, 181, 768})
        for (int64_t rows : {16, 37}) {
          const auto w = test::random_weights(t, rows, k, rng);
          for (int64_t n_act : {1, 3})
            for (bool single : {false, true}) {
              if (n_act > 1 && !single && k % 16 == 0) continue;  // tinyBLAS: the test above
              const std::vector<float> x = llama_order_activations(n_act, k, rng);
              const auto a = gemm(*ref, w, t, rows, k, x, n_act, single);
              const auto b = gemm(*fast, w, t, rows, k, x, n_act, single);
              EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                  << isa_name(isa) << " " << dtype_name(t) << " k=" << k << " rows=" << rows << " n_act=" << n_act
                  << (single ? " single_rows" : "");
            }
        }
    }
}

TEST(LlamaOrder, Q4_0BatchesEqualTheRepackedOrderBitForBit) {
  std::mt19937 rng(13);
  const DType t = DType::Q4_0;
  const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
  for (Isa isa : simd_isas()) {
    const MatmulKernels* fast = isa_matmul_kernels(t, isa);
    if (!fast) continue;
    for (int64_t k : {32, 576, 4096}) {
      const int64_t rows = 53;  // slices of 32 and 16 rows, then 5
      const auto w = test::random_weights(t, rows, k, rng);
      for (int64_t n_act :
           {3, 4, 8, 9, 16, 17, 70})  // decode kernels up to 8 (AVX2) / 16 (AVX-512), then rows in the lanes
        for (bool single : {false, true}) {
          const std::vector<float> x = llama_order_activations(n_act, k, rng);
          const auto a = gemm(*ref, w, t, rows, k, x, n_act, single);
          const auto b = gemm(*fast, w, t, rows, k, x, n_act, single);
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << isa_name(isa) << " k=" << k << " n_act=" << n_act << (single ? " single_rows" : "");
        }
    }
  }
}

// The Q8_0 and Q5_0 lanes order (each block's exact int32 sum, then one FMA)
// gives the same bits on every ISA that has it (AVX2's vpmaddubsw chains,
// AVX-VNNI's and AVX-512's vpdpbusd), and differs from the llama order
// somewhere.
TEST(LlamaOrder, LanesOrderIsTheSameBitsOnEveryIsa) {
  std::mt19937 rng(17);
  const BatchOrder before = batch_order();
  const auto isas = simd_isas();
  for (DType t : {DType::Q8_0, DType::Q5_0})
    for (int64_t k : {32, 576, 4096}) {
      const int64_t rows = 37;  // slices of 16 / 32 rows, then a partial one
      const auto w = test::random_weights(t, rows, k, rng);
      for (int64_t n_act : {17, 40}) {
        const std::vector<float> x = llama_order_activations(n_act, k, rng);
        std::vector<float> first;
        bool differs_from_llama = false;
        for (Isa isa : isas) {
          const MatmulKernels* fast = isa_matmul_kernels(t, isa);
          if (!fast) continue;
          set_batch_order(BatchOrder::lanes);
          const auto lanes = gemm(*fast, w, t, rows, k, x, n_act, false);
          set_batch_order(BatchOrder::llama);
          const auto llama = gemm(*fast, w, t, rows, k, x, n_act, false);
          differs_from_llama |= std::memcmp(lanes.data(), llama.data(), lanes.size() * sizeof(float)) != 0;
          if (first.empty()) {
            first = lanes;
          } else {
            EXPECT_EQ(0, std::memcmp(first.data(), lanes.data(), lanes.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k=" << k << " n_act=" << n_act;
          }
        }
        if (!first.empty() && k >= 576) {
          EXPECT_TRUE(differs_from_llama) << dtype_name(t) << " k=" << k << " n_act=" << n_act;
        }
      }
    }
  set_batch_order(before);
}

// Q4_K and Q6_K batches (5 rows or more) in the lanes: each super-block's
// exact int32 sum, then the same FMAs, so AVX2's vpmaddubsw chains, AVX-VNNI's
// vpdpbusd and AVX-512's give the same bits.
TEST(LlamaOrder, KQuantLanesBatchesAreTheSameBitsOnEveryIsa) {
  std::mt19937 rng(19);
  const auto isas = simd_isas();
  for (DType t : {DType::Q4_K, DType::Q6_K})
    for (int64_t k : {256, 2048}) {
      const int64_t rows = 37;  // slices of 16 / 32 rows, then a partial one
      const auto w = test::random_weights(t, rows, k, rng);
      for (int64_t n_act : {5, 17, 40}) {
        const std::vector<float> x = llama_order_activations(n_act, k, rng);
        std::vector<float> first;
        int compared = 0;
        for (Isa isa : isas) {
          const MatmulKernels* fast = isa_matmul_kernels(t, isa);
          if (!fast) continue;
          const auto out = gemm(*fast, w, t, rows, k, x, n_act, false);
          if (first.empty()) {
            first = out;
          } else {
            ++compared;
            EXPECT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k=" << k << " n_act=" << n_act;
          }
        }
        if (isas.size() > 1) {
          EXPECT_GT(compared, 0) << dtype_name(t);
        }
      }
    }
}

// The scalar form itself: a block's integer sum, exactly, then one FMA.
TEST(LlamaOrder, BlockExactIsOneFmaOfTheExactBlockSum) {
  int8_t w[32], x[32];
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) {
    w[i] = int8_t(i % 16 - 8);
    x[i] = int8_t(127 - 8 * i);
    sum += int32_t(w[i]) * x[i];
  }
  const float d = 0.0123f, acc = 1.5f;
  EXPECT_EQ(llama_order::block_exact(w, x, d, acc), std::fma(float(sum), d, acc));
  EXPECT_NE(llama_order::block_exact(w, x, d, acc), llama_order::block_exact(w, x, d, 0.0f));
}

TEST(LlamaOrder, AttentionHelpersEqualTheScalarFormsBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (Isa isa : simd_isas()) {
    const Isa before = selected_isa();
    set_isa(isa);
    const AttnKernels* simd = attn_kernels();
    set_isa(before);
    if (!simd) continue;
    for (int64_t n : {8, 32, 64, 96, 128, 200}) {
      std::vector<uint16_t> k(static_cast<size_t>(n));
      std::vector<float> kf(static_cast<size_t>(n)), q(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        k[size_t(i)] = f32_to_f16(val(rng));
        kf[size_t(i)] = f16_to_f32(k[size_t(i)]);
        q[size_t(i)] = f16_to_f32(f32_to_f16(val(rng)));
      }
      if (n % 16 == 0) {
        EXPECT_EQ(simd->dot_f16_lanes16(k.data(), q.data(), n), llama_order::dot_lanes16(kf.data(), q.data(), n)) << n;
      }
      EXPECT_EQ(simd->dot_f16_vec(k.data(), q.data(), n), llama_order::dot_vec_f16(kf.data(), q.data(), n)) << n;
      std::vector<float> acc(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) acc[size_t(i)] = want[size_t(i)] = val(rng);
      const float p = 0.3183f;
      simd->axpy_f16(p, k.data(), acc.data(), n);
      for (int64_t i = 0; i < n; ++i) want[size_t(i)] = std::fma(kf[size_t(i)], p, want[size_t(i)]);
      EXPECT_EQ(acc, want) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(LlamaOrder, ExpPolynomialIsWithinTwoUlpOfExp) {
  EXPECT_EQ(llama_order::expf_avx512(0.0f), 1.0f);
  EXPECT_EQ(llama_order::expf_avx512(-INFINITY), 0.0f);
  EXPECT_EQ(llama_order::expf_avx512(-200.0f), 0.0f);
  EXPECT_EQ(llama_order::expf_avx512(200.0f), INFINITY);
  EXPECT_TRUE(std::isnan(llama_order::expf_avx512(NAN)));
  int max_ulp = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const float got = llama_order::expf_avx512(x);
    const float want = float(std::exp(double(x)));
    int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    max_ulp = std::max(max_ulp, std::abs(a - b));
  }
  EXPECT_LE(max_ulp, 2);  // ggml documents 1.45 + 0.5 ulp
  // A subnormal result is rounded once (vscalefps): within one subnormal step.
  const float tiny = llama_order::expf_avx512(-100.0f);
  EXPECT_GT(tiny, 0.0f);
  EXPECT_NEAR(double(tiny), std::exp(-100.0), std::ldexp(1.0, -149));
}

TEST(LlamaOrder, ReductionsAddInGgmlsTree) {
  // Values chosen so that any other grouping gives a different float sum.
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = 1.0f;
  a[0] = 1e8f;
  a[8] = -1e8f;  // cancels first in the tree: a[0] + a[8]
  EXPECT_EQ(llama_order::reduce_add16(a), 14.0f);
  a[8] = 1.0f;
  a[4] = -1e8f;  // a[0] + a[4] only meet after the pairwise adds with +1 each: 1e8+1 rounds to 1e8
  EXPECT_EQ(llama_order::reduce_add16(a), 12.0f);
  float b[8] = {1e8f, 1.0f, 1.0f, 1.0f, -1e8f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(llama_order::hsum8(b), 6.0f);
}

}  // namespace
}  // namespace opal::cpu
