// The flash decode's integer K·q over a q8_0 / q4_0 cache with AVX-VNNI (the
// `avx2-vnni` ISA; kernels/attn_flash.h, x86_avx2/flash_int_dots.h): one
// vpdpbusd per block and query row makes the 8 exact lanes from q's lane
// starts (-off * sum4(q)), K's block read as unsigned bytes (q8_0: k + 128;
// q4_0: its nibbles), where plain AVX2 takes vpsignb + vpmaddubsw + vpmaddwd.
// The same lanes, so the same bits as the avx2 and reference forms. The other
// flash kernels of avx2-vnni are the avx2 ones (attn_dispatch.cpp).
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/x86_avx2/flash_int_dots.h"

namespace opal::cpu::avx2vnni {
namespace {

struct VnniQ8 {
  using Block = quant::BlockQ8_0;
  struct K {
    __m256i u;
  };
  static K load(const Block* b) {
    return {
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)), _mm256_set1_epi8(char(0x80)))};
  }
  static __m256i lanes(const K& k, __m256i q, __m256i start) { return _mm256_dpbusd_avx_epi32(start, k.u, q); }
};

struct VnniQ4 {
  using Block = quant::BlockQ4_0;
  struct K {
    __m256i nib;
  };
  static K load(const Block* b) { return {flash_nibbles(b->qs)}; }
  static __m256i lanes(const K& k, __m256i q, __m256i start) { return _mm256_dpbusd_avx_epi32(start, k.nib, q); }
};

}  // namespace

void flash_dots_q8_0_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                         const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  flash_dots_int<VnniQ8>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
}
void flash_dots_q4_0_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                         const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  flash_dots_int<VnniQ4>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
}

}  // namespace opal::cpu::avx2vnni
#endif  // x86
