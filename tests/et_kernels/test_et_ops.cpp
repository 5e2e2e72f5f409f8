// test_et_ops.cpp - RMS_NORM, SILU, SWIGLU, GET_ROWS, KV_STORE, ROPE and ATTENTION kernels on
// sys_emu against the CPU backend's own op implementations (backends/cpu/ops, run here on a
// hand-built node with the same data), random data. Tolerances, per op, in the tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/graph.h"
#include "graph/rope.h"
#include "graph/thread_pool.h"
#include "support/attention_node.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

// A host tensor for the CPU reference: contiguous, data owned by the caller.
Tensor host_tensor(DType t, void* data, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, ne2, ne3};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

void run_cpu(const Tensor& node) {
  ThreadPool pool(1);
  std::vector<uint8_t> work(cpu::work_size(node, pool.size()) + 64);
  uint8_t* aligned = work.data() + (64 - reinterpret_cast<uintptr_t>(work.data()) % 64) % 64;
  ASSERT_TRUE(cpu::supports(node).ok) << cpu::supports(node).reason;
  cpu::compute(node, cpu::OpContext{pool, aligned});
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ---- RMS_NORM: the CPU sums squares in double, the device in 8 fp32 lanes: relative error
// (n/8 + 16) * 2^-24 from the sum (halved by the square root) plus 2 ulp of rsqrt and the
// final product: 2 * (n/8 + 16) * 2^-24 relative.
void check_rms_norm(int64_t n, int64_t rows, uint32_t minions, bool scratch) {
  auto x = randn(size_t(n * rows), 1, 3.0f);
  EtDevice dev;
  dev.minion_mask = minions;
  EtRmsNormArgs a{};
  a.h = dev.header(ET_K_RMS_NORM_F32, sizeof(a));
  if (scratch) {  // zeroed by the allocation: the split-row path (global atomics)
    a.h.scratch_bytes = 64ull * (2 * dev.harts() + 1);
    a.h.scratch = dev.alloc(a.h.scratch_bytes);
  }
  a.src = et_tensor(dev.upload(x), ET_TYPE_F32, n, rows);
  a.dst = et_tensor(dev.alloc(uint64_t(n * rows) * 4), ET_TYPE_F32, n, rows);
  a.eps = 1e-6f;
  EtRunResult r = dev.run("norm", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("rms_norm n=%lld rows=%lld harts=%u%s: %llu cycles\n", (long long)n, (long long)rows, dev.harts(),
              scratch ? " (split rows)" : "", (unsigned long long)r.cycles);
  auto out = dev.download<float>(a.dst.addr, size_t(n * rows));
  std::vector<float> want(x.size());
  Tensor src = host_tensor(DType::F32, x.data(), n, rows), node = host_tensor(DType::F32, want.data(), n, rows);
  node.op = Op::RmsNorm;
  node.src[0] = &src;
  node.fparams[0] = 1e-6f;
  run_cpu(node);
  const double rel = 2.0 * double(n / 8 + 16) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], rel * std::fabs(want[i]) + 1e-30) << i;
}
TEST(EtOps, RmsNorm) { check_rms_norm(1024, 5, 0x3, false); }
TEST(EtOps, RmsNormRowsSplitOverHartsWithGlobalAtomics) { check_rms_norm(4096, 3, 0xFF, true); }

// ---- SILU / SWIGLU: et_math.h's silu is within 2e-7 relative (test_et_math.cpp), the CPU's
// (llama.cpp's polynomial exp) within a few ulp: 1e-6 relative, plus the product's rounding.
void check_glu(bool gated) {
  const int64_t n = 100, rows = 3;  // 100: 12 packed steps and a scalar tail of 4 per row
  auto a_in = randn(size_t(n * rows), 2, 4.0f), b_in = randn(size_t(n * rows), 3);
  EtDevice dev;
  dev.minion_mask = 0x1;
  std::vector<float> out;
  if (gated) {
    EtSwigluArgs a{};
    a.h = dev.header(ET_K_SWIGLU_F32, sizeof(a));
    a.a = et_tensor(dev.upload(a_in), ET_TYPE_F32, n, rows);
    a.b = et_tensor(dev.upload(b_in), ET_TYPE_F32, n, rows);
    a.dst = et_tensor(dev.alloc(uint64_t(n * rows) * 4), ET_TYPE_F32, n, rows);
    EtRunResult r = dev.run("elementwise", a);
    ASSERT_TRUE(r.passed) << r.log;
    std::printf("swiglu n=%lld rows=%lld: %llu cycles\n", (long long)n, (long long)rows, (unsigned long long)r.cycles);
    out = dev.download<float>(a.dst.addr, size_t(n * rows));
  } else {
    EtUnaryArgs a{};
    a.h = dev.header(ET_K_SILU_F32, sizeof(a));
    a.src = et_tensor(dev.upload(a_in), ET_TYPE_F32, n, rows);
    a.dst = et_tensor(dev.alloc(uint64_t(n * rows) * 4), ET_TYPE_F32, n, rows);
    EtRunResult r = dev.run("elementwise", a);
    ASSERT_TRUE(r.passed) << r.log;
    out = dev.download<float>(a.dst.addr, size_t(n * rows));
  }
  std::vector<float> want(size_t(n * rows));
  Tensor ta = host_tensor(DType::F32, a_in.data(), n, rows), tb = host_tensor(DType::F32, b_in.data(), n, rows);
  Tensor node = host_tensor(DType::F32, want.data(), n, rows);
  node.op = gated ? Op::Swiglu : Op::Silu;
  node.src[0] = &ta;
  if (gated) node.src[1] = &tb;
  run_cpu(node);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << i;
}
TEST(EtOps, Silu) { check_glu(false); }
TEST(EtOps, Swiglu) { check_glu(true); }

// ---- GET_ROWS: dequantization with the same rounded operations as core/quant: bit-equal. An
// id out of range gives zeros on both.
void check_get_rows(DType type, uint32_t kernel, int64_t K, int64_t n = 5) {
  const int64_t R = 6;
  auto tf = randn(size_t(K * R), 4);
  std::vector<uint8_t> table(row_bytes(type, K) * uint64_t(R));
  quantize_rows(type, tf.data(), table.data(), R, K);
  if (type == DType::F16) {  // f16 subnormals and an infinity must convert as on the CPU
    const uint16_t special[4] = {0x0001, 0x83ff, 0x0200, 0x7c00};
    std::memcpy(table.data() + 3 * row_bytes(type, K), special, sizeof special);
  }
  std::vector<int32_t> ids = {3, 0, 5, 7, 3};                         // 7: out of range
  for (int64_t i = 5; i < n; ++i) ids.push_back(int32_t(i * 5 % 7));  // 6: out of range
  ids.resize(size_t(n));
  EtDevice dev;
  dev.minion_mask = 0x3;
  EtGetRowsArgs a{};
  a.h = dev.header(kernel, sizeof(a));
  a.table = et_tensor(dev.upload(table), uint32_t(type), K, R);
  a.ids = et_tensor(dev.upload(ids), ET_TYPE_I32, n);
  a.dst = et_tensor(dev.alloc(uint64_t(K * n) * 4), ET_TYPE_F32, K, n);
  EtRunResult r = dev.run("get_rows", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("get_rows %s K=%lld n=%lld: %llu cycles\n", dtype_name(type), (long long)K, (long long)n,
              (unsigned long long)r.cycles);
  auto out = dev.download<float>(a.dst.addr, size_t(K * n));
  std::vector<float> want(size_t(K * n));
  Tensor tt = host_tensor(type, table.data(), K, R), ti = host_tensor(DType::I32, ids.data(), n);
  Tensor node = host_tensor(DType::F32, want.data(), K, n);
  node.op = Op::GetRows;
  node.src[0] = &tt;
  node.src[1] = &ti;
  run_cpu(node);
  ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * 4), 0) << dtype_name(type);
}
TEST(EtOps, GetRowsF32) { check_get_rows(DType::F32, ET_K_GET_ROWS_F32, 40); }
TEST(EtOps, GetRowsF16) { check_get_rows(DType::F16, ET_K_GET_ROWS_F16, 64); }
// Rows of one weight (the MoE router's probabilities picked per expert: [1, E, T] -> [1, K, T]),
// 37 rows over 4 harts in groups of 16 (a line); and f16 rows with a scalar tail.
TEST(EtOps, GetRowsF32RouterRowsOfOne) { check_get_rows(DType::F32, ET_K_GET_ROWS_F32, 1, 37); }
TEST(EtOps, GetRowsF16OddWidth) { check_get_rows(DType::F16, ET_K_GET_ROWS_F16, 13, 9); }
TEST(EtOps, GetRowsQ8_0) { check_get_rows(DType::Q8_0, ET_K_GET_ROWS_Q8_0, 96); }
TEST(EtOps, GetRowsQ4_0) { check_get_rows(DType::Q4_0, ET_K_GET_ROWS_Q4_0, 64); }
TEST(EtOps, GetRowsQ4_K) { check_get_rows(DType::Q4_K, ET_K_GET_ROWS_Q4_K, 512); }
TEST(EtOps, GetRowsQ6_K) { check_get_rows(DType::Q6_K, ET_K_GET_ROWS_Q6_K, 256); }

// ---- KV_STORE: f32 -> f16 round to nearest even on both (fcvt.f16.ps / core f32_to_f16):
// bit-equal cache contents, cells outside the cache skipped.
void check_kv_store(DType type, uint32_t kernel) {
  const int64_t E = 64, n_cells = 8, T = 3;
  auto x = randn(size_t(E * T), 5, 10.0f);
  x[0] = 70000.0f;  // overflows f16: inf on both
  x[1] = 1e-6f;     // f16 subnormal
  const uint64_t esz = type == DType::F16 ? 2 : 4;
  std::vector<uint8_t> cache(uint64_t(E * n_cells) * esz, 0x11);
  std::vector<int32_t> cells = {6, 1, 9};  // 9: outside, skipped
  EtDevice dev;
  dev.minion_mask = 0x1;
  EtKvStoreArgs a{};
  a.h = dev.header(kernel, sizeof(a));
  a.cache = et_tensor(dev.upload(cache), uint32_t(type), E, n_cells);
  a.src = et_tensor(dev.upload(x), ET_TYPE_F32, E, T);
  a.cells = et_tensor(dev.upload(cells), ET_TYPE_I32, T);
  EtRunResult r = dev.run("kv_store", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("kv_store %s E=%lld T=%lld: %llu cycles\n", dtype_name(type), (long long)E, (long long)T,
              (unsigned long long)r.cycles);
  auto out = dev.download<uint8_t>(a.cache.addr, cache.size());
  Tensor tc = host_tensor(type, cache.data(), E, n_cells), tx = host_tensor(DType::F32, x.data(), E, T);
  Tensor tcell = host_tensor(DType::I32, cells.data(), T);
  Tensor node = tc;
  node.op = Op::KvStore;
  node.src[0] = &tc;
  node.src[1] = &tx;
  node.src[2] = &tcell;
  run_cpu(node);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], cache[i]) << "byte " << i;
}
TEST(EtOps, KvStoreF16) { check_kv_store(DType::F16, ET_K_KV_STORE_F16); }
TEST(EtOps, KvStoreF32) { check_kv_store(DType::F32, ET_K_KV_STORE_F32); }

// ---- ROPE: the angles are the CPU's bit for bit (the same float steps; the division by a
// frequency factor correctly rounded in all but rare cases), sin/cos within 1.2e-7 (et_math.h)
// against the C library's 0.5 ulp: |error| <= 4e-7 * (|x0| + |x1|) per rotated value.
void check_rope(int mode, bool factors, float ext_factor) {
  const int64_t D = 64, H = 3, T = 4;
  const int n_rot = 48;
  auto x = randn(size_t(D * H * T), 6);
  std::vector<int32_t> pos = {0, 7, 300, 4095};
  std::vector<float> ff(size_t(n_rot / 2));
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + float(i % 5) * 0.75f;
  Tensor node;
  node.op = Op::Rope;
  node.iparams = {n_rot, mode, 4, 16};
  node.fparams = {500000.0f, 0.5f, ext_factor, 1.0f};
  const RopeParams rp = rope_params_of(node);

  EtDevice dev;
  dev.minion_mask = 0x3;
  EtRopeArgs a{};
  a.h = dev.header(ET_K_ROPE_F32, sizeof(a));
  a.src = et_tensor(dev.upload(x), ET_TYPE_F32, D, H, T);
  a.pos = et_tensor(dev.upload(pos), ET_TYPE_I32, T);
  if (factors) a.freq_factors = et_tensor(dev.upload(ff), ET_TYPE_F32, n_rot / 2);
  a.dst = et_tensor(dev.alloc(uint64_t(D * H * T) * 4), ET_TYPE_F32, D, H, T);
  a.n_rot = n_rot;
  a.mode = mode;
  a.theta_scale = std::pow(rp.freq_base, -2.0f / float(rp.n_rot));  // as rope_cos_sin computes it
  a.freq_scale = rp.freq_scale;
  a.ext_factor = rp.ext_factor;
  a.mscale = rp.attn_factor * (rp.ext_factor != 0.0f ? 1.0f + 0.1f * std::log(1.0f / rp.freq_scale) : 1.0f);
  a.corr_low = rp.corr_low;
  a.corr_high = rp.corr_high;
  EtRunResult r = dev.run("rope", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("rope mode %d D=%lld H=%lld T=%lld n_rot=%d: %llu cycles\n", mode, (long long)D, (long long)H,
              (long long)T, n_rot, (unsigned long long)r.cycles);
  auto out = dev.download<float>(a.dst.addr, size_t(D * H * T));

  std::vector<float> want(x.size());
  Tensor tx = host_tensor(DType::F32, x.data(), D, H, T), tp = host_tensor(DType::I32, pos.data(), T);
  Tensor tf = host_tensor(DType::F32, ff.data(), n_rot / 2);
  Tensor out_node = host_tensor(DType::F32, want.data(), D, H, T);
  out_node.op = Op::Rope;
  out_node.iparams = node.iparams;
  out_node.fparams = node.fparams;
  out_node.src[0] = &tx;
  out_node.src[1] = &tp;
  if (factors) out_node.src[2] = &tf;
  run_cpu(out_node);
  // With YaRN the CPU reference's angle theta * (1 - mix) + theta_extrap * mix is contracted into an FMA or
  // not depending on the build (-O2 -march=native does, the sanitizer builds at -O1 may not): one rounding
  // of an angle of up to ~4000 rad (2.4e-4 rad) moves a rotated value by up to that times its pair's size.
  const double rel = ext_factor > 0.0f ? 4e-4 : 4e-7;
  for (int64_t row = 0; row < H * T; ++row)
    for (int64_t i = 0; i < D; ++i) {
      const int64_t pair = mode == 2 ? (i < n_rot ? i % (n_rot / 2) : -1) : (i < n_rot ? i / 2 : -1);
      double mag = std::fabs(x[size_t(row * D + i)]);
      if (pair >= 0) {
        const int64_t a0 = mode == 2 ? pair : 2 * pair, a1 = mode == 2 ? pair + n_rot / 2 : 2 * pair + 1;
        mag = std::fabs(x[size_t(row * D + a0)]) + std::fabs(x[size_t(row * D + a1)]);
      }
      ASSERT_NEAR(out[size_t(row * D + i)], want[size_t(row * D + i)], rel * mag * std::max(1.0f, a.mscale))
          << "row " << row << " dim " << i;
    }
}
TEST(EtOps, RopeNormal) { check_rope(0, false, 0.0f); }
TEST(EtOps, RopeNeoxFreqFactors) { check_rope(2, true, 0.0f); }
TEST(EtOps, RopeNeoxYarn) { check_rope(2, false, 1.0f); }

// ---- ATTENTION: scores, softmax and the weighted sum in fp32 on both sides (different orders,
// exp within a few ulp); with an f16 cache each probability is rounded to f16, so a value near
// a rounding boundary may land one f16 step (2^-11 relative) apart: |error| <= 2^-11 *
// max|v| + 1e-5 * max|v|. With an f32 cache: 2e-5 * max|v|.
void check_attention(DType type, uint32_t kernel, int64_t T, int64_t n_cells) {
  const int64_t hq = 4, hkv = 2, dk = 64, dv = 64;
  const uint64_t esz = type == DType::F16 ? 2 : 4;
  auto q = randn(size_t(dk * hq * T), 7);
  auto kf = randn(size_t(dk * hkv * n_cells), 8), vf = randn(size_t(dv * hkv * n_cells), 9);
  std::vector<uint8_t> k(kf.size() * esz), v(vf.size() * esz);
  for (size_t i = 0; i < kf.size(); ++i) {
    if (type == DType::F16) {
      uint16_t h = f32_to_f16(kf[i]), g = f32_to_f16(vf[i]);
      std::memcpy(k.data() + 2 * i, &h, 2);
      std::memcpy(v.data() + 2 * i, &g, 2);
    } else {
      std::memcpy(k.data() + 4 * i, &kf[i], 4);
      std::memcpy(v.data() + 4 * i, &vf[i], 4);
    }
  }
  // cells: sequence 0 at positions 0.. in even cells, sequence 1 in odd cells, some empty.
  std::vector<int32_t> cells(size_t(2 * n_cells)), toks(size_t(2 * T));
  for (int64_t c = 0; c < n_cells; ++c) {
    cells[size_t(2 * c)] = int32_t(c / 2);
    cells[size_t(2 * c + 1)] = c % 7 == 5 ? -1 : int32_t(c % 2);
  }
  for (int64_t t = 0; t < T; ++t) {
    toks[size_t(2 * t)] = int32_t(n_cells / 2 - 1 - t * 3);
    toks[size_t(2 * t + 1)] = int32_t(t % 2);
  }
  const float scale = 0.125f;
  EtDevice dev;
  dev.minion_mask = 0x3;
  EtAttentionArgs a{};
  a.h = dev.header(kernel, sizeof(a));
  a.q = et_tensor(dev.upload(q), ET_TYPE_F32, dk, hq, T);
  a.k = et_tensor(dev.upload(k), uint32_t(type), dk * hkv, n_cells);
  a.v = et_tensor(dev.upload(v), uint32_t(type), dv * hkv, n_cells);
  a.tokens = et_tensor(dev.upload(toks), ET_TYPE_I32, 2, T);
  a.cells = et_tensor(dev.upload(cells), ET_TYPE_I32, 2, n_cells);
  a.dst = et_tensor(dev.alloc(uint64_t(dv * hq * T) * 4), ET_TYPE_F32, dv * hq, T);
  a.n_head_kv = int32_t(hkv);
  a.scale = scale;
  EtRunResult r = dev.run("attention", a);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("attention %s T=%lld cells=%lld: %llu cycles\n", dtype_name(type), (long long)T, (long long)n_cells,
              (unsigned long long)r.cycles);
  auto out = dev.download<float>(a.dst.addr, size_t(dv * hq * T));

  static_assert(dk == dv, "the CPU node takes one head size");
  const std::vector<float> want =
      test::attention_output({hq, hkv, dk, scale}, q.data(), type, k.data(), type, v.data(), toks, cells, 1);
  float vmax = 0;
  for (float x : vf) vmax = std::max(vmax, std::fabs(x));
  const double tol = (type == DType::F16 ? std::ldexp(1.0, -11) + 1e-5 : 2e-5) * vmax;
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], tol) << i;
}
TEST(EtOps, AttentionF16Decode) { check_attention(DType::F16, ET_K_ATTENTION_F16, 1, 64); }
TEST(EtOps, AttentionF16Batch) { check_attention(DType::F16, ET_K_ATTENTION_F16, 4, 48); }
TEST(EtOps, AttentionF32) { check_attention(DType::F32, ET_K_ATTENTION_F32, 2, 32); }

}  // namespace
}  // namespace opal::et_test
