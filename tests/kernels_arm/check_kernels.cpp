// A self-contained check of every SIMD matmul kernel the host supports
// against the scalar reference, for targets without GoogleTest (the aarch64
// cross build run under qemu-aarch64: the neon preset in CMakePresets.json). Same
// criteria as tests/kernels: activation bytes equal to quantize_activation_row's, gemm
// results within 1e-5 of sum |w_i x_i|. Prints one line per case; exits 1 on
// any mismatch, 2 if the host has no SIMD ISA (nothing would be tested).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/quant.h"
#include "core/quant/activation.h"
#include "support/isa_coverage.h"
#include "support/kernel_call.h"

using namespace opal;
using namespace opal::cpu;

namespace {

int g_failures = 0;

// exact: the results must equal the reference's bit for bit (Q4_0 batches in
// the lanes: llama_order::block_exact on both).
void check(Isa isa, DType t, int64_t k, int64_t n_act, bool exact = false) {
  const MatmulKernels* ref = matmul_kernels(t, Isa::scalar);
  const MatmulKernels* fast = isa_matmul_kernels(t, isa);
  if (!fast) return;
  std::mt19937 rng(uint32_t(k + 31 * n_act + int(t)));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 13;  // a slice of 8 rows and a partial one
  std::vector<float> wf(size_t(rows * k)), x(size_t(n_act * k));
  for (auto& v : wf) v = nd(rng);
  for (auto& v : x) v = 2.0f * nd(rng);
  std::vector<uint8_t> w(row_bytes(t, k) * uint64_t(rows));
  quantize_rows(t, wf.data(), w.data(), rows, k);
  const auto act_ref = test::convert_acts(*ref, x.data(), n_act, k);
  const auto act_fast = test::convert_acts(*fast, x.data(), n_act, k);
  bool ok = true;
  if (!is_float_type(fast->act_type)) {
    std::vector<uint8_t> q(row_bytes(fast->act_type, k) * uint64_t(n_act));
    for (int64_t a = 0; a < n_act; ++a)
      quantize_activation_row(fast->act_type, x.data() + a * k, q.data() + uint64_t(a) * row_bytes(fast->act_type, k),
                              k);
    ok = q.size() == act_fast.size() && std::memcmp(q.data(), act_fast.data(), q.size()) == 0;
    if (!ok) std::printf("  activation bytes differ from quantize_activation_row\n");
  }
  const auto out_ref = test::run_gemm(*ref, w, t, rows, k, act_ref, n_act);
  const auto out_fast = test::run_gemm(*fast, w, t, rows, k, act_fast, n_act);
  std::vector<float> wrow(static_cast<size_t>(k));
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    row_to_f32(t, w.data() + uint64_t(r) * row_bytes(t, k), wrow.data(), k);
    for (int64_t a = 0; a < n_act; ++a) {
      const float* xr = reinterpret_cast<const float*>(act_ref.data() + uint64_t(a) * ref->act_row_bytes(k));
      double mag = 0.0;
      for (int64_t i = 0; i < k; ++i) mag += std::fabs(double(wrow[size_t(i)]) * xr[i]);
      const double err = std::fabs(double(out_fast[size_t(a * rows + r)]) - double(out_ref[size_t(a * rows + r)]));
      worst = std::max(worst, err / (mag + 1e-30));
      if (!(err <= 1e-5 * mag + 1e-30)) ok = false;
    }
  }
  if (exact && std::memcmp(out_ref.data(), out_fast.data(), out_ref.size() * sizeof(float)) != 0) {
    std::printf("  results differ from the reference's bits\n");
    ok = false;
  }
  std::printf("%-4s %-12s %-5s k=%-5lld n_act=%-3lld max rel err %.2e%s%s\n", ok ? "ok" : "FAIL", fast->name,
              dtype_name(t), (long long)k, (long long)n_act, worst, batch_order() == BatchOrder::lanes ? " lanes" : "",
              exact ? " bit-exact" : "");
  if (!ok) ++g_failures;
}

}  // namespace

int main() {
  int isas = 0;
  const auto on_missing = [](const std::string& m) {
    std::printf("FAIL %s\n", m.c_str());
    ++g_failures;
  };
  for (Isa isa : test::covered_isas(on_missing, false)) {
    ++isas;
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F16,
                    DType::BF16, DType::F32})
      for (int64_t k : {32, 256, 4096, 4352})
        for (int64_t n_act : {1, 2, 7, 32}) {
          if (block_size(t) == 256 && k % 256 != 0) continue;
          check(isa, t, k, n_act, t == DType::Q4_0 && n_act >= 4);
        }
    // Q8_0 batches past 16 rows in the lanes order (the default keeps llama's
    // for Q8_0, above), and Q5_0 batches in llama's order (the default gives
    // Q5_0 the lanes, above).
    set_batch_order(BatchOrder::lanes);
    for (int64_t k : {32, 4096})
      for (int64_t n_act : {17, 32}) check(isa, DType::Q8_0, k, n_act);
    set_batch_order(BatchOrder::llama);
    for (int64_t k : {32, 4096})
      for (int64_t n_act : {17, 32}) check(isa, DType::Q5_0, k, n_act);
  }
  if (isas == 0) {
    std::printf("no SIMD ISA on this host: nothing checked\n");
    return 2;
  }
  std::printf("%s\n", g_failures ? "FAILED" : "all kernels match the reference");
  return g_failures ? 1 : 0;
}
