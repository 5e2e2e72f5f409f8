// test_et_matmul.cpp - MUL_MAT kernels (F32, F16, Q8_0, Q4_0, Q4_K weights x f32 activations) on
// sys_emu against the CPU reference (backends/cpu/kernels: the activations rounded through the
// type's vec_dot type by round_activations, then reference_dot), random data, shapes with
// M = 1, 3 and >= 32 activation rows, K up to 8192, batch broadcast.
//
// Tolerance: both sides accumulate in fp32 in different orders (device: 8 lanes over K/8 steps
// and a pairwise lane sum; CPU: llama.cpp's orders), so each may be off by the usual bound
// (K/8 + 16) * 2^-24 * sum_k |w_k x_k|; twice that is allowed. The quantized types also
// quantize x on the device with et_math.h's division (1 ulp): a quant that lands on a
// rounding tie may differ by one step, allowed once per row as max|w| * max(d_x).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

struct MmCase {
  DType type;
  uint32_t kernel;
  int64_t K, N, T, wb = 1, xb = 1;  // weight batches, activation batches (a multiple)
  uint32_t minions = 0x3;
  bool tensor = false;  // a tensor-unit kernel: the launch gets the L1 scratchpad
  bool card = false;    // on the emulator set up as a card (the kernel entry turns the scratchpad on)
};

void check_mul_mat(const MmCase& c) {
  std::mt19937 rng(uint32_t(c.K * 7 + c.N * 3 + c.T));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(size_t(c.K * c.N * c.wb)), xf(size_t(c.K * c.T * c.xb));
  for (auto& v : wf) v = nd(rng) * 0.5f;
  for (auto& v : xf) v = nd(rng);
  const uint64_t wrow = row_bytes(c.type, c.K);
  std::vector<uint8_t> wq(wrow * uint64_t(c.N * c.wb));
  quantize_rows(c.type, wf.data(), wq.data(), c.N * c.wb, c.K);
  std::vector<float> wd(wf.size());  // what the weights are after quantization
  for (int64_t r = 0; r < c.N * c.wb; ++r)
    dequantize_row(c.type, wq.data() + uint64_t(r) * wrow, wd.data() + r * c.K, c.K);

  EtDevice dev;
  dev.card = c.card;
  dev.minion_mask = c.minions;
  dev.scratchpad = c.tensor;
  EtMulMatArgs a{};
  a.h = dev.header(c.kernel, sizeof(a));
  a.w = et_tensor(dev.upload(wq), uint32_t(c.type), c.K, c.N, c.wb);
  a.x = et_tensor(dev.upload(xf), ET_TYPE_F32, c.K, c.T, c.xb);
  a.dst = et_tensor(dev.alloc(uint64_t(c.N * c.T * c.xb) * 4), ET_TYPE_F32, c.N, c.T, c.xb);
  EtRunResult r = dev.run("matmul", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("%s%s K=%lld N=%lld T=%lld: %llu cycles, %llu instructions on %u harts\n", dtype_name(c.type),
              c.tensor ? " (tensor unit)" : "", (long long)c.K, (long long)c.N, (long long)c.T,
              (unsigned long long)r.cycles, (unsigned long long)r.launch.hart_cycles, dev.harts());
  auto out = dev.download<float>(a.dst.addr, size_t(c.N * c.T * c.xb));

  const DType act = cpu::activation_type_for(c.type);
  std::vector<float> xr(size_t(c.K));
  const double u = std::ldexp(1.0, -24);
  for (int64_t b = 0; b < c.xb; ++b)
    for (int64_t t = 0; t < c.T; ++t) {
      const float* x = xf.data() + (b * c.T + t) * c.K;
      cpu::round_activations(act, x, xr.data(), c.K);
      float dmax = 0;
      for (int64_t i = 0; i < c.K; ++i) dmax = std::max(dmax, std::fabs(x[i]) / 127.0f);
      for (int64_t n = 0; n < c.N; ++n) {
        const float* w = wd.data() + ((b / (c.xb / c.wb)) * c.N + n) * c.K;
        const float want = cpu::reference_dot(c.type, w, xr.data(), c.K, c.T >= 2);
        double mag = 0, wmax = 0;
        for (int64_t i = 0; i < c.K; ++i) {
          mag += std::fabs(double(w[i]) * xr[size_t(i)]);
          wmax = std::max(wmax, std::fabs(double(w[i])));
        }
        double tol = 2.0 * double(c.K / 8 + 16) * u * mag;
        // the fp16 TensorFMA rounds toward zero at each of its K/2 pair steps (at most 1 ulp of
        // the partial sum each), plus one round-to-nearest add per K chunk
        if (c.kernel == ET_K_MUL_MAT_TU_F16) tol += double(c.K / 2 + c.K / 1024 + 1) * 2.0 * u * mag;
        if (act != DType::F32 && act != DType::F16) tol += wmax * dmax * 1.01;
        const float got = out[size_t((b * c.T + t) * c.N + n)];
        ASSERT_LE(std::fabs(double(got) - want), tol)
            << dtype_name(c.type) << " n " << n << " t " << t << " b " << b << ": device " << got << " cpu " << want;
      }
    }
}

TEST(EtMulMat, F32SmallBatchedBroadcast) { check_mul_mat({DType::F32, ET_K_MUL_MAT_F32, 64, 32, 3, 2, 4}); }
TEST(EtMulMat, F32ManyRows) { check_mul_mat({DType::F32, ET_K_MUL_MAT_F32, 256, 32, 33}); }
TEST(EtMulMat, F16) { check_mul_mat({DType::F16, ET_K_MUL_MAT_F16, 512, 48, 2}); }
TEST(EtMulMat, Q8_0LongK) { check_mul_mat({DType::Q8_0, ET_K_MUL_MAT_Q8_0, 8192, 32, 1}); }
TEST(EtMulMat, Q8_0ManyRows) { check_mul_mat({DType::Q8_0, ET_K_MUL_MAT_Q8_0, 256, 32, 33}); }
TEST(EtMulMat, Q4_0) { check_mul_mat({DType::Q4_0, ET_K_MUL_MAT_Q4_0, 1024, 64, 3, 1, 1, 0xF}); }
TEST(EtMulMat, Q4_K) { check_mul_mat({DType::Q4_K, ET_K_MUL_MAT_Q4_K, 1024, 32, 2}); }
TEST(EtMulMat, Q6_K) { check_mul_mat({DType::Q6_K, ET_K_MUL_MAT_Q6_K, 512, 32, 3}); }
// N not a multiple of 16 with several rows (a MoE router: N = the expert count): the harts split
// the output rows in groups that fill whole lines (matmul.c, mul_mat_rows); the coherence
// checker fails the launch if two minions wrote one line.
TEST(EtMulMat, F32RouterShapeRowSplit) { check_mul_mat({DType::F32, ET_K_MUL_MAT_F32, 256, 8, 33, 1, 1, 0xF}); }
TEST(EtMulMat, Q8_0OddNRowSplitBatched) { check_mul_mat({DType::Q8_0, ET_K_MUL_MAT_Q8_0, 64, 24, 5, 1, 2, 0xF}); }
TEST(EtMulMat, Q6_KOddNRowSplit) { check_mul_mat({DType::Q6_K, ET_K_MUL_MAT_Q6_K, 256, 4, 9, 1, 1, 0x3}); }
TEST(EtMulMat, Q4_KManyRowsLongK) { check_mul_mat({DType::Q4_K, ET_K_MUL_MAT_Q4_K, 2048, 32, 32, 1, 1, 0x1}); }

// Through the tensor unit (int8 TensorFMA, matmul.c mul_mat_tensor): the same reference and
// tolerance (the int32 block dots are exact; only the fp32 order of the scaled block sums
// differs, inside the K/8 + 16 rounding bound); 16-row activation chunks with a partial last one
// (33 = 16 + 16 + 1), two K chunks (K = 4096: the second adds into dst), batch broadcast.
TEST(EtMulMatTensor, Q8_0ManyRows) { check_mul_mat({DType::Q8_0, ET_K_MUL_MAT_TU_Q8_0, 256, 32, 33, 1, 1, 0x3, true}); }
TEST(EtMulMatTensor, Q4_0Batched) { check_mul_mat({DType::Q4_0, ET_K_MUL_MAT_TU_Q4_0, 320, 64, 20, 2, 4, 0xF, true}); }
TEST(EtMulMatTensor, Q8_0TwoKChunksOddBlocks) {
  check_mul_mat({DType::Q8_0, ET_K_MUL_MAT_TU_Q8_0, 4096 + 96, 16, 17, 1, 1, 0x1, true});
}
// F16 weights through the fp16 TensorFMA (mul_mat_tensor_f16): x rounded to f16 as the CPU
// rounds it, the weight rows loaded straight into the scratchpad; a partial activation chunk, two
// K chunks (K = 1024 + 64: the second adds into dst) and batch broadcast.
TEST(EtMulMatTensor, F16ManyRows) { check_mul_mat({DType::F16, ET_K_MUL_MAT_TU_F16, 256, 32, 33, 1, 1, 0x3, true}); }
TEST(EtMulMatTensor, F16OnACardSetUp) {
  check_mul_mat({DType::F16, ET_K_MUL_MAT_TU_F16, 256, 32, 20, 1, 1, 0x3, true, true});
}
TEST(EtMulMatTensor, F16TwoKChunksBatched) {
  check_mul_mat({DType::F16, ET_K_MUL_MAT_TU_F16, 1024 + 64, 32, 17, 2, 4, 0xF, true});
}
// The same prompt-shaped product through the SIMD kernel and the tensor unit: the emulated
// instructions (every hart's kernel cycles summed) are printed; the tensor unit needs under a third.
TEST(EtMulMatTensor, FewerInstructionsThanSimdForAPrompt) {
  uint64_t insns[2] = {0, 0};
  for (int tu = 0; tu < 2; ++tu) {
    const int64_t K = 576, N = 64, T = 32;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> wf(size_t(K * N)), xf(size_t(K * T));
    for (auto& v : wf) v = nd(rng);
    for (auto& v : xf) v = nd(rng);
    std::vector<uint8_t> wq(row_bytes(DType::Q8_0, K) * uint64_t(N));
    quantize_rows(DType::Q8_0, wf.data(), wq.data(), N, K);
    EtDevice dev;
    dev.minion_mask = 0xF;
    dev.scratchpad = tu == 1;
    EtMulMatArgs a{};
    a.h = dev.header(tu ? ET_K_MUL_MAT_TU_Q8_0 : ET_K_MUL_MAT_Q8_0, sizeof(a));
    a.w = et_tensor(dev.upload(wq), ET_TYPE_Q8_0, K, N);
    a.x = et_tensor(dev.upload(xf), ET_TYPE_F32, K, T);
    a.dst = et_tensor(dev.alloc(uint64_t(N * T) * 4), ET_TYPE_F32, N, T);
    EtRunResult r = dev.run("matmul", a);
    ASSERT_TRUE(r.passed) << r.log;
    insns[tu] = r.launch.hart_cycles;
  }
  std::printf("Q8_0 K=576 N=64 T=32 on 4 minions: SIMD %llu instructions, tensor unit %llu (%.1fx fewer)\n",
              (unsigned long long)insns[0], (unsigned long long)insns[1], double(insns[0]) / double(insns[1]));
  EXPECT_LT(insns[1] * 3, insns[0]);
}

}  // namespace
}  // namespace opal::et_test

namespace opal::et_test {
namespace {

// MUL_MAT_ID (mixture of experts): each (slot, token) row against the CPU reference dot
// (reference_dot with expert ids[j, t] and x row (j % S, t), what compute_mul_mat_id computes
// per row), so the same tolerance as MUL_MAT (fp32 order, one quant step of x); an expert id
// out of range gives zeros (as the CPU op).
void check_mul_mat_id(DType type, uint32_t kernel, int64_t K, int64_t S, int64_t N = 32) {
  const int64_t E = 4, n_used = 2, T = 3;
  std::mt19937 rng(uint32_t(K + S));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(size_t(K * N * E)), xf(size_t(K * S * T));
  for (auto& v : wf) v = nd(rng) * 0.5f;
  for (auto& v : xf) v = nd(rng);
  const uint64_t wrow = row_bytes(type, K);
  std::vector<uint8_t> wq(wrow * uint64_t(N * E));
  quantize_rows(type, wf.data(), wq.data(), N * E, K);
  std::vector<int32_t> ids = {2, 0, 3, 3, 1, 9};  // [n_used, T]; 9: out of range
  EtDevice dev;
  dev.minion_mask = 0x3;
  EtMulMatIdArgs a{};
  a.h = dev.header(kernel, sizeof(a));
  a.w = et_tensor(dev.upload(wq), uint32_t(type), K, N, E);
  a.x = et_tensor(dev.upload(xf), ET_TYPE_F32, K, S, T);
  a.ids = et_tensor(dev.upload(ids), ET_TYPE_I32, n_used, T);
  a.dst = et_tensor(dev.alloc(uint64_t(N * n_used * T) * 4), ET_TYPE_F32, N, n_used, T);
  EtRunResult r = dev.run("matmul", a);
  ASSERT_TRUE(r.passed) << r.log;
  auto out = dev.download<float>(a.dst.addr, size_t(N * n_used * T));

  std::vector<float> wd(size_t(K * N * E));
  for (int64_t i = 0; i < N * E; ++i) dequantize_row(type, wq.data() + uint64_t(i) * wrow, wd.data() + i * K, K);
  const DType act = cpu::activation_type_for(type);
  std::vector<float> xr(static_cast<size_t>(K));
  const double u = std::ldexp(1.0, -24);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n_used; ++j) {
      const int32_t e = ids[size_t(t * n_used + j)];
      const float* x = xf.data() + (t * S + j % S) * K;
      cpu::round_activations(act, x, xr.data(), K);
      float dmax = 0;
      for (int64_t i = 0; i < K; ++i) dmax = std::max(dmax, std::fabs(x[i]) / 127.0f);
      for (int64_t n = 0; n < N; ++n) {
        const float got = out[size_t((t * n_used + j) * N + n)];
        if (e < 0 || e >= E) {
          ASSERT_EQ(got, 0.0f);
          continue;
        }
        const float* w = wd.data() + (e * N + n) * K;
        const float want = cpu::reference_dot(type, w, xr.data(), K, false);
        double mag = 0, wmax = 0;
        for (int64_t i = 0; i < K; ++i) {
          mag += std::fabs(double(w[i]) * xr[size_t(i)]);
          wmax = std::max(wmax, std::fabs(double(w[i])));
        }
        double tol = 2.0 * double(K / 8 + 16) * u * mag;
        if (act != DType::F32 && act != DType::F16) tol += wmax * dmax * 1.01;
        ASSERT_LE(std::fabs(double(got) - want), tol) << "j " << j << " t " << t << " n " << n;
      }
    }
}

TEST(EtMulMatId, Q8_0SharedActivation) { check_mul_mat_id(DType::Q8_0, ET_K_MUL_MAT_ID_Q8_0, 256, 1); }
TEST(EtMulMatId, Q4_KPerSlotActivations) { check_mul_mat_id(DType::Q4_K, ET_K_MUL_MAT_ID_Q4_K, 256, 2); }
TEST(EtMulMatId, Q6_K) { check_mul_mat_id(DType::Q6_K, ET_K_MUL_MAT_ID_Q6_K, 256, 1); }
TEST(EtMulMatId, F32) { check_mul_mat_id(DType::F32, ET_K_MUL_MAT_ID_F32, 64, 2); }
// N = 8: the (slot, token) pairs split in line-filling groups instead of N.
TEST(EtMulMatId, Q8_0OddNPairSplit) { check_mul_mat_id(DType::Q8_0, ET_K_MUL_MAT_ID_Q8_0, 64, 1, 8); }

}  // namespace
}  // namespace opal::et_test
