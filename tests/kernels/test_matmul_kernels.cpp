// Every SIMD matmul kernel the host supports, against the scalar reference
// (backends/cpu/kernels/ref): converted activation bytes must equal llama.cpp's
// activation quantizer's (core/quant/activation.h) exactly; gemm results may differ only by float
// summation order (tolerance relative to sum |w_i * x_i|).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant/activation.h"
#include "support/isa_coverage.h"
#include "support/kernel_call.h"

namespace opal::cpu {
namespace {

const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K,
                        DType::Q6_K, DType::F16,  DType::BF16, DType::F32};

// Announces the ISAs covered and fails on one $OPAL_REQUIRE_ISA names that the host lacks.
std::vector<Isa> host_isas(bool with_scalar) {
  return test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, with_scalar);
}
std::vector<Isa> host_simd_isas() { return host_isas(false); }

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Byte offsets of the f16 scale fields of a block (randomized blocks get sane scales there).
std::vector<int> scale_offsets(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: return {0};
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

// rows x k weights: quantized from random floats, or (raw) random bytes with
// valid f16 scales, which reaches every quant value (Q8_0's -128, Q6_K's -128 scales).
std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t k, bool raw, std::mt19937& rng) {
  const uint64_t rb = row_bytes(t, k);
  std::vector<uint8_t> w(rb * uint64_t(rows));
  if (raw && !is_float_type(t)) {
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : w) b = uint8_t(byte(rng));
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    const int64_t bs = type_size(t), nblk = int64_t(w.size()) / bs;
    for (int64_t i = 0; i < nblk; ++i)
      for (int off : scale_offsets(t)) {
        const uint16_t h = f32_to_f16(scale(rng));
        std::memcpy(w.data() + i * bs + off, &h, 2);
      }
    return w;
  }
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> f(size_t(rows * k));
  for (auto& v : f) v = val(rng);
  quantize_rows(t, f.data(), w.data(), rows, k);
  return w;
}

std::vector<float> make_acts(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> val(0.0f, 2.0f);
  std::vector<float> x(size_t(n * k));
  for (auto& v : x) v = val(rng);
  return x;
}

std::vector<uint8_t> convert(const MatmulKernels& kern, const std::vector<float>& x, int64_t n, int64_t k) {
  std::vector<uint8_t> out = test::convert_acts(kern, x.data(), n, k, 1);
  EXPECT_EQ(out.back(), 0xAB) << "convert_act wrote past its rows";
  return out;
}

// Runs kern over rows [1, rows) with an output stride wider than the rows; the
// unused cells must stay untouched.
std::vector<float> run_gemm(const MatmulKernels& kern, const std::vector<uint8_t>& w, DType t, int64_t rows, int64_t k,
                            const std::vector<uint8_t>& act, int64_t n_act) {
  const int64_t stride = rows + 3;
  test::GemmCall call;
  call.row_begin = 1;
  call.out_stride = stride;
  call.fill = -12345.0f;
  const std::vector<float> out = test::run_gemm(kern, w, t, rows, k, act, n_act, call);
  for (int64_t a = 0; a < n_act; ++a) {
    EXPECT_EQ(out[size_t(a * stride)], -12345.0f) << "row 0 is outside the slice";
    for (int64_t r = rows; r < stride; ++r) EXPECT_EQ(out[size_t(a * stride + r)], -12345.0f) << "wrote past row_end";
  }
  return out;
}

void compare(Isa isa, DType t, int64_t k, int64_t n_act, bool raw) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(t) + " k=" + std::to_string(k) +
               " n_act=" + std::to_string(n_act) + (raw ? " raw" : ""));
  const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
  const MatmulKernels* fast = isa_matmul_kernels(t, isa);
  ASSERT_NE(ref, nullptr);
  if (!fast && isa == Isa::neon && t != DType::Q8_0 && t != DType::Q4_0 && t != DType::Q4_K)
    return;  // reference on ARM
  if (!fast && isa == Isa::avx2_vnni && t != DType::Q8_0 && t != DType::Q4_0 && t != DType::Q5_0 && t != DType::Q4_K &&
      t != DType::Q6_K)
    return;  // avx2's kernels (covered under avx2)
  if (!fast) GTEST_FAIL() << "no " << isa_name(isa) << " kernel for " << dtype_name(t);
  EXPECT_EQ(fast->act_type, ref->act_type);
  std::mt19937 rng(uint32_t(k * 131 + n_act * 7 + int(t) + (raw ? 1000 : 0)));
  // 14 computed rows: not a multiple of any tile; 83 for batches (AVX-512
  // Q4_0/Q5_0 from 16 rows: slices of 32 and 16 rows plus 3 more).
  const int64_t rows = n_act >= 16 ? 84 : 15;
  const auto w = make_weights(t, rows, k, raw, rng);
  const auto x = make_acts(n_act, k, rng);
  const auto act_ref = convert(*ref, x, n_act, k);
  const auto act_fast = convert(*fast, x, n_act, k);
  // Packed quantized activations must be llama.cpp's activation quantizer's bytes.
  if (!is_float_type(fast->act_type)) {
    // A kernel may append its own per-row data after the blocks (AVX-512
    // Q4_0/Q5_0: block scales and sums, checked through the gemm results).
    const uint64_t qb = row_bytes(fast->act_type, k), fb = fast->act_row_bytes(k);
    ASSERT_GE(fb, qb);
    std::vector<uint8_t> q(qb);
    for (int64_t a = 0; a < n_act; ++a) {
      quantize_activation_row(fast->act_type, x.data() + a * k, q.data(), k);
      ASSERT_EQ(0, std::memcmp(q.data(), act_fast.data() + uint64_t(a) * fb, qb))
          << "activation bytes of row " << a << " differ from quantize_activation_row";
    }
  }
  const auto out_ref = run_gemm(*ref, w, t, rows, k, act_ref, n_act);
  const auto out_fast = run_gemm(*fast, w, t, rows, k, act_fast, n_act);
  // Tolerance from the magnitude of the products (dequantized weights x rounded activations).
  std::vector<float> wrow(static_cast<size_t>(k));
  int bad = 0;
  for (int64_t r = 1; r < rows; ++r) {
    row_to_f32(t, w.data() + uint64_t(r) * row_bytes(t, k), wrow.data(), k);
    for (int64_t a = 0; a < n_act; ++a) {
      const float* xr = reinterpret_cast<const float*>(act_ref.data() + uint64_t(a) * ref->act_row_bytes(k));
      double mag = 0.0;
      for (int64_t i = 0; i < k; ++i) mag += std::fabs(double(wrow[size_t(i)]) * xr[i]);
      const size_t o = size_t(a * (rows + 3) + r);
      const double err = std::fabs(double(out_fast[o]) - double(out_ref[o]));
      if (!(err <= 1e-5 * mag + 1e-30) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " act " << a << ": " << out_fast[o] << " vs ref " << out_ref[o] << " (|w||x| "
                      << mag << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

class KernelsVsReference : public ::testing::TestWithParam<DType> {};

TEST_P(KernelsVsReference, EverySupportedIsaMatchesTheReference) {
  const DType t = GetParam();
  const auto isas = host_simd_isas();
  for (Isa isa : isas)
    for (int64_t k : {32, 256, 4096, 4352, 4357}) {
      if (is_k_quant(t) && k % 256 != 0) continue;
      if (!is_float_type(t) && k % 32 != 0) continue;
      // 4, 12: small batches; 83: chunks of 64, groups of 16, a remainder.
      for (int64_t n_act : {1, 2, 4, 7, 12, 32, 83}) {
        compare(isa, t, k, n_act, false);
        if (!is_float_type(t) && (k <= 256 || n_act <= 2)) compare(isa, t, k, n_act, true);
      }
    }
}

// Q8_0 and Q5_0 batches in the lanes order (batch_order): within the
// tolerance, on 84 rows (slices of 32, a padded last slice, a masked store)
// and batches past the small-batch sizes; the llama order is asserted bit for
// bit in test_llama_order.cpp.
TEST(KernelsVsReferenceLanes, LanesOrderMatchesTheReference) {
  const BatchOrder before = batch_order();
  set_batch_order(BatchOrder::lanes);
  for (DType t : {DType::Q8_0, DType::Q5_0})
    for (Isa isa : host_simd_isas())
      for (int64_t k : {32, 4096})
        for (int64_t n_act : {17, 32, 83}) compare(isa, t, k, n_act, k == 32);
  // Q4_K decode and small batches (stop 26: avx2's super-block-exact order under lanes and auto; llama.cpp's under
  // llama).
  for (BatchOrder order : {BatchOrder::lanes, BatchOrder::llama}) {
    set_batch_order(order);
    for (Isa isa : host_simd_isas())
      for (int64_t k : {256, 4096})
        for (int64_t n_act : {1, 2, 3}) compare(isa, DType::Q4_K, k, n_act, k == 256);
  }
  set_batch_order(before);
  EXPECT_EQ(parse_batch_order("lanes"), BatchOrder::lanes);
  EXPECT_EQ(parse_batch_order("llama"), BatchOrder::llama);
  EXPECT_EQ(parse_batch_order("auto"), BatchOrder::by_type);
  // auto: Q5_0 and Q4_K in the lanes, Q8_0 in llama.cpp's order; an explicit choice covers all.
  set_batch_order(BatchOrder::by_type);
  EXPECT_TRUE(lanes_order(DType::Q5_0));
  EXPECT_TRUE(lanes_order(DType::Q4_K));
  EXPECT_FALSE(lanes_order(DType::Q8_0));
  EXPECT_FALSE(lanes_order(DType::Q6_K));
  set_batch_order(BatchOrder::llama);
  EXPECT_FALSE(lanes_order(DType::Q5_0));
  EXPECT_FALSE(lanes_order(DType::Q4_K));
  set_batch_order(BatchOrder::lanes);
  EXPECT_TRUE(lanes_order(DType::Q8_0));
  set_batch_order(before);
  EXPECT_THROW(parse_batch_order("fast"), Error);
}

// The decode prefetch choice (matmul_kernels.h): auto follows the host (on without AVX-512), on / off force it, and a
// bad name is an error naming the choices. (That the kernels give the same bits either way: test_repack.cpp.)
TEST(DecodePrefetch, AutoFollowsTheHostAndAChoiceForcesIt) {
  const DecodePrefetch before = decode_prefetch_choice();
  EXPECT_EQ(parse_decode_prefetch("auto"), DecodePrefetch::by_host);
  EXPECT_EQ(parse_decode_prefetch("on"), DecodePrefetch::on);
  EXPECT_EQ(parse_decode_prefetch("off"), DecodePrefetch::off);
  // Off only on AMD's AVX-512 cores (Zen 4 / Zen 5); Intel with or without AVX-512 and Zen 3 prefetch.
  EXPECT_FALSE(decode_prefetch_by_host(/*amd=*/true, /*avx512=*/true));
  EXPECT_TRUE(decode_prefetch_by_host(/*amd=*/true, /*avx512=*/false));
  EXPECT_TRUE(decode_prefetch_by_host(/*amd=*/false, /*avx512=*/true));
  EXPECT_TRUE(decode_prefetch_by_host(/*amd=*/false, /*avx512=*/false));
  set_decode_prefetch(DecodePrefetch::by_host);
  EXPECT_EQ(decode_prefetch(), decode_prefetch_by_host(host_is_amd(), host_has_avx512()));
  set_decode_prefetch(DecodePrefetch::on);
  EXPECT_TRUE(decode_prefetch());
  set_decode_prefetch(DecodePrefetch::off);
  EXPECT_FALSE(decode_prefetch());
  set_decode_prefetch(before);
  try {
    parse_decode_prefetch("always");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose auto, on or off"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KernelsVsReference, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Rounding ties and sign choices of the activation quantizers: half-integer
// values with amax 127 (Q8_0: id = 1, Q8_K: iscale = -1; both round ties to
// even), +amax and -amax in one block (Q8_K keeps the first), zero blocks.
TEST(KernelsActivation, TiesSignsAndZeroBlocksMatchTheReferenceQuantizer) {
  const int64_t k = 1024;
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) x[size_t(i)] = float((i * 37) % 255 - 127) * 0.5f;
  for (int64_t b = 0; b < k / 32; ++b) x[size_t(b * 32 + 5)] = (b % 2) ? 127.0f : -127.0f;
  x[300] = -127.0f;
  x[301] = 127.0f;
  for (int64_t i = 768; i < 1024; ++i) x[size_t(i)] = 0.0f;  // a zero Q8_K block (and zero Q8_0 blocks)
  for (Isa isa : host_simd_isas())
    for (DType t : {DType::Q8_0, DType::Q4_K}) {
      const MatmulKernels* fast = matmul_kernels(t, isa);  // avx2-vnni: Q4_K falls back to avx2's
      ASSERT_NE(fast, nullptr);
      std::vector<uint8_t> want(row_bytes(fast->act_type, k)), got(fast->act_row_bytes(k));
      ASSERT_GE(got.size(), want.size());  // a kernel may append per-row data (block scales and sums)
      quantize_activation_row(fast->act_type, x.data(), want.data(), k);
      fast->convert_act(fast->act_type, x.data(), got.data(), k);
      got.resize(want.size());
      EXPECT_EQ(want, got) << isa_name(isa) << " " << dtype_name(fast->act_type);
    }
}

TEST(KernelsDispatch, IsaNamesParseAndUnsupportedIsasAreRefused) {
  EXPECT_EQ(parse_isa("scalar"), Isa::scalar);
  EXPECT_EQ(parse_isa("avx2"), Isa::avx2);
  EXPECT_EQ(parse_isa("avx512"), Isa::avx512);
  EXPECT_EQ(parse_isa("avx2-vnni"), Isa::avx2_vnni);
  EXPECT_STREQ(isa_name(Isa::avx2_vnni), "avx2-vnni");
  EXPECT_THROW(parse_isa("avx2_vnni"), Error);
  EXPECT_EQ(parse_isa("neon"), Isa::neon);
  EXPECT_THROW(parse_isa("sse9"), Error);
  EXPECT_TRUE(host_supports(Isa::scalar));
  if (!std::getenv("OPAL_ISA")) {
    EXPECT_EQ(selected_isa(), best_isa());
  }
#if defined(__x86_64__)
  EXPECT_FALSE(host_supports(Isa::neon));
  EXPECT_THROW(set_isa(Isa::neon), Error);
#else
  EXPECT_FALSE(host_supports(Isa::avx512));
  EXPECT_THROW(set_isa(Isa::avx512), Error);
#endif
}

TEST(KernelsDispatch, SelectionPicksTheIsaAndFallsBackPerType) {
  const Isa before = selected_isa();
  set_isa(Isa::scalar);
  EXPECT_STREQ(matmul_kernels(DType::Q8_0)->name, "ref");
  for (Isa isa : host_simd_isas()) {
    set_isa(isa);
    for (DType t : kTypes) {
      const MatmulKernels* k = matmul_kernels(t);
      ASSERT_NE(k, nullptr);
      if (!isa_matmul_kernels(t, isa) && isa == Isa::avx2_vnni) {  // Q4_0 and Q8_0 only, the rest avx2's
        EXPECT_NE(t, DType::Q8_0);
        EXPECT_NE(t, DType::Q4_0);
        EXPECT_STREQ(k->name, "avx2") << dtype_name(t);
        continue;
      }
      if (!isa_matmul_kernels(t, isa)) {  // NEON covers Q8_0, Q4_0, Q4_K only
        EXPECT_EQ(isa, Isa::neon);
        EXPECT_STREQ(k->name, "ref");
        continue;
      }
      EXPECT_NE(std::string(k->name), "ref") << dtype_name(t) << " under " << isa_name(isa);
      EXPECT_EQ(std::string(k->name).rfind(isa_name(isa), 0), 0u) << k->name << " does not name " << isa_name(isa);
    }
    // A type without a SIMD kernel falls back to the reference.
    ASSERT_NE(matmul_kernels(DType::Q2_K), nullptr);
    EXPECT_STREQ(matmul_kernels(DType::Q2_K)->name, "ref");
  }
  set_isa(before);
}

// round_activations(F16) takes vcvtps2ph under a SIMD ISA: the same bits as
// the software conversion, ties, subnormals and overflow included.
TEST(RoundActivations, F16InHardwareEqualsTheSoftwareConversion) {
  std::vector<float> x = {0.0f,           -0.0f,          1.0f,        65504.0f, 65520.0f, 70000.0f,
                          -70000.0f,      6.0e-8f,        3.0e-8f,     2.9e-8f,  1.0e-5f,  -1.0e-5f,
                          1.00048828125f, 1.00146484375f, 0.33333334f, INFINITY, -INFINITY};
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 4.0f);
  for (int i = 0; i < 5000; ++i) x.push_back(n(rng) * std::ldexp(1.0f, int(rng() % 40) - 30));
  const Isa before = selected_isa();
  for (Isa isa : host_isas(true)) {
    SCOPED_TRACE(isa_name(isa));
    set_isa(isa);
    for (int64_t len : {int64_t(x.size()), int64_t(13), int64_t(1)}) {
      std::vector<float> out(x.size(), 7.0f);
      round_activations(DType::F16, x.data(), out.data(), len);
      for (int64_t i = 0; i < len; ++i)
        ASSERT_EQ(f16_to_f32(f32_to_f16(x[size_t(i)])), out[size_t(i)]) << "x = " << x[size_t(i)];
      for (size_t i = size_t(len); i < x.size(); ++i) ASSERT_EQ(out[i], 7.0f) << "wrote past k";
    }
  }
  set_isa(before);
}

}  // namespace
}  // namespace opal::cpu
