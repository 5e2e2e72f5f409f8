// Decode of Q4_K and Q6_K weights repacked at load into groups of 8 rows
// (kernels/repack.h, kLayoutKGroups8Pairs / kLayoutQ6KGroups8Pairs) with AVX-VNNI (the avx2-vnni ISA): the
// kernels of kquant_groups.h with one vpdpwssd per sub-block where plain
// AVX2 takes vpmaddwd and vpaddd (the int16 pairs times the rows' scale pairs,
// added into the lane's int32 sum: exact, so the same bits as avx2's group
// kernels and the plain per-row kernels; the Q6_K batches as avx2, below).
// vpdpbusd itself does not fit: the sub-block scales apply to the int16 pairs
// of vpmaddubsw.
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/kquant_groups.h"

namespace opal::cpu::avx2vnni {
namespace {

struct VnniDot {
  static __m256i pairs(__m256i acc, __m256i p, __m256i s) { return _mm256_dpwssd_avx_epi32(acc, p, s); }
};
// Q6_K's batches keep vpmaddwd + vpaddd (stop 15: a lane's 8 sub-block products chained into one
// vpdpwssd sum measured no faster, packed-decode*/avx2-vnni/q6_K 23-28 GB/s against avx2's 27-31, load 7;
// Q4_K 28-31 against 24-27). Its decode kernel (stop 18) splits a lane's sum into two chains and takes vpdpwssd.
struct MaddDot {
  static __m256i pairs(__m256i acc, __m256i p, __m256i s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s)); }
};

constexpr GroupFn kQ4KLanes[kMaxActs] = {
    q4_K_group_pairs_lanes<VnniDot, 1, true>, q4_K_group_pairs_lanes<VnniDot, 2, true>,
    q4_K_group_pairs_lanes<VnniDot, 3, true>, q4_K_group_pairs_lanes<VnniDot, 4, true>};
constexpr GroupFn kQ6KLanes[kMaxActs] = {
    q6_K_group_pairs_lanes<MaddDot, 1, true>, q6_K_group_pairs_lanes<MaddDot, 2, true>,
    q6_K_group_pairs_lanes<MaddDot, 3, true>, q6_K_group_pairs_lanes<MaddDot, 4, true>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_q4_K_decode<VnniDot>(g, avx2::q4_K_super_block_exact(g), gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_q6_K_decode<VnniDot>(g, gemm_q6_K); }
bool gemm_q4_K_groups_batch(const GemmArgs& g) { return run_k_group_batch(g, kQ4KLanes, gemm_q4_K, true); }
bool gemm_q6_K_groups_batch(const GemmArgs& g) { return run_k_group_batch(g, kQ6KLanes, gemm_q6_K, true); }

}  // namespace opal::cpu::avx2vnni
#endif  // x86
