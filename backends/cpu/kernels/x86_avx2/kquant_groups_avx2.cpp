// Decode of Q4_K and Q6_K weights repacked at load into groups of 8 rows
// (kernels/repack.h, kLayoutKGroups8Pairs / kLayoutQ6KGroups8Pairs) with plain AVX2 (vpmaddwd + vpaddd per
// sub-block): the kernels and the layout in kquant_groups.h.
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/kquant_groups.h"

namespace opal::cpu::avx2 {
namespace {

struct MaddDot {
  static __m256i pairs(__m256i acc, __m256i p, __m256i s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s)); }
};

constexpr GroupFn kQ4KLanes[kMaxActs] = {
    q4_K_group_pairs_lanes<MaddDot, 1, true>, q4_K_group_pairs_lanes<MaddDot, 2, true>,
    q4_K_group_pairs_lanes<MaddDot, 3, true>, q4_K_group_pairs_lanes<MaddDot, 4, true>};
constexpr GroupFn kQ6KLanes[kMaxActs] = {
    q6_K_group_pairs_lanes<MaddDot, 1, true>, q6_K_group_pairs_lanes<MaddDot, 2, true>,
    q6_K_group_pairs_lanes<MaddDot, 3, true>, q6_K_group_pairs_lanes<MaddDot, 4, true>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_q4_K_decode<MaddDot>(g, avx2::q4_K_super_block_exact(g), gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_q6_K_decode<MaddDot>(g, gemm_q6_K); }
bool gemm_q4_K_groups_batch(const GemmArgs& g) { return run_k_group_batch(g, kQ4KLanes, gemm_q4_K, true); }
bool gemm_q6_K_groups_batch(const GemmArgs& g) { return run_k_group_batch(g, kQ6KLanes, gemm_q6_K, true); }

}  // namespace opal::cpu::avx2
#endif  // x86
