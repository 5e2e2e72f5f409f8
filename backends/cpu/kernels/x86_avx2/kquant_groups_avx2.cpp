// Decode of Q4_K and Q6_K weights repacked at load into groups of 8 rows
// (kernels/repack.h, kLayoutKGroups8) with plain AVX2 (vpmaddwd + vpaddd per
// sub-block): the kernels and the layout in kquant_groups.h.
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/kquant_groups.h"

namespace opal::cpu::avx2 {
namespace {

struct MaddDot {
  static __m256i pairs(__m256i acc, __m256i p, __m256i s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s)); }
};

constexpr GroupFn kQ4K[kMaxActs] = {q4_K_group<MaddDot, 1>, q4_K_group<MaddDot, 2>, q4_K_group<MaddDot, 3>};
constexpr GroupFn kQ6K[kMaxActs] = {q6_K_group<MaddDot, 1>, q6_K_group<MaddDot, 2>, q6_K_group<MaddDot, 3>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_k_groups(g, kQ4K, gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_k_groups(g, kQ6K, gemm_q6_K); }

}  // namespace opal::cpu::avx2
#endif  // x86
