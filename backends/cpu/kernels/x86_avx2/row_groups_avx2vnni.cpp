// Decode and small batches (up to 16 activation rows) of Q5_0 weights
// repacked at load into row groups of 8 (kernels/repack.h, kLayoutQ5Groups8),
// with AVX-VNNI (the avx2-vnni ISA): q5_0_groups.h's kernels (layout, order
// and why they give the plain layout's bits are described there) with one
// vpdpbusd per piece where plain AVX2 takes vpmaddubsw, vpmaddwd by ones and
// the subtraction of the offset: per lane, vpdpbusd(-16 * (x_4L + .. +
// x_4L+3), q, x_4L..4L+3 broadcast) is the exact sum of (q - 16) * x; in the
// block-exact order (stop 25) two vpdpbusd chains a block. The results are the
// bits of avx2-vnni's plain Q5_0 gemm in the same order (RowsInLanes<Q5_0Weights>
// block-exact, LegacyDecode<Q5_0Weights> llama.cpp's).
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2vnni {
namespace {

constexpr int64_t kGroup = 8;
// As the AVX2 row-group kernels: batches of 4+ rows request a slice's first 16 KiB up front and prefetch 16 KiB on
// along the stream (avx2::wants_stream_prefetch); decode and smaller batches stream without either.
constexpr int64_t kGroupPrefetch = 16 * 1024, kHeadBytes = 16 * 1024;

__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
__m256i or_masked(__m256i a, __m256i b, __m256i mask) { return _mm256_or_si256(a, _mm256_and_si256(b, mask)); }

// AVX-VNNI's vpdpbusd (q5_0_groups.h's VnniQ5).
struct AvxVnniDpbusd {
  static __m256i apply(__m256i acc, __m256i u, __m256i v) { return _mm256_dpbusd_avx_epi32(acc, u, v); }
};

constexpr int kQ5MaxActs = 3;
bool group_stream_prefetch(const GemmArgs& g) { return avx2::wants_stream_prefetch(g); }

#include "backends/cpu/kernels/x86_avx2/q5_0_groups.h"

}  // namespace

void gemm_q5_0_groups(const GemmArgs& g) { run_q5_0_groups<VnniQ5<AvxVnniDpbusd>>(g, gemm_q5_0); }

}  // namespace opal::cpu::avx2vnni
#endif  // x86
