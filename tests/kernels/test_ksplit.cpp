// The k-split of long rows in the row-group decode kernels (stop 30,
// kernels/ksplit.h): a decode whose groups are read a part of k at a time
// (each part of a run of groups, then the next part, the accumulators
// continued) gives exactly the unsplit bits, and the plain layout's, for long
// and odd k (row blocks not a multiple of the parts), partial last groups and
// runs, and the slices of 1-3 threads; under every ISA the host runs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/ksplit.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "core/quant.h"
#include "support/isa_coverage.h"
#include "support/kernel_call.h"

namespace opal::cpu {
namespace {

// Restores the default budget however the test leaves.
struct BudgetGuard {
  ~BudgetGuard() { set_ksplit_budget(0); }
};

// rows x k packed weights against n_act activation rows, the groups cut into
// threads slices on group boundaries (the last one with the partial group).
std::vector<float> packed_decode(const MatmulKernels& kern, const std::vector<uint8_t>& packed, DType t, int64_t rows,
                                 int64_t k, const std::vector<uint8_t>& act, int64_t n_act, int threads) {
  std::vector<float> out(size_t(rows * n_act), -1.0f);
  std::vector<float> scratch(size_t(kern.scratch_floats(k) + 1));
  const int64_t groups = rows / 8;
  for (int th = 0; th < threads; ++th) {
    const int64_t b = groups * th / threads * 8;
    const int64_t e = th == threads - 1 ? rows : groups * (th + 1) / threads * 8;
    if (b >= e) continue;
    GemmArgs g;
    g.w = packed.data();
    g.w_row_bytes = row_bytes(t, k);
    g.k = k;
    g.row_begin = b;
    g.row_end = e;
    g.act = act.data();
    g.act_row_bytes = kern.act_row_bytes(k);
    g.n_act = n_act;
    g.out = out.data();
    g.out_stride = rows;
    g.scratch = scratch.data();
    g.layout = kern.packed_layout;
    g.n_rows = rows;
    kern.gemm_packed(g);
  }
  return out;
}

TEST(KSplit, PartsFollowTheBudget) {
  BudgetGuard guard;
  set_ksplit_budget(40 * 1024);
  // Llama-3.2-1B's FFN down in Q8_0 (groups of 68 KiB, an 8.5 KiB activation row): 2 parts; its FFN up (k = 2048)
  // and Qwen3-0.6B's FFN down (k = 3072), whole.
  EXPECT_EQ(2, ksplit_parts(8 * 8704, 8704, 256));
  EXPECT_EQ(1, ksplit_parts(8 * 2176, 2176, 64));
  EXPECT_EQ(1, ksplit_parts(8 * 3264, 3264, 96));
  EXPECT_EQ(3, ksplit_parts(80 * 1024 + 1, 0, 256));
  EXPECT_EQ(4, ksplit_parts(1 << 20, 0, 4));  // never more parts than blocks
  set_ksplit_budget(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(1, ksplit_parts(8 * 8704, 8704, 256));
}

// Every budget (unsplit, the default, 2-3 parts, one block a part) gives the unsplit bits, which are the plain
// layout's; k = 8192 (Llama-3.2-1B's FFN down) and odd block counts (257, 37: parts of unequal length).
TEST(KSplit, SplitDecodeIsTheUnsplitBitsOnEveryIsa) {
  BudgetGuard guard;
  std::mt19937 rng(30);
  int checked = 0;
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false))
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
      const MatmulKernels* kern = matmul_kernels(t, isa);
      if (!kern || kern->packed_layout == kLayoutPlain) continue;
      const bool kq = t == DType::Q4_K || t == DType::Q6_K;
      for (int64_t k : kq ? std::vector<int64_t>{8192, 256 * 13} : std::vector<int64_t>{8192, 32 * 257, 32 * 37})
        // 149 rows: 18 whole groups (two runs of 8 and one of 2 at one thread) and 5 plain rows.
        for (int64_t rows : {8, 149}) {
          const auto plain = test::random_weights(t, rows, k, rng);
          auto packed = plain;
          repack_matrix(kern->packed_layout, t, packed.data(), k, rows);
          for (int64_t n_act : {1, 2}) {
            std::normal_distribution<float> val(0.0f, 2.0f);
            std::vector<float> x(size_t(n_act * k));
            for (auto& v : x) v = val(rng);
            const auto act = test::convert_acts(*kern, x.data(), n_act, k);
            test::GemmCall call;
            call.fill = -1.0f;
            const auto want = test::run_gemm(*kern, plain, t, rows, k, act, n_act, call);
            set_ksplit_budget(std::numeric_limits<int64_t>::max());
            const auto whole = packed_decode(*kern, packed, t, rows, k, act, n_act, 1);
            ASSERT_EQ(0, std::memcmp(want.data(), whole.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << ": unsplit vs plain";
            const int64_t group_bytes = 8 * int64_t(row_bytes(t, k));
            for (int64_t budget : {int64_t(0), group_bytes / 2, group_bytes / 3, int64_t(1)})
              for (int threads = 1; threads <= 3; ++threads) {
                set_ksplit_budget(budget);
                const auto got = packed_decode(*kern, packed, t, rows, k, act, n_act, threads);
                EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), got.size() * sizeof(float)))
                    << isa_name(isa) << " " << dtype_name(t) << " k " << k << " rows " << rows << " n_act " << n_act
                    << " budget " << budget << " threads " << threads << ": " << got[0] << " vs " << whole[0];
                ++checked;
              }
          }
        }
    }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace opal::cpu
