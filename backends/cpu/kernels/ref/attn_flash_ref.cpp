// Reference kernels of the tiled attention (kernels/attn_flash.h): plain
// loops, f32 sums in index order, std::exp. The SIMD forms are tested against
// these. The integer K·q of a q8_0 / q4_0 cache (dots_*_int) is llama.cpp's
// x86 vec_dot order, which every ISA reproduces bit for bit: per 32-block 8
// exact int32 lanes of 4 products, acc[l] = fma(d_k * d_q, lane, acc[l]),
// then llama_order::hsum8.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/llama_order.h"
#include "core/fp16.h"
#include "core/quant/activation.h"
#include "core/quant/blocks.h"

namespace opal::cpu {
namespace {

void widen_f16(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = base + uint64_t(cells[r]) * stride;
    for (int64_t i = 0; i < d; ++i) {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      dst[r * ld + i] = f16_to_f32(h);
    }
  }
}

void widen_q8_0(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cells[r]) * stride);
    for (int64_t i = 0; i < d; ++i) dst[r * ld + i] = f16_to_f32(b[i / 32].d) * float(b[i / 32].qs[i % 32]);
  }
}

void widen_q4_0(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(base + uint64_t(cells[r]) * stride);
    for (int64_t i = 0; i < d; ++i) {
      const int64_t j = i % 32;
      const int q = j < 16 ? (b[i / 32].qs[j] & 15) : (b[i / 32].qs[j - 16] >> 4);
      dst[r * ld + i] = f16_to_f32(b[i / 32].d) * float(q - 8);
    }
  }
}

void dots(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
          float* s, int64_t lds) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t r = 0; r < n; ++r) {
      float a = 0.0f;
      for (int64_t i = 0; i < dk; ++i) a += q[j * ldq + i] * k[r * ldk + i];
      s[j * lds + r] = a * scale;
    }
}

float exp_sum(float* s, int64_t n, float mx) {
  float sum = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    s[r] = s[r] == -INFINITY ? 0.0f : std::exp(s[r] - mx);
    sum += s[r];
  }
  return sum;
}

float mask_max(float* s, int64_t n, int64_t a, int64_t e) {
  float mx = -INFINITY;
  for (int64_t r = 0; r < n; ++r) {
    if (r < a || r >= e) s[r] = -INFINITY;
    mx = std::max(mx, s[r]);
  }
  return mx;
}

void scale_row(float* x, int64_t n, float f) {
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

void accum(const float* p, int64_t ldp, int64_t m, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
           int64_t lda) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t r = 0; r < n; ++r) {
      const float pr = p[j * ldp + r];
      if (pr == 0.0f) continue;
      for (int64_t i = 0; i < dv; ++i) acc[j * lda + i] += pr * v[r * ldv + i];
    }
}

// Value i of the row of `cell` (f16; q8_0: d * q as widen_q8_0; q4_0: d * (nibble - 8) as widen_q4_0).
template <DType T>
float value_at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
  float x;
  if constexpr (T == DType::F16) {
    widen_f16(base + 2 * uint64_t(i), stride, &cell, 1, 1, &x, 1);
  } else if constexpr (T == DType::Q4_0) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(base + uint64_t(cell) * stride) + i / 32;
    const int64_t j = i % 32;
    const int q = j < 16 ? (b->qs[j] & 15) : (b->qs[j - 16] >> 4);
    x = f16_to_f32(b->d) * float(q - 8);
  } else {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cell) * stride) + i / 32;
    x = f16_to_f32(b->d) * float(b->qs[i % 32]);
  }
  return x;
}

template <DType T>
void dots_direct(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                 int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t r = 0; r < n; ++r) {
      float a = 0.0f;
      for (int64_t i = 0; i < dk; ++i) a += q[j * ldq + i] * value_at<T>(base, stride, cells[r], i);
      s[j * lds + r] = a * scale;
    }
}

template <DType T>
void accum_direct(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                  int64_t n, int64_t dv, float* acc, int64_t lda) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < dv; ++i) {
      const float x = value_at<T>(base, stride, cells[r], i);
      for (int64_t j = 0; j < m; ++j)
        if (p[j * ldp + r] != 0.0f) acc[j * lda + i] += p[j * ldp + r] * x;
    }
}

// K's 32 quants of block b of a cell's row as signed values (q4_0: nibble - 8, low nibbles first) and its scale.
template <DType T>
float k_block(const uint8_t* row, int64_t b, int8_t* kq) {
  if constexpr (T == DType::Q4_0) {
    const auto* blk = reinterpret_cast<const quant::BlockQ4_0*>(row) + b;
    for (int i = 0; i < 16; ++i) {
      kq[i] = int8_t((blk->qs[i] & 15) - 8);
      kq[i + 16] = int8_t((blk->qs[i] >> 4) - 8);
    }
    return f16_to_f32(blk->d);
  } else {
    const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(row) + b;
    std::memcpy(kq, blk->qs, 32);
    return f16_to_f32(blk->d);
  }
}

template <DType T>
void dots_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
              int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  const int64_t nb = dk / 32;
  for (int64_t j = 0; j < m; ++j) {
    const uint8_t* qj = q8 + j * ldq8;
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = base + uint64_t(cells[r]) * stride;
      float acc[8] = {};
      for (int64_t b = 0; b < nb; ++b) {
        int8_t kq[32];
        float qd;
        std::memcpy(&qd, qj + 128 * nb + 4 * b, 4);
        const float d = k_block<T>(row, b, kq) * qd;  // a product of two f16 values: exact
        const int8_t* qq = reinterpret_cast<const int8_t*>(qj + 64 * b);
        for (int l = 0; l < 8; ++l) {
          int32_t lane = 0;
          for (int i = 0; i < 4; ++i) lane += int32_t(kq[4 * l + i]) * int32_t(qq[4 * l + i]);
          acc[l] = std::fma(d, float(lane), acc[l]);
        }
      }
      s[j * lds + r] = llama_order::hsum8(acc) * scale;
    }
  }
}

const FlashKernels kRef = {"scalar",
                           widen_f16,
                           widen_q8_0,
                           widen_q4_0,
                           dots,
                           exp_sum,
                           mask_max,
                           accum,
                           dots_direct<DType::F16>,
                           accum_direct<DType::F16>,
                           dots_direct<DType::Q8_0>,
                           accum_direct<DType::Q8_0>,
                           dots_direct<DType::Q4_0>,
                           accum_direct<DType::Q4_0>,
                           false,
                           dots_int<DType::Q8_0>,
                           dots_int<DType::Q4_0>,
                           flash_online_softmax<mask_max, exp_sum, scale_row>};

}  // namespace

const FlashKernels& ref_flash_kernels() { return kRef; }

void flash_q8_row(DType k_type, const float* q, int64_t dk, uint8_t* dst) {
  const int64_t nb = dk / 32;
  const int32_t off = k_type == DType::Q4_0 ? 8 : 128;
  for (int64_t b = 0; b < nb; ++b) {
    quant::BlockQ8_0 blk;
    quantize_activation_row(DType::Q8_0, q + 32 * b, &blk, 32);
    std::memcpy(dst + 64 * b, blk.qs, 32);
    std::memcpy(dst + 64 * b + 32, blk.qs, 32);
    int32_t start[16];
    for (int l = 0; l < 8; ++l) {
      int32_t sum = 0;
      for (int i = 0; i < 4; ++i) sum += blk.qs[4 * l + i];
      start[l] = start[l + 8] = -off * sum;
    }
    std::memcpy(dst + 64 * nb + 64 * b, start, sizeof start);
    const float d = f16_to_f32(blk.d);
    std::memcpy(dst + 128 * nb + 4 * b, &d, 4);
  }
}

}  // namespace opal::cpu
