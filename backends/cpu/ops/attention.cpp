// KV_STORE and ATTENTION on the CPU.
//
// KV_STORE converts token t's row to the cache type (f16 rounds to nearest
// even) into cell cells[t].
//
// ATTENTION, per token t and query head h (kv head g = h / (Hq / Hkv)):
//   visible cells: same seq as the token, pos <= the token's pos (causal);
//   s_c = dot(q_h, k_c,g) * scale;  p = softmax(s) (max-subtracted, sum in
//   double, times 1/sum);  out_h = sum_c p_c v_c,g (accumulated in double).
// With an f16 cache, q and p are rounded to f16 first: llama.cpp computes
// K*Q and V*P with ggml_mul_mat on f16 cache views, which converts the other
// operand to f16. Threads split the (token, head) pairs.
// With an f16 cache and a SIMD ISA selected (kernels/attn_kernels.h), the dot
// products and the V accumulation run in f32 SIMD (same roundings of q and p;
// only the summation differs from the double-precision reference).
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

struct AttnLayout {
  uint64_t per_thread = 0;
  uint64_t off_q = 0, off_row = 0, off_acc = 0;
};

AttnLayout attn_layout(const Tensor& node) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int64_t hkv = node.iparams[0];
  const int64_t dk = q.ne[0], dv = v.ne[0] / hkv, n_cells = k.ne[1];
  auto a64 = [](uint64_t x) { return (x + 63) / 64 * 64; };
  AttnLayout l;
  l.off_q = a64(uint64_t(n_cells) * 4);
  l.off_row = l.off_q + a64(uint64_t(dk) * 4);
  l.off_acc = l.off_row + a64(uint64_t(std::max(dk, dv)) * 4);
  l.per_thread = l.off_acc + a64(uint64_t(dv) * 8);
  return l;
}

}  // namespace

uint64_t attention_work_size(const Tensor& node, int n_threads) {
  return attn_layout(node).per_thread * uint64_t(n_threads);
}

void compute_kv_store(const Tensor& node, const OpContext& ctx) {
  const Tensor& cache = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& cells = *node.src[2];
  const int64_t E = cache.ne[0], T = cells.ne[0];
  ctx.pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t c = static_cast<const int32_t*>(cells.data)[t];
      if (c < 0 || c >= cache.ne[1]) continue;  // validated by the runtime
      row_from_f32(cache.type, static_cast<const float*>(x.data) + t * E,
                   static_cast<uint8_t*>(cache.data) + uint64_t(c) * cache.nb[1], E);
    }
  });
}

void compute_attention(const Tensor& node, const OpContext& ctx) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int32_t* tok = static_cast<const int32_t*>(node.src[kAttnTokens]->data);
  const int32_t* cell = static_cast<const int32_t*>(node.src[kAttnCells]->data);
  const int64_t hkv = node.iparams[0];
  const float scale = node.fparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = v.ne[0] / hkv, n_cells = k.ne[1];
  const int64_t group = hq / hkv;
  const bool round_k = k.type != DType::F32;  // llama.cpp converts q to the cache type
  const bool round_v = v.type != DType::F32;
  const AttnLayout l = attn_layout(node);
  const uint64_t krow = uint64_t(type_size(k.type)), vrow = uint64_t(type_size(v.type));
  const AttnKernels* simd = k.type == DType::F16 && v.type == DType::F16 ? attn_kernels() : nullptr;
  // Only cells up to the last one in use can be visible (llama.cpp's n_kv):
  // a short prompt in a large context does not scan the whole cache.
  int64_t n_live = 0;
  for (int64_t c = n_cells; c-- > 0;)
    if (cell[2 * c + 1] >= 0) {
      n_live = c + 1;
      break;
    }

  ctx.pool.run([&](int ith, int nth) {
    uint8_t* w = ctx.work + l.per_thread * uint64_t(ith);
    float* scores = reinterpret_cast<float*>(w);
    float* qv = reinterpret_cast<float*>(w + l.off_q);
    float* row = reinterpret_cast<float*>(w + l.off_row);
    double* acc = reinterpret_cast<double*>(w + l.off_acc);
    int64_t p0, p1;
    split_range(T * hq, ith, nth, &p0, &p1);
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t t = pair / hq, h = pair % hq, g = h / group;
      const int32_t pos = tok[2 * t], seq = tok[2 * t + 1];
      const float* qsrc = reinterpret_cast<const float*>(row_ptr(q, h, t, 0));
      if (round_k)
        round_activations(k.type, qsrc, qv, dk);
      else
        for (int64_t i = 0; i < dk; ++i) qv[i] = qsrc[i];
      float mx = -INFINITY;
      for (int64_t c = 0; c < n_live; ++c) {
        if (cell[2 * c + 1] != seq || cell[2 * c] > pos) {
          scores[c] = -INFINITY;
          continue;
        }
        const uint8_t* krow_ptr = static_cast<const uint8_t*>(k.data) + uint64_t(c) * k.nb[1] + uint64_t(g * dk) * krow;
        if (simd) {
          scores[c] = simd->dot_f16(reinterpret_cast<const uint16_t*>(krow_ptr), qv, dk) * scale;
        } else {
          row_to_f32(k.type, krow_ptr, row, dk);
          double s = 0.0;
          for (int64_t i = 0; i < dk; ++i) s += double(row[i] * qv[i]);
          scores[c] = float(s) * scale;
        }
        mx = std::max(mx, scores[c]);
      }
      float* out = reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + h * dv;
      if (mx == -INFINITY) {  // no visible cell (cannot happen: a token sees itself)
        for (int64_t i = 0; i < dv; ++i) out[i] = 0.0f;
        continue;
      }
      double sum = 0.0;
      for (int64_t c = 0; c < n_live; ++c) {
        if (scores[c] == -INFINITY) continue;
        const float e = std::exp(scores[c] - mx);
        scores[c] = e;
        sum += double(e);
      }
      const float inv = float(1.0 / sum);
      if (simd) {
        float* accf = reinterpret_cast<float*>(acc);
        for (int64_t i = 0; i < dv; ++i) accf[i] = 0.0f;
        for (int64_t c = 0; c < n_live; ++c) {
          if (scores[c] == -INFINITY) continue;
          const float pc = f16_to_f32(f32_to_f16(scores[c] * inv));  // p rounded to f16, as the reference
          simd->axpy_f16(pc, reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(v.data) + uint64_t(c) * v.nb[1] +
                                                                 uint64_t(g * dv) * vrow),
                         accf, dv);
        }
        for (int64_t i = 0; i < dv; ++i) out[i] = accf[i];
        continue;
      }
      for (int64_t i = 0; i < dv; ++i) acc[i] = 0.0;
      for (int64_t c = 0; c < n_live; ++c) {
        if (scores[c] == -INFINITY) continue;
        float pc = scores[c] * inv;
        if (round_v) round_activations(v.type, &pc, &pc, 1);
        row_to_f32(v.type, static_cast<const uint8_t*>(v.data) + uint64_t(c) * v.nb[1] + uint64_t(g * dv) * vrow, row,
                   dv);
        for (int64_t i = 0; i < dv; ++i) acc[i] += double(row[i] * pc);
      }
      for (int64_t i = 0; i < dv; ++i) out[i] = float(acc[i]);
    }
  });
}

}  // namespace opal::cpu
