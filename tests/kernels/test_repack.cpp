// Load-time repacking of CPU weights (backends/cpu/kernels/repack.h): the
// row-group layout of Q8_0 / Q4_0 / Q5_0 unpacks to the GGUF's bytes (odd row counts,
// partial last groups, every row range), and the kernels that read it
// (MatmulKernels::gemm_packed) give the plain layout's results bit for bit
// under every ISA the host runs: same bytes per block, same summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "support/isa_coverage.h"
#include "support/kernel_call.h"

namespace opal::cpu {
namespace {

// The packed gemm's arguments for rows [b, e) of a rows x k matrix w in layout
// (a thread's slice), n_act activation rows act, into out (stride rows).
GemmArgs packed_args(const MatmulKernels& kern, uint8_t layout, const uint8_t* w, uint64_t w_row_bytes, int64_t k,
                     int64_t rows, int64_t b, int64_t e, const std::vector<uint8_t>& act, int64_t n_act, float* out,
                     float* scratch) {
  GemmArgs g;
  g.w = w;
  g.w_row_bytes = w_row_bytes;
  g.k = k;
  g.row_begin = b;
  g.row_end = e;
  g.act = act.data();
  g.act_row_bytes = kern.act_row_bytes(k);
  g.n_act = n_act;
  g.out = out;
  g.out_stride = rows;
  g.scratch = scratch;
  g.layout = layout;
  g.n_rows = rows;
  return g;
}

TEST(RowGroups, UnpackGivesTheGgufBytesBack) {
  std::mt19937 rng(11);
  for (uint8_t layout : {kLayoutRowGroups8, kLayoutQ5Groups8})
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0})
      for (int64_t k : {32, 96, 4352})
        for (int64_t rows : {1, 7, 8, 9, 16, 23, 37}) {
          if (!layout_supports(layout, t)) continue;
          const auto plain = test::random_weights(t, rows, k, rng);
          auto packed = plain;
          repack_matrix(layout, t, packed.data(), k, rows);
          if (rows >= 8) {
            EXPECT_NE(0, std::memcmp(plain.data(), packed.data(), plain.size())) << "nothing moved";
          }
          // Rows past the last whole group stay where they were.
          const uint64_t rb = row_bytes(t, k), tail = uint64_t(rows / 8 * 8) * rb;
          EXPECT_EQ(0, std::memcmp(plain.data() + tail, packed.data() + tail, plain.size() - tail));
          for (int64_t b = 0; b < rows; b += 3)
            for (int64_t e : {b + 1, rows}) {
              if (e > rows) continue;
              std::vector<uint8_t> out(uint64_t(e - b) * rb, 0xAB);
              unpack_rows(layout, t, packed.data(), k, rows, b, e, out.data());
              EXPECT_EQ(0, std::memcmp(out.data(), plain.data() + uint64_t(b) * rb, out.size()))
                  << layout_name(layout) << " " << dtype_name(t) << " k " << k << " rows " << rows << " [" << b << ", "
                  << e << ")";
            }
        }
}

TEST(RowGroups, RefusesTypesAndRangesItDoesNotHold) {
  EXPECT_TRUE(layout_supports(kLayoutRowGroups8, DType::Q8_0));
  EXPECT_TRUE(layout_supports(kLayoutRowGroups8, DType::Q4_0));
  EXPECT_FALSE(layout_supports(kLayoutRowGroups8, DType::Q5_0));  // kLayoutQ5Groups8 on every ISA since stop 40
  EXPECT_FALSE(layout_supports(kLayoutRowGroups8, DType::Q4_K));
  EXPECT_FALSE(layout_supports(kLayoutRowGroups8, DType::F16));
  std::vector<uint8_t> w(row_bytes(DType::Q4_K, 256) * 8);
  EXPECT_THROW(repack_matrix(kLayoutRowGroups8, DType::Q4_K, w.data(), 256, 8), Error);
  std::vector<uint8_t> q(row_bytes(DType::Q8_0, 32) * 8), out(row_bytes(DType::Q8_0, 32));
  EXPECT_THROW(unpack_rows(kLayoutRowGroups8, DType::Q8_0, q.data(), 32, 8, 7, 9, out.data()), Error);
  EXPECT_TRUE(layout_supports(kLayoutQ5Groups8, DType::Q5_0));
  EXPECT_FALSE(layout_supports(kLayoutQ5Groups8, DType::Q4_0));
  EXPECT_EQ(layout_group_rows(kLayoutQ5Groups8), 8);
  EXPECT_STREQ(layout_name(kLayoutQ5Groups8), "q5groups8");
  EXPECT_THROW(repack_matrix(kLayoutQ5Groups8, DType::Q8_0, q.data(), 32, 8), Error);
}

// Every bit pattern of a Q5_0 block through kLayoutQ5Groups8 (stop 24: the quants
// stored whole, 5 bits, the top two bits of the upper half in the word): random
// bytes, all quants 31 and all 0; the unpack gives the bytes back and the group
// kernels the plain entry's bits (the largest lane sums: 31 * 127 * 4).
TEST(RowGroups, Q5WholeQuantsGiveThePlainBitsForEveryPattern) {
  std::mt19937 rng(37);
  int checked = 0;
  const int64_t k = 128, rows = 19;
  const uint64_t rb = row_bytes(DType::Q5_0, k);
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::vector<uint8_t> plain(rb * uint64_t(rows));
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = pattern == 0 ? uint8_t(rng()) : pattern == 1 ? 0xFF : 0x00;
    for (uint64_t b = 0; b < plain.size(); b += 22) {  // finite f16 d: 2^-10 .. 2^-9
      const uint16_t d = uint16_t(0x1400 | (rng() & 0x3FF));
      std::memcpy(&plain[b], &d, 2);
    }
    auto packed = plain;
    repack_matrix(kLayoutQ5Groups8, DType::Q5_0, packed.data(), k, rows);
    std::vector<uint8_t> back(plain.size());
    unpack_rows(kLayoutQ5Groups8, DType::Q5_0, packed.data(), k, rows, 0, rows, back.data());
    EXPECT_EQ(0, std::memcmp(back.data(), plain.data(), plain.size())) << "pattern " << pattern;
    std::vector<float> x(size_t(3 * k));
    std::uniform_real_distribution<float> val(-4.0f, 4.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = pattern == 0 ? val(rng) : (i / 8 % 2 ? -3.0f : 3.0f);
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
      const MatmulKernels* kern = matmul_kernels(DType::Q5_0, isa);
      if (!kern || kern->packed_layout != kLayoutQ5Groups8) continue;
      for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama}) {  // block-exact (stop 25) and llama.cpp's
        set_batch_order(order);
        for (int64_t n_act = 1; n_act <= 3; ++n_act) {
          const auto act = test::convert_acts(*kern, x.data(), n_act, k);
          test::GemmCall call;
          call.fill = -1.0f;
          const auto want = test::run_gemm(*kern, plain, DType::Q5_0, rows, k, act, n_act, call);
          std::vector<float> got(want.size(), -1.0f);
          std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
          for (auto [b, e] : {std::pair{int64_t(0), int64_t(8)}, std::pair{int64_t(8), rows}}) {
            const GemmArgs g = packed_args(*kern, kLayoutQ5Groups8, packed.data(), rb, k, rows, b, e, act, n_act,
                                           got.data(), scratch.data());
            kern->gemm_packed(g);
          }
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << isa_name(isa) << " pattern " << pattern << " n_act " << n_act << " order " << int(order) << ": "
              << got[0] << " vs " << want[0];
          ++checked;
        }
      }
    }
  }
  set_batch_order(BatchOrder::by_type);
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the kLayoutQ5Groups8 kernels were not run";
  }
#endif
}

// The packed gemm over slices on group boundaries (as ops/matmul.cpp splits
// threads) against the plain gemm of the same entry: the same bits.
TEST(RowGroups, PackedGemmIsThePlainBitsOnEveryIsa) {
  std::mt19937 rng(5);
  int checked = 0, checked_avx512 = 0, checked_q5_0 = 0, checked_q5_0_avx512 = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false))
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
      const MatmulKernels* kern = matmul_kernels(t, isa);
      if (!kern || kern->packed_layout == kLayoutPlain) {
        std::printf("[ REPACK   ] %s %s: no packed layout (plain kernels only)\n", isa_name(isa), dtype_name(t));
        continue;
      }
      // k = 6144: Q8_0 groups of 51 KiB, over the AVX-512 kernel's long-group bound (its decode in the batch form).
      for (int64_t k : {32, 96, 256, 4352, 6144})
        // 40 rows: a second slice of 3 groups (AVX-512 Q4_0: a 16-row step, then an 8-row one).
        for (int64_t rows : {8, 13, 37, 40, 64}) {
          const auto plain = test::random_weights(t, rows, k, rng);
          auto packed = plain;
          repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
          for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama}) {  // Q5_0: block-exact, llama.cpp's
            if (t != DType::Q5_0 && order != BatchOrder::by_type) continue;
            set_batch_order(order);
            for (int64_t n_act :
                 {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(7), kern->packed_max_act}) {
              // The decode with and without its software prefetch (matmul_kernels.h), by turns: the same bits.
              set_decode_prefetch((n_act + rows) % 2 ? DecodePrefetch::on : DecodePrefetch::off);
              std::normal_distribution<float> val(0.0f, 2.0f);
              std::vector<float> x(size_t(n_act * k));
              for (auto& v : x) v = val(rng);
              const auto act = test::convert_acts(*kern, x.data(), n_act, k);
              test::GemmCall call;
              call.fill = -1.0f;
              const auto want = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
              std::vector<float> got(want.size(), -1.0f);
              std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
              const int64_t split = rows / 2 / 8 * 8;  // two threads' slices, the second with the partial group
              for (auto [b, e] : {std::pair{int64_t(0), split}, std::pair{split, rows}}) {
                if (b >= e) continue;
                const GemmArgs g = packed_args(*kern, kern->packed_layout, packed.data(), row_bytes(t, k), k, rows, b,
                                               e, act, n_act, got.data(), scratch.data());
                kern->gemm_packed(g);
              }
              EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << " n_act " << n_act;
              ++checked;
              if (isa == Isa::avx512) ++checked_avx512;
              if (t == DType::Q5_0) ++checked_q5_0;
              if (t == DType::Q5_0 && isa == Isa::avx512) ++checked_q5_0_avx512;
            }
          }
          set_batch_order(BatchOrder::by_type);
          set_decode_prefetch(DecodePrefetch::by_host);
          // A slice must start on a group.
          GemmArgs bad;
          bad.w = packed.data();
          bad.w_row_bytes = row_bytes(t, k);
          bad.k = k;
          bad.row_begin = 3;
          bad.row_end = rows;
          bad.n_rows = rows;
          bad.layout = kern->packed_layout;
          EXPECT_THROW(kern->gemm_packed(bad), Error);
        }
    }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the row-group kernels were not run";
    EXPECT_GT(checked_q5_0, 0) << "AVX2 host: the Q5_0 row-group kernels were not run";
  }
  if (host_supports(Isa::avx512)) {
    EXPECT_GT(checked_avx512, 0) << "AVX-512 host: the avx512 row-group kernels were not run";
    EXPECT_GT(checked_q5_0_avx512, 0) << "AVX-512 host: the avx512 Q5_0 row-group kernel was not run";
  }
#endif
}

// A scalar fold's outputs for every weight row and activation row: want[a * rows
// + r] = fold(weight row r (row bytes rb), activation row a (arb), nb blocks).
std::vector<float> fold_outputs(float (*fold)(const uint8_t*, const uint8_t*, int64_t),
                                const std::vector<uint8_t>& plain, uint64_t rb, int64_t rows,
                                const std::vector<uint8_t>& act, uint64_t arb, int64_t n_act, int64_t nb) {
  std::vector<float> want(size_t(n_act * rows));
  for (int64_t a = 0; a < n_act; ++a)
    for (int64_t r = 0; r < rows; ++r)
      want[size_t(a * rows + r)] = fold(plain.data() + uint64_t(r) * rb, act.data() + uint64_t(a) * arb, nb);
  return want;
}

// The block-exact order tests' check under each batch order: rows [0, 8) and
// [8, rows) of the row groups in layout (two threads' slices; batches above
// packed_max_act read in place) give the plain layout's bits; those bits are
// want (the scalar fold) under auto and lanes, and for the in-place batches
// under llama too; decode under llama keeps llama.cpp's order, which must
// differ from the fold where llama_differs (rows long enough). Returns how many
// orders matched want.
int expect_order_bits(const MatmulKernels& kern, Isa isa, DType type, uint8_t layout, const std::vector<uint8_t>& plain,
                      const std::vector<uint8_t>& packed, int64_t rows, int64_t k, const std::vector<uint8_t>& act,
                      int64_t n_act, const std::vector<float>& want, bool llama_differs) {
  int checked = 0;
  const bool batch = n_act > kern.packed_max_act;
  const uint64_t rb = row_bytes(type, k);
  for (BatchOrder order : {BatchOrder::by_type, BatchOrder::lanes, BatchOrder::llama}) {
    set_batch_order(order);
    test::GemmCall call;
    call.fill = -1.0f;
    const auto unpacked = test::run_gemm(kern, plain, type, rows, k, act, n_act, call);
    std::vector<float> got(unpacked.size(), -1.0f);
    std::vector<float> scratch(size_t(kern.scratch_floats(k) + 1));
    for (auto [b, e] : {std::pair{int64_t(0), int64_t(8)}, std::pair{int64_t(8), rows}}) {
      const GemmArgs g =
          packed_args(kern, layout, packed.data(), rb, k, rows, b, e, act, n_act, got.data(), scratch.data());
      if (batch) EXPECT_TRUE(kern.gemm_packed_batch(g));
      else kern.gemm_packed(g);
    }
    EXPECT_EQ(0, std::memcmp(unpacked.data(), got.data(), got.size() * sizeof(float)))
        << isa_name(isa) << " k " << k << " n_act " << n_act << " order " << int(order);
    const bool same = std::memcmp(want.data(), got.data(), got.size() * sizeof(float)) == 0;
    if (order == BatchOrder::llama && !batch) {
      if (llama_differs) {
        EXPECT_FALSE(same) << isa_name(isa) << " k " << k << " n_act " << n_act;
      }
    } else {
      EXPECT_TRUE(same) << isa_name(isa) << " k " << k << " n_act " << n_act << " order " << int(order) << ": "
                        << got[0] << " vs " << want[0];
      ++checked;
    }
  }
  set_batch_order(BatchOrder::by_type);
  return checked;
}

// That a test met its kernels on the host's ISAs: checked > 0 on an AVX2 host, checked_avx512 > 0 (the avx512
// kernels' share) on an AVX-512 one.
void expect_ran(int checked, int checked_avx512, const char* what) {
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: " << what << " were not run";
  }
  if (host_supports(Isa::avx512)) {
    EXPECT_GT(checked_avx512, 0) << "AVX-512 host: the avx512 forms of " << what << " were not run";
  }
#else
  (void)checked, (void)checked_avx512, (void)what;
#endif
}

// The AVX2 (stop 25) and AVX-512 (stop 40) Q5_0 kernels' block-exact order (the lanes order at every
// batch size, docs/fidelity.md): under auto / lanes each output is llama_order::
// block_exact's fold of the blocks (the exact int32 sum of (q - 16) * x, one FMA
// by d_w * d_x a block) on the row groups (decode, 1-16 activation rows) and the
// plain layout alike; under llama the groups keep llama.cpp's 8-lane order,
// which differs somewhere.
TEST(RowGroups, Q5BlockExactOrderIsTheScalarBlockFold) {
  std::mt19937 rng(41);
  int checked = 0, checked_avx512 = 0;
  const int64_t rows = 21;
  for (int64_t k : {32, 96, 4352}) {
    const int64_t nb = k / 32;
    const uint64_t rb = row_bytes(DType::Q5_0, k);
    const auto plain = test::random_weights(DType::Q5_0, rows, k, rng);
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
      const MatmulKernels* kern = matmul_kernels(DType::Q5_0, isa);
      if (!kern || kern->packed_layout != kLayoutQ5Groups8) continue;
      auto packed = plain;
      repack_matrix(kern->packed_layout, DType::Q5_0, packed.data(), k, rows);
      for (int64_t n_act : {1, 2, 3, 5, 16}) {
        std::normal_distribution<float> val(0.0f, 2.0f);
        std::vector<float> x(size_t(n_act * k));
        for (auto& v : x) v = val(rng);
        const auto act = test::convert_acts(*kern, x.data(), n_act, k);
        const uint64_t arb = kern->act_row_bytes(k);
        std::vector<float> want(size_t(n_act * rows));
        for (int64_t a = 0; a < n_act; ++a)
          for (int64_t r = 0; r < rows; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
              const uint8_t* blk = plain.data() + uint64_t(r) * rb + uint64_t(b) * 22;
              const uint8_t* xblk = act.data() + uint64_t(a) * arb + uint64_t(b) * 34;
              uint16_t wd, xd;
              uint32_t qh;
              std::memcpy(&wd, blk, 2);
              std::memcpy(&qh, blk + 2, 4);
              std::memcpy(&xd, xblk, 2);
              int8_t wq[32];
              for (int j = 0; j < 16; ++j) {
                wq[j] = int8_t(((blk[6 + j] & 15) | ((qh >> j & 1u) << 4)) - 16);
                wq[j + 16] = int8_t(((blk[6 + j] >> 4) | ((qh >> (j + 16) & 1u) << 4)) - 16);
              }
              acc = llama_order::block_exact(wq, reinterpret_cast<const int8_t*>(xblk + 2),
                                             f16_to_f32(wd) * f16_to_f32(xd), acc);
            }
            want[size_t(a * rows + r)] = acc;
          }
        const int matched = expect_order_bits(*kern, isa, DType::Q5_0, kern->packed_layout, plain, packed, rows, k, act,
                                              n_act, want, k >= 96);
        checked += matched;
        if (isa == Isa::avx512) checked_avx512 += matched;
      }
    }
  }
  expect_ran(checked, checked_avx512, "the block-exact Q5_0 kernels");
}

// The K-quant row groups (kLayoutKGroups8, Q4_K and Q6_K; kLayoutKGroups8Pairs and
// kLayoutQ4KGroups8Wide, Q4_K; kLayoutQ6KGroups8Pairs and kLayoutQ6KGroups8Wide, Q6_K): the unpack gives the GGUF's
// bytes back for odd row counts, partial last groups and every row range; the rest of a partial group stays in place.
TEST(KGroups, UnpackGivesTheGgufBytesBack) {
  std::mt19937 rng(13);
  for (uint8_t layout :
       {kLayoutKGroups8, kLayoutKGroups8Pairs, kLayoutQ6KGroups8Pairs, kLayoutQ4KGroups8Wide, kLayoutQ6KGroups8Wide})
    for (DType t : {DType::Q4_K, DType::Q6_K})
      for (int64_t k : {256, 768})
        for (int64_t rows : {1, 7, 8, 9, 16, 23, 37}) {
          if (!layout_supports(layout, t)) continue;
          const auto plain = test::random_weights(t, rows, k, rng);
          auto packed = plain;
          repack_matrix(layout, t, packed.data(), k, rows);
          if (rows >= 8) {
            EXPECT_NE(0, std::memcmp(plain.data(), packed.data(), plain.size())) << "nothing moved";
          }
          const uint64_t rb = row_bytes(t, k), tail = uint64_t(rows / 8 * 8) * rb;
          EXPECT_EQ(0, std::memcmp(plain.data() + tail, packed.data() + tail, plain.size() - tail));
          for (int64_t b = 0; b < rows; b += 3)
            for (int64_t e : {b + 1, rows}) {
              if (e > rows) continue;
              std::vector<uint8_t> out(uint64_t(e - b) * rb, 0xAB);
              unpack_rows(layout, t, packed.data(), k, rows, b, e, out.data());
              EXPECT_EQ(0, std::memcmp(out.data(), plain.data() + uint64_t(b) * rb, out.size()))
                  << layout_name(layout) << " " << dtype_name(t) << " k " << k << " rows " << rows << " [" << b << ", "
                  << e << ")";
            }
        }
}

TEST(KGroups, RefusesTypesAndRangesItDoesNotHold) {
  EXPECT_TRUE(layout_supports(kLayoutKGroups8, DType::Q4_K));
  EXPECT_TRUE(layout_supports(kLayoutKGroups8, DType::Q6_K));
  EXPECT_FALSE(layout_supports(kLayoutKGroups8, DType::Q5_K));
  EXPECT_FALSE(layout_supports(kLayoutKGroups8, DType::Q8_0));
  EXPECT_FALSE(layout_supports(kLayoutRowGroups8, DType::Q6_K));
  EXPECT_EQ(layout_group_rows(kLayoutKGroups8), 8);
  EXPECT_STREQ(layout_name(kLayoutKGroups8), "kgroups8");
  EXPECT_TRUE(layout_supports(kLayoutKGroups8Pairs, DType::Q4_K));
  EXPECT_FALSE(layout_supports(kLayoutKGroups8Pairs, DType::Q6_K));
  EXPECT_EQ(layout_group_rows(kLayoutKGroups8Pairs), 8);
  EXPECT_STREQ(layout_name(kLayoutKGroups8Pairs), "kgroups8p");
  EXPECT_TRUE(is_k_groups_layout(kLayoutKGroups8Pairs));
  EXPECT_TRUE(layout_supports(kLayoutQ6KGroups8Pairs, DType::Q6_K));
  EXPECT_FALSE(layout_supports(kLayoutQ6KGroups8Pairs, DType::Q4_K));
  EXPECT_EQ(layout_group_rows(kLayoutQ6KGroups8Pairs), 8);
  EXPECT_STREQ(layout_name(kLayoutQ6KGroups8Pairs), "q6kgroups8p");
  EXPECT_TRUE(layout_supports(kLayoutQ4KGroups8Wide, DType::Q4_K));
  EXPECT_FALSE(layout_supports(kLayoutQ4KGroups8Wide, DType::Q6_K));
  EXPECT_EQ(layout_group_rows(kLayoutQ4KGroups8Wide), 8);
  EXPECT_STREQ(layout_name(kLayoutQ4KGroups8Wide), "q4kgroups8w");
  EXPECT_TRUE(is_k_groups_layout(kLayoutQ4KGroups8Wide));
  EXPECT_TRUE(layout_supports(kLayoutQ6KGroups8Wide, DType::Q6_K));
  EXPECT_FALSE(layout_supports(kLayoutQ6KGroups8Wide, DType::Q4_K));
  EXPECT_EQ(layout_group_rows(kLayoutQ6KGroups8Wide), 8);
  EXPECT_STREQ(layout_name(kLayoutQ6KGroups8Wide), "q6kgroups8w");
  EXPECT_TRUE(is_k_groups_layout(kLayoutQ6KGroups8Wide));
  EXPECT_TRUE(is_k_groups_layout(kLayoutQ6KGroups8Pairs));
  EXPECT_FALSE(is_k_groups_layout(kLayoutRowGroups8));
  std::vector<uint8_t> w(row_bytes(DType::Q8_0, 256) * 8);
  EXPECT_THROW(repack_matrix(kLayoutKGroups8, DType::Q8_0, w.data(), 256, 8), Error);
  std::vector<uint8_t> q(row_bytes(DType::Q4_K, 256) * 8), out(row_bytes(DType::Q4_K, 256) * 2);
  EXPECT_THROW(unpack_rows(kLayoutKGroups8, DType::Q4_K, q.data(), 256, 8, 7, 9, out.data()), Error);
  std::vector<uint8_t> q6(row_bytes(DType::Q6_K, 256) * 8);
  EXPECT_THROW(repack_matrix(kLayoutKGroups8Pairs, DType::Q6_K, q6.data(), 256, 8), Error);
  std::vector<uint8_t> q4(row_bytes(DType::Q4_K, 256) * 8);
  EXPECT_THROW(repack_matrix(kLayoutQ6KGroups8Pairs, DType::Q4_K, q4.data(), 256, 8), Error);
}

// The K-quant group kernels (1-3 activation rows, two threads' slices on
// group boundaries, the second with the partial group) against the plain
// entry of the same ISA: the same bits for every row (each row keeps the
// plain decode kernels' 8-lane order; the rows after the last group run them).
TEST(KGroups, PackedDecodeIsThePlainBitsOnEveryIsa) {
  std::mt19937 rng(17);
  int checked = 0, checked_pairs = 0, checked_q6_pairs = 0, checked_wide = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false))
    for (DType t : {DType::Q4_K, DType::Q6_K}) {
      const MatmulKernels* kern = matmul_kernels(t, isa);
      if (!kern || !is_k_groups_layout(kern->packed_layout)) {
        std::printf("[ REPACK   ] %s %s: no K-quant row groups (plain kernels only)\n", isa_name(isa), dtype_name(t));
        continue;
      }
      for (int64_t k : {256, 1024, 2304})
        for (int64_t rows : {8, 13, 37, 64}) {
          const auto plain = test::random_weights(t, rows, k, rng);
          auto packed = plain;
          repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
          for (int64_t n_act = 1; n_act <= kern->packed_max_act; ++n_act)
            for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama}) {  // Q4_K: super-block-exact, llama.cpp's
              if (t != DType::Q4_K && order != BatchOrder::by_type) continue;
              set_batch_order(order);
              // The decode with and without its software prefetch (matmul_kernels.h), by turns: the same bits.
              set_decode_prefetch((n_act + rows) % 2 ? DecodePrefetch::on : DecodePrefetch::off);
              std::normal_distribution<float> val(0.0f, 2.0f);
              std::vector<float> x(size_t(n_act * k));
              for (auto& v : x) v = val(rng);
              const auto act = test::convert_acts(*kern, x.data(), n_act, k);
              test::GemmCall call;
              call.fill = -1.0f;
              const auto per_row = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
              std::vector<float> got(per_row.size(), -1.0f);
              std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
              const int64_t split = rows / 2 / 8 * 8;
              for (auto [b, e] : {std::pair{int64_t(0), split}, std::pair{split, rows}}) {
                if (b >= e) continue;
                const GemmArgs g = packed_args(*kern, kern->packed_layout, packed.data(), row_bytes(t, k), k, rows, b,
                                               e, act, n_act, got.data(), scratch.data());
                kern->gemm_packed(g);
              }
              for (int64_t i = 0; i < int64_t(got.size()); ++i)
                EXPECT_EQ(0, std::memcmp(&per_row[size_t(i)], &got[size_t(i)], sizeof(float)))
                    << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << " n_act " << n_act
                    << " order " << int(order) << " act " << i / rows << " row " << i % rows << ": " << got[size_t(i)]
                    << " vs " << per_row[size_t(i)];
              ++checked;
              if (kern->packed_layout == kLayoutKGroups8Pairs) ++checked_pairs;
              if (kern->packed_layout == kLayoutQ6KGroups8Pairs) ++checked_q6_pairs;
              if (kern->packed_layout == kLayoutQ4KGroups8Wide || kern->packed_layout == kLayoutQ6KGroups8Wide)
                ++checked_wide;
            }
          set_batch_order(BatchOrder::by_type);
          set_decode_prefetch(DecodePrefetch::by_host);
          GemmArgs bad;
          bad.w = packed.data();
          bad.w_row_bytes = row_bytes(t, k);
          bad.k = k;
          bad.row_begin = 3;
          bad.row_end = rows;
          bad.n_rows = rows;
          bad.layout = kern->packed_layout;
          EXPECT_THROW(kern->gemm_packed(bad), Error);
        }
    }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the K-quant row-group kernels were not run";
    EXPECT_GT(checked_pairs, 0) << "AVX2 host: the re-paired Q4_K group kernels were not run";
    EXPECT_GT(checked_q6_pairs, 0) << "AVX2 host: the re-paired Q6_K group kernels were not run";
  }
  if (host_supports(Isa::avx512)) {
    EXPECT_GT(checked_wide, 0) << "AVX-512 host: the wide Q4_K / Q6_K group kernels were not run";
  }
#endif
}

// The AVX-512 group kernels read only their own layouts (kLayoutQ4KGroups8Wide, kLayoutQ6KGroups8Wide): a weight
// in kLayoutKGroups8 (the layout they read before stop 39, still the base of the AVX2 ones) is an error naming
// both layouts, for decode and for batches, not sums of the wrong bytes.
TEST(KGroups, Avx512GroupsRefuseAnotherLayout) {
  std::mt19937 rng(5);
  int checked = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false))
    for (DType t : {DType::Q4_K, DType::Q6_K}) {
      const MatmulKernels* kern = matmul_kernels(t, isa);
      if (!kern || (kern->packed_layout != kLayoutQ4KGroups8Wide && kern->packed_layout != kLayoutQ6KGroups8Wide))
        continue;
      const int64_t k = 256, rows = 16;
      auto packed = test::random_weights(t, rows, k, rng);
      repack_matrix(kLayoutKGroups8, t, packed.data(), k, rows);
      std::vector<float> x(size_t(8 * k), 0.5f), out(size_t(8 * rows)), scratch(size_t(kern->scratch_floats(k) + 1));
      for (int64_t n_act : {int64_t(1), int64_t(8)}) {
        const auto act = test::convert_acts(*kern, x.data(), n_act, k);
        const GemmArgs g = packed_args(*kern, kLayoutKGroups8, packed.data(), row_bytes(t, k), k, rows, 0, rows, act,
                                       n_act, out.data(), scratch.data());
        try {
          if (n_act > kern->packed_max_act) kern->gemm_packed_batch(g);
          else kern->gemm_packed(g);
          ADD_FAILURE() << isa_name(isa) << " " << dtype_name(t) << " n_act " << n_act << ": no error";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("kgroups8"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find(layout_name(kern->packed_layout)), std::string::npos) << e.what();
          ++checked;
        }
      }
    }
#if defined(__x86_64__)
  if (host_supports(Isa::avx512)) {
    EXPECT_EQ(checked, 4) << "AVX-512 host: the wide group kernels' layout check was not run";
  }
#endif
}

// A Q4_K row against a Q8_K activation row in the super-block-exact order
// (the lanes batches'): per super-block the exact integer sums
// isum = sum_s sc_s * (sub-block s . x) and msum = sum_s m_s * (sum of x over s),
// then acc = fma(float(isum), d * d_x, acc), acc = fma(-float(msum), dmin * d_x, acc).
float q4_K_super_block_fold(const uint8_t* w, const uint8_t* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * 144;
    const uint8_t* xb = x + b * 292;
    uint16_t dh, mh;
    float xd;
    std::memcpy(&dh, wb, 2);
    std::memcpy(&mh, wb + 2, 2);
    std::memcpy(&xd, xb, 4);
    const uint8_t* sm = wb + 4;
    int32_t sc[8], mn[8];
    for (int j = 0; j < 4; ++j) {
      sc[j] = sm[j] & 63;
      mn[j] = sm[j + 4] & 63;
      sc[j + 4] = (sm[j + 8] & 15) | (sm[j] >> 6) << 4;
      mn[j + 4] = (sm[j + 8] >> 4) | (sm[j + 4] >> 6) << 4;
    }
    const int8_t* xq = reinterpret_cast<const int8_t*>(xb + 4);
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t dot = 0, xsum = 0;
      for (int e = 32 * s; e < 32 * s + 32; ++e) {
        const uint8_t byte = wb[16 + 32 * (e / 64) + e % 32];
        dot += int32_t(e % 64 < 32 ? byte & 15 : byte >> 4) * xq[e];
        xsum += xq[e];
      }
      isum += sc[s] * dot;
      msum += mn[s] * xsum;
    }
    acc = std::fma(float(isum), f16_to_f32(dh) * xd, acc);
    acc = std::fma(-float(msum), f16_to_f32(mh) * xd, acc);
  }
  return acc;
}

// The AVX2 Q4_K kernels' super-block-exact order (stop 26: the lanes order at
// every batch size where it is selected, docs/fidelity.md): under auto / lanes
// each output of decode and 2-3 activation rows is q4_K_super_block_fold's, on
// the re-paired row groups (two threads' slices, the partial last group) and the
// plain layout alike; under llama decode keeps llama.cpp's 8-lane order, which
// differs somewhere. Batches of 4 or more (read in place) are the fold in every order;
// so are the AVX-512 batches on kLayoutQ4KGroups8Wide (5-31 rows in place, 32 and
// more through the rows-in-lanes repack of the groups), whose decode keeps the
// plain 16-lane order (KGroups.PackedDecodeIsThePlainBitsOnEveryIsa).
TEST(KGroups, Q4KSuperBlockExactOrderIsTheScalarFold) {
  std::mt19937 rng(43);
  int checked = 0, checked_wide = 0;
  const int64_t rows = 21;
  for (int64_t k : {256, 1024, 2304}) {
    const int64_t nb = k / 256;
    const uint64_t rb = row_bytes(DType::Q4_K, k);
    const auto plain = test::random_weights(DType::Q4_K, rows, k, rng);
    for (uint8_t layout : {kLayoutKGroups8Pairs, kLayoutQ4KGroups8Wide}) {
      auto packed = plain;
      repack_matrix(layout, DType::Q4_K, packed.data(), k, rows);
      const std::vector<int64_t> acts =
          layout == kLayoutKGroups8Pairs ? std::vector<int64_t>{1, 2, 3, 5} : std::vector<int64_t>{5, 7, 33};
      for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
        const MatmulKernels* kern = matmul_kernels(DType::Q4_K, isa);
        if (!kern || kern->packed_layout != layout) continue;
        for (int64_t n_act : acts) {
          std::normal_distribution<float> val(0.0f, 2.0f);
          std::vector<float> x(size_t(n_act * k));
          for (auto& v : x) v = val(rng);
          const auto act = test::convert_acts(*kern, x.data(), n_act, k);
          const uint64_t arb = kern->act_row_bytes(k);
          const auto want = fold_outputs(q4_K_super_block_fold, plain, rb, rows, act, arb, n_act, nb);
          const int n =
              expect_order_bits(*kern, isa, DType::Q4_K, layout, plain, packed, rows, k, act, n_act, want, k >= 1024);
          checked += n;
          if (layout == kLayoutQ4KGroups8Wide) checked_wide += n;
        }
      }
    }
  }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the super-block-exact Q4_K kernels were not run";
  }
  if (host_supports(Isa::avx512)) {
    EXPECT_GT(checked_wide, 0) << "AVX-512 host: the wide Q4_K batch kernels were not run";
  }
#endif
}

// A Q6_K row against a Q8_K activation row in llama.cpp's x86 vec_dot order
// (the AVX2 decode kernels'): per super-block 8 lanes, lane L an exact int32
// sum of sc_s * q * x over the elements e with e % 32 in [4L, 4L + 4) less
// 32 * (sc_2L * bsum_2L + sc_2L+1 * bsum_2L+1), folded as
// acc_L = fma(float(isum_L), d * d_x, acc_L); then hsum8's tree over the 8.
float q6_K_lane_fold(const uint8_t* w, const uint8_t* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * 210;  // ql[128] | qh[64] | scales[16] | d
    const uint8_t* xb = x + b * 292;  // d f32 | qs[256] | bsums[16]
    const int8_t* sc = reinterpret_cast<const int8_t*>(wb + 192);
    const int8_t* xq = reinterpret_cast<const int8_t*>(xb + 4);
    uint16_t dh;
    float xd;
    std::memcpy(&dh, wb + 208, 2);
    std::memcpy(&xd, xb, 4);
    int32_t isum[8] = {};
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, c = e % 128 / 32, i = e % 32;
      const uint8_t ql = wb[64 * h + 32 * (c % 2) + i];
      const int q = (c < 2 ? ql & 15 : ql >> 4) | (wb[128 + 32 * h + i] >> (2 * c) & 3) << 4;
      isum[i / 4] += int32_t(sc[e / 16]) * q * xq[e];
    }
    for (int l = 0; l < 8; ++l) {
      int16_t bs[2];
      std::memcpy(bs, xb + 260 + 4 * l, 4);
      isum[l] -= 32 * (int32_t(sc[2 * l]) * bs[0] + int32_t(sc[2 * l + 1]) * bs[1]);
      acc[l] = std::fma(float(isum[l]), f16_to_f32(dh) * xd, acc[l]);
    }
  }
  return llama_order::hsum8(acc);
}

// The AVX2 / AVX-VNNI Q6_K decode (1-3 activation rows) keeps llama.cpp's 8-lane
// order on the plain layout and the re-paired row groups (kLayoutQ6KGroups8Pairs,
// stop 27): each output is q6_K_lane_fold's bit for bit, on two threads' slices
// with the partial last group. (AVX-512's Q6_K is not in this order: docs/fidelity.md.)
TEST(KGroups, Q6KDecodeIsLlamaCppsLaneFold) {
  std::mt19937 rng(47);
  int checked = 0;
  const int64_t rows = 21;
  for (int64_t k : {256, 1024, 2304}) {
    const int64_t nb = k / 256;
    const uint64_t rb = row_bytes(DType::Q6_K, k);
    const auto plain = test::random_weights(DType::Q6_K, rows, k, rng);
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
      const MatmulKernels* kern = matmul_kernels(DType::Q6_K, isa);
      if ((isa != Isa::avx2 && isa != Isa::avx2_vnni) || !kern || !is_k_groups_layout(kern->packed_layout)) continue;
      auto packed = plain;
      repack_matrix(kern->packed_layout, DType::Q6_K, packed.data(), k, rows);
      for (int64_t n_act = 1; n_act <= kern->packed_max_act; ++n_act) {
        std::normal_distribution<float> val(0.0f, 2.0f);
        std::vector<float> x(size_t(n_act * k));
        for (auto& v : x) v = val(rng);
        const auto act = test::convert_acts(*kern, x.data(), n_act, k);
        const uint64_t arb = kern->act_row_bytes(k);
        const auto want = fold_outputs(q6_K_lane_fold, plain, rb, rows, act, arb, n_act, nb);
        test::GemmCall call;
        call.fill = -1.0f;
        const auto unpacked = test::run_gemm(*kern, plain, DType::Q6_K, rows, k, act, n_act, call);
        std::vector<float> got(unpacked.size(), -1.0f);
        std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
        for (auto [b, e] : {std::pair{int64_t(0), int64_t(8)}, std::pair{int64_t(8), rows}})
          kern->gemm_packed(packed_args(*kern, kern->packed_layout, packed.data(), rb, k, rows, b, e, act, n_act,
                                        got.data(), scratch.data()));
        EXPECT_EQ(0, std::memcmp(want.data(), unpacked.data(), want.size() * sizeof(float)))
            << isa_name(isa) << " plain k " << k << " n_act " << n_act << ": " << unpacked[0] << " vs " << want[0];
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << isa_name(isa) << " " << layout_name(kern->packed_layout) << " k " << k << " n_act " << n_act << ": "
            << got[0] << " vs " << want[0];
        ++checked;
      }
    }
  }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the Q6_K group kernels were not run";
  }
#endif
}

// Batches above packed_max_act on the K-quant row groups, read in place
// (MatmulKernels::gemm_packed_batch, stop 17) in the plain batch kernels' lanes
// order: the plain entry's bits on the GGUF layout for every row (thread slices
// on groups, the last with the partial group, odd rows, batches of 4-33 rows
// that leave every remainder of the 4-row steps), and the same bits on every
// ISA (the lanes order is one order). Without a scratch the entry declines
// (false) and writes nothing.
TEST(KGroups, PackedBatchesAreThePlainBitsOnEveryIsa) {
  std::mt19937 rng(29);
  int checked = 0;
  for (DType t : {DType::Q4_K, DType::Q6_K})
    for (int64_t k : {256, 1024, 2304})
      for (int64_t rows : {8, 13, 37, 64}) {
        const auto plain = test::random_weights(t, rows, k, rng);
        std::normal_distribution<float> val(0.0f, 2.0f);
        std::vector<float> x(size_t(33 * k));
        for (auto& v : x) v = val(rng);
        std::vector<std::vector<float>> first(34);  // the first ISA's results per batch size
        for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
          const MatmulKernels* kern = matmul_kernels(t, isa);
          if (!kern || !is_k_groups_layout(kern->packed_layout) || !kern->gemm_packed_batch) {
            std::printf("[ REPACK   ] %s %s: no K-quant group batches\n", isa_name(isa), dtype_name(t));
            continue;
          }
          auto packed = plain;
          repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
          for (int64_t n_act :
               {int64_t(4), int64_t(5), int64_t(6), int64_t(7), int64_t(8), int64_t(13), int64_t(16), int64_t(33)}) {
            if (n_act <= kern->packed_max_act) continue;
            const auto act = test::convert_acts(*kern, x.data(), n_act, k);
            test::GemmCall call;
            call.fill = -1.0f;
            const auto want = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
            std::vector<float> got(want.size(), -1.0f);
            std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
            GemmArgs g;
            g.w = packed.data();
            g.w_row_bytes = row_bytes(t, k);
            g.k = k;
            g.act = act.data();
            g.act_row_bytes = kern->act_row_bytes(k);
            g.n_act = n_act;
            g.out = got.data();
            g.out_stride = rows;
            g.layout = kern->packed_layout;
            g.n_rows = rows;
            g.row_begin = 0;
            g.row_end = rows;
            EXPECT_FALSE(kern->gemm_packed_batch(g)) << "no scratch: declined";  // g.scratch is null
            for (float v : got) ASSERT_EQ(-1.0f, v) << "declined, yet wrote the output";
            g.scratch = scratch.data();
            const int64_t split = rows / 2 / 8 * 8;
            for (auto [b, e] : {std::pair{int64_t(0), split}, std::pair{split, rows}}) {
              if (b >= e) continue;
              g.row_begin = b;
              g.row_end = e;
              EXPECT_TRUE(kern->gemm_packed_batch(g));
            }
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << " n_act " << n_act;
            auto& ref = first[size_t(n_act)];
            if (ref.empty()) ref = got;
            else
              EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)))
                  << isa_name(isa) << " " << dtype_name(t) << " n_act " << n_act << ": another ISA's bits";
            ++checked;
          }
          GemmArgs bad;  // a slice must start on a group
          bad.w = packed.data();
          bad.w_row_bytes = row_bytes(t, k);
          bad.k = k;
          bad.row_begin = 3;
          bad.row_end = rows;
          bad.n_rows = rows;
          bad.n_act = 9;
          bad.layout = kern->packed_layout;
          std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
          bad.scratch = scratch.data();
          EXPECT_THROW(kern->gemm_packed_batch(bad), Error);
        }
      }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the K-quant group batches were not run";
  }
#endif
}

// AVX-512's K-quant group batches (stop 34): below kQ4KLanesFromActs / kQ6KLanesFromActs (32 / 16) activation rows
// the in-place group form, from there on the plain entry's RowsInLanes with its repack reading the groups. Both
// sides of both thresholds and a prompt's 200 rows, on 27 rows (three groups and three plain rows after them), as
// one slice and as two threads' slices: every call runs on the groups (none declines) and gives the plain entry's
// bits on the GGUF's rows. MUL_MAT's: OpsThreads.MulMatKQuantPromptOnGroupsIsThePlainBits.
TEST(KGroups, Avx512PromptsRunOnTheGroupsWithThePlainBits) {
  if (!host_supports(Isa::avx512)) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(41);
  const int64_t k = 512, rows = 27;
  for (DType t : {DType::Q4_K, DType::Q6_K}) {
    const MatmulKernels* kern = matmul_kernels(t, Isa::avx512);
    ASSERT_TRUE(kern && kern->gemm_packed_batch) << dtype_name(t);
    const auto plain = test::random_weights(t, rows, k, rng);
    auto packed = plain;
    repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
    std::normal_distribution<float> val(0.0f, 2.0f);
    std::vector<float> x(size_t(200 * k));
    for (auto& v : x) v = val(rng);
    for (int64_t n_act : {int64_t(9), int64_t(15), int64_t(16), int64_t(31), int64_t(32), int64_t(200)}) {
      const auto acts = test::convert_acts(*kern, x.data(), n_act, k);
      std::vector<float> want(size_t(rows * n_act), -1.0f), got(want.size(), -2.0f);
      std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
      GemmArgs p = packed_args(*kern, kLayoutPlain, plain.data(), row_bytes(t, k), k, rows, 0, rows, acts, n_act,
                               want.data(), scratch.data());
      p.n_rows = 0;
      kern->gemm(p);
      for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, rows}, {0, 16}, {16, rows}}) {
        const GemmArgs g = packed_args(*kern, kern->packed_layout, packed.data(), row_bytes(t, k), k, rows, b, e, acts,
                                       n_act, got.data(), scratch.data());
        EXPECT_TRUE(kern->gemm_packed_batch(g)) << dtype_name(t) << " n_act " << n_act << " declined";
      }
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << dtype_name(t) << " n_act " << n_act;
    }
  }
}

// Every bit pattern of the quant and scale bytes (stop 18: Q6_K's quants are
// re-encoded at load, p / q / r, repack.h), not only what the quantizer
// writes: random bytes with finite f16 scales, then the extremes (every 6-bit
// quant 63 or 0 against scales of -128 / 127 and activations at +-127, the
// largest int16 pair sums and int32 lane sums the kernels form). The unpack
// gives the bytes back; decode (1 .. packed_max_act rows) and the in-place
// batches give the plain entry's bits on every ISA, on two threads' slices
// with the partial last group.
TEST(KGroups, EveryBitPatternGivesThePlainBits) {
  std::mt19937 rng(31);
  int checked = 0;
  for (DType t : {DType::Q4_K, DType::Q6_K})
    for (int pattern = 0; pattern < 3; ++pattern)
      for (int64_t k : {256, 768})
        for (int64_t rows : {8, 19}) {
          const uint64_t bb = t == DType::Q4_K ? 144 : 210, rb = row_bytes(t, k);
          std::vector<uint8_t> plain(rb * uint64_t(rows));
          for (size_t i = 0; i < plain.size(); ++i) {
            const size_t o = i % bb;  // offset in the super-block
            const bool scale = t == DType::Q4_K ? (o >= 4 && o < 16) : (o >= 192 && o < 208);
            if (pattern == 0) plain[i] = uint8_t(rng());
            else if (scale && t == DType::Q6_K) plain[i] = o % 2 ? 0x80 : 0x7F;  // int8 -128 / 127
            else plain[i] = pattern == 1 ? 0xFF : 0x00;
          }
          for (uint64_t b = 0; b < plain.size(); b += bb) {  // finite f16 d (and dmin): 2^-10 .. 2^-9
            const uint16_t d = uint16_t(0x1400 | (rng() & 0x3FF)), dmin = uint16_t(0x1400 | (rng() & 0x3FF));
            std::memcpy(&plain[b + (t == DType::Q4_K ? 0 : 208)], &d, 2);
            if (t == DType::Q4_K) std::memcpy(&plain[b + 2], &dmin, 2);
          }
          std::vector<float> x(size_t(9 * k));
          std::uniform_real_distribution<float> val(-4.0f, 4.0f);
          for (size_t i = 0; i < x.size(); ++i) x[i] = pattern == 0 ? val(rng) : (i / 16 % 2 ? -3.0f : 3.0f);
          for (uint8_t layout : {kLayoutKGroups8, kLayoutKGroups8Pairs, kLayoutQ6KGroups8Pairs, kLayoutQ4KGroups8Wide,
                                 kLayoutQ6KGroups8Wide}) {
            if (!layout_supports(layout, t)) continue;
            auto packed = plain;
            repack_matrix(layout, t, packed.data(), k, rows);
            std::vector<uint8_t> back(plain.size());
            unpack_rows(layout, t, packed.data(), k, rows, 0, rows, back.data());
            EXPECT_EQ(0, std::memcmp(back.data(), plain.data(), plain.size()))
                << layout_name(layout) << " " << dtype_name(t) << " pattern " << pattern;
            for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
              const MatmulKernels* kern = matmul_kernels(t, isa);
              if (!kern || kern->packed_layout != layout) continue;
              for (int64_t n_act = 1; n_act <= 9; ++n_act)
                for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama}) {
                  const bool batch = n_act > kern->packed_max_act;
                  if (batch && (!kern->gemm_packed_batch || (n_act != 5 && n_act != 9))) continue;
                  if (order != BatchOrder::by_type && (t != DType::Q4_K || batch)) continue;
                  set_batch_order(order);
                  const auto act = test::convert_acts(*kern, x.data(), n_act, k);
                  test::GemmCall call;
                  call.fill = -1.0f;
                  const auto want = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
                  std::vector<float> got(want.size(), -1.0f);
                  std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
                  for (auto [b, e] : {std::pair{int64_t(0), int64_t(8)}, std::pair{int64_t(8), rows}}) {
                    if (b >= e) continue;
                    const GemmArgs g = packed_args(*kern, layout, packed.data(), rb, k, rows, b, e, act, n_act,
                                                   got.data(), scratch.data());
                    if (batch) EXPECT_TRUE(kern->gemm_packed_batch(g));
                    else kern->gemm_packed(g);
                  }
                  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                      << isa_name(isa) << " " << dtype_name(t) << " pattern " << pattern << " k " << k << " rows "
                      << rows << " n_act " << n_act << " order " << int(order) << ": " << got[0] << " vs " << want[0];
                  for (float v : got) ASSERT_TRUE(std::isfinite(v)) << "the scales were meant to keep it finite";
                  ++checked;
                  set_batch_order(BatchOrder::by_type);
                }
            }
          }
        }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the K-quant row-group kernels were not run";
  }
#endif
}

// Prompt batches on the row groups read in place (MatmulKernels::gemm_packed_batch,
// AVX2 Q8_0 in llama.cpp's order and Q4_0): the scalar reference's bits (the
// plain GGUF layout through the reference gemm) on slices that start on groups,
// with partial last groups and odd rows (row counts that leave every 4-row
// tile remainder), batches that leave an odd activation row and cross the
// 64-row activation chunk. Under the Q8_0 lanes order the entry declines
// (false) and writes nothing: ops/matmul.cpp then unpacks.
TEST(RowGroups, PackedPromptBatchesAreTheReferenceBitsOnEveryIsa) {
  std::mt19937 rng(23);
  int checked = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false))
    for (DType t : {DType::Q8_0, DType::Q4_0}) {
      const MatmulKernels* kern = matmul_kernels(t, isa);
      const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
      if (!kern || kern->packed_layout == kLayoutPlain || !kern->gemm_packed_batch) {
        std::printf("[ REPACK   ] %s %s: prompts on the layout are unpacked\n", isa_name(isa), dtype_name(t));
        continue;
      }
      for (BatchOrder order : {BatchOrder::llama, BatchOrder::lanes}) {
        set_batch_order(order);
        for (int64_t k : {32, 96, 4352})
          for (int64_t rows : {8, 13, 37, 64, 71}) {
            const auto plain = test::random_weights(t, rows, k, rng);
            auto packed = plain;
            repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
            for (int64_t n_act : {kern->packed_max_act + 1, int64_t(18), int64_t(33), int64_t(67)}) {
              // Q8_0 in the lanes order: declined above 16 rows (unpacked for the lanes kernel); up to 16 in
              // llama.cpp's order.
              const bool declines = t == DType::Q8_0 && order == BatchOrder::lanes && n_act > 16;
              std::normal_distribution<float> val(0.0f, 2.0f);
              std::vector<float> x(size_t(n_act * k));
              for (auto& v : x) v = val(rng);
              test::GemmCall call;
              call.fill = -1.0f;
              const auto want =
                  test::run_gemm(*ref, plain, t, rows, k, test::convert_acts(*ref, x.data(), n_act, k), n_act, call);
              const auto act = test::convert_acts(*kern, x.data(), n_act, k);
              std::vector<float> got(want.size(), -1.0f);
              std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
              const int64_t a = rows / 3 / 8 * 8, b = rows / 2 / 8 * 8;  // three threads' slices on groups
              for (auto [r0, r1] : {std::pair{int64_t(0), a}, std::pair{a, b}, std::pair{b, rows}}) {
                if (r0 >= r1) continue;
                const GemmArgs g = packed_args(*kern, kern->packed_layout, packed.data(), row_bytes(t, k), k, rows, r0,
                                               r1, act, n_act, got.data(), scratch.data());
                EXPECT_EQ(!declines, kern->gemm_packed_batch(g)) << isa_name(isa) << " " << dtype_name(t);
              }
              if (declines) {
                for (float v : got) ASSERT_EQ(-1.0f, v) << "declined, yet wrote the output";
                continue;
              }
              EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << " n_act " << n_act;
              ++checked;
            }
            GemmArgs bad;  // a slice must start on a group
            bad.w = packed.data();
            bad.w_row_bytes = row_bytes(t, k);
            bad.k = k;
            bad.row_begin = 3;
            bad.row_end = rows;
            bad.n_rows = rows;
            bad.n_act = 40;
            bad.layout = kern->packed_layout;
            std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
            bad.scratch = scratch.data();
            if (!(t == DType::Q8_0 && order == BatchOrder::lanes)) {  // 40 rows: declined in the Q8_0 lanes order
              EXPECT_THROW(kern->gemm_packed_batch(bad), Error);
            }
          }
      }
      set_batch_order(BatchOrder::by_type);
    }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the row-group prompt kernels were not run";
  }
#endif
}

// Q5_0 prompt batches on kLayoutQ5Groups8 in place (stop 40, gemm_packed_batch on avx2, avx2-vnni and avx512): in
// the lanes order (auto's for Q5_0) the rows-in-lanes kernel reads whole groups through q5_0_groups_to_lanes and
// the rows past the last group plain, over three threads' slices: the plain layout's bits (the same entry unpacked); in
// llama.cpp's order it declines and writes nothing (MUL_MAT unpacks); a slice off a group boundary is an error.
TEST(RowGroups, Q5PromptBatchesOnTheGroupsAreThePlainBits) {
  std::mt19937 rng(43);
  int checked = 0, checked_avx512 = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
    const MatmulKernels* kern = matmul_kernels(DType::Q5_0, isa);
    if (!kern || kern->packed_layout != kLayoutQ5Groups8 || !kern->gemm_packed_batch) continue;
    for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama}) {
      set_batch_order(order);
      for (int64_t k : {32, 96, 4352})
        for (int64_t rows : {8, 13, 37, 64, 71}) {
          const auto plain = test::random_weights(DType::Q5_0, rows, k, rng);
          auto packed = plain;
          repack_matrix(kLayoutQ5Groups8, DType::Q5_0, packed.data(), k, rows);
          for (int64_t n_act : {int64_t(17), int64_t(33), int64_t(67)}) {
            std::normal_distribution<float> val(0.0f, 2.0f);
            std::vector<float> x(size_t(n_act * k));
            for (auto& v : x) v = val(rng);
            const auto act = test::convert_acts(*kern, x.data(), n_act, k);
            test::GemmCall call;
            call.fill = -1.0f;
            const auto want = test::run_gemm(*kern, plain, DType::Q5_0, rows, k, act, n_act, call);
            std::vector<float> got(want.size(), -1.0f);
            std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
            const bool takes = lanes_order(DType::Q5_0);
            const int64_t a = rows / 3 / 8 * 8, b = rows / 2 / 8 * 8;
            for (auto [r0, r1] : {std::pair{int64_t(0), a}, std::pair{a, b}, std::pair{b, rows}}) {
              if (r0 >= r1) continue;
              const GemmArgs g = packed_args(*kern, kLayoutQ5Groups8, packed.data(), row_bytes(DType::Q5_0, k), k, rows,
                                             r0, r1, act, n_act, got.data(), scratch.data());
              EXPECT_EQ(takes, kern->gemm_packed_batch(g)) << isa_name(isa);
            }
            if (!takes) {
              for (float v : got) ASSERT_EQ(-1.0f, v) << "declined, yet wrote the output";
              continue;
            }
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " k " << k << " rows " << rows << " n_act " << n_act;
            ++checked;
            if (isa == Isa::avx512) ++checked_avx512;
          }
          if (lanes_order(DType::Q5_0) && rows > 8) {
            std::vector<float> x(size_t(40 * k), 1.0f), out(size_t(40 * rows));
            const auto act = test::convert_acts(*kern, x.data(), 40, k);
            std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
            const GemmArgs bad = packed_args(*kern, kLayoutQ5Groups8, packed.data(), row_bytes(DType::Q5_0, k), k, rows,
                                             3, rows, act, 40, out.data(), scratch.data());
            EXPECT_THROW(kern->gemm_packed_batch(bad), Error);
          }
        }
    }
    set_batch_order(BatchOrder::by_type);
  }
  expect_ran(checked, checked_avx512, "the Q5_0 prompt batches on the groups");
}

// Which batches the group kernels take (packed_reads, stop 17): up to packed_max_act always; up to
// packed_mid_act only where their order is the batch path's (Q4_0 always; Q8_0 / Q5_0 not in the lanes order).
TEST(RowGroups, MidBatchesTakeTheGroupsOnlyWhereTheOrderAllows) {
  MatmulKernels k;
  k.gemm_packed = [](const GemmArgs&) {};
  k.packed_max_act = 16;
  k.packed_mid_act = 64;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0})
    for (BatchOrder order : {BatchOrder::by_type, BatchOrder::llama, BatchOrder::lanes}) {
      set_batch_order(order);
      k.weight_type = t;
      const bool mid = t == DType::Q4_0 || !lanes_order(t);
      EXPECT_FALSE(packed_reads(k, 0));
      EXPECT_TRUE(packed_reads(k, 1));
      EXPECT_TRUE(packed_reads(k, 16));
      EXPECT_EQ(mid, packed_reads(k, 17)) << dtype_name(t);
      EXPECT_EQ(mid, packed_reads(k, 64)) << dtype_name(t);
      EXPECT_FALSE(packed_reads(k, 65));
    }
  set_batch_order(BatchOrder::by_type);
  EXPECT_FALSE(lanes_order(DType::Q8_0));  // the default: Q8_0 in llama.cpp's order, Q5_0 in the lanes
  EXPECT_TRUE(lanes_order(DType::Q5_0));
  k.gemm_packed = nullptr;
  EXPECT_FALSE(packed_reads(k, 1));
}

}  // namespace
// The Q4_0 decode kernels' int16 sums at their bounds (stop 26: AVX2 adds a row's
// 16 products of a block in int16 before one vpmaddwd, at most 4 * 7680 in
// magnitude; AVX-512 starts each row's lane at -8 * sum(x)): every nibble 15 or
// 0, or alternating, against activations that quantize to +127 / -127 (and mixed
// signs), on the row groups and the plain layout, decode and small batches,
// against the scalar reference (llama.cpp's repacked order) bit for bit.
TEST(RowGroups, Q4_0SumsAtTheirBoundsAreTheReferenceBits) {
  std::mt19937 rng(29);
  const DType t = DType::Q4_0;
  const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
  int checked = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
    const MatmulKernels* kern = matmul_kernels(t, isa);
    if (!kern || kern->packed_layout == kLayoutPlain) continue;
    for (int64_t k : {32, 256, 8192}) {
      const int64_t rows = 24;
      const uint64_t rb = row_bytes(t, k);
      for (uint8_t nibbles : {uint8_t(0xFF), uint8_t(0x00), uint8_t(0x0F), uint8_t(0xF0)}) {
        std::vector<uint8_t> plain(rb * uint64_t(rows));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t b = 0; b < k / 32; ++b) {
            uint8_t* blk = plain.data() + uint64_t(r) * rb + uint64_t(b) * 18;  // d f16 | qs[16]
            const uint16_t d = f32_to_f16(0.25f + 0.125f * float((r + b) % 5));
            std::memcpy(blk, &d, 2);
            std::memset(blk + 2, r % 3 == 2 ? uint8_t(rng()) : nibbles, 16);  // every third row random
          }
        auto packed = plain;
        repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
        for (int sign : {1, -1, 0}) {  // 0: alternating signs per block
          for (int64_t n_act : {int64_t(1), int64_t(2), int64_t(5)}) {
            std::vector<float> x(size_t(n_act * k));
            for (size_t i = 0; i < x.size(); ++i)
              x[i] = float(sign != 0 ? sign : (i / 32) % 2 == 0 ? 1 : -1) * (1.0f + 0.5f * float(i / 32 % 3));
            test::GemmCall call;
            call.fill = -1.0f;
            const auto want =
                test::run_gemm(*ref, plain, t, rows, k, test::convert_acts(*ref, x.data(), n_act, k), n_act, call);
            const auto act = test::convert_acts(*kern, x.data(), n_act, k);
            const auto plain_got = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
            EXPECT_EQ(0, std::memcmp(want.data(), plain_got.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " plain k " << k << " nibbles " << int(nibbles) << " sign " << sign << " n_act "
                << n_act;
            std::vector<float> got(want.size(), -1.0f);
            std::vector<float> scratch(size_t(kern->scratch_floats(k) + 1));
            for (auto [b, e] : {std::pair{int64_t(0), int64_t(8)}, std::pair{int64_t(8), rows}}) {
              const GemmArgs g = packed_args(*kern, kern->packed_layout, packed.data(), rb, k, rows, b, e, act, n_act,
                                             got.data(), scratch.data());
              kern->gemm_packed(g);
            }
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " groups k " << k << " nibbles " << int(nibbles) << " sign " << sign << " n_act "
                << n_act;
            ++checked;
          }
        }
      }
    }
  }
#if defined(__x86_64__)
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: the Q4_0 row-group kernels were not run";
  }
#endif
}

}  // namespace opal::cpu
