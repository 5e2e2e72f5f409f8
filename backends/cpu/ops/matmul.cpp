// MUL_MAT and MUL_MAT_ID on the CPU, through the per-dtype kernel table
// (kernels/matmul_kernels.h). Two phases per node:
//   1. convert every activation row to the kernel's packed format (the
//      vec_dot type), rows split across threads, into the plan's scratch;
//   2. the kernel's gemm over a slice of weight rows per thread.
// Scratch layout: [converted activations][per-thread kernel scratch].
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

struct Layout {
  uint64_t act_bytes = 0;     // all converted activation rows
  uint64_t scratch_each = 0;  // per thread
};

Layout layout(const Tensor& node, int n_threads) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const MatmulKernels* k = matmul_kernels(w.type);
  Layout l;
  if (!k) return l;
  l.act_bytes = align64(k->act_row_bytes(w.ne[0]) * uint64_t(x.n_rows()));
  l.scratch_each = align64(uint64_t(k->scratch_floats(w.ne[0])) * sizeof(float));
  return l;
}

void convert_all(const MatmulKernels& k, const Tensor& x, uint8_t* act, uint64_t act_row, const OpContext& ctx) {
  ctx.pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_range(x.n_rows(), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      k.convert_act(k.act_type, reinterpret_cast<const float*>(row_ptr_flat(x, r)), act + uint64_t(r) * act_row,
                    x.ne[0]);
  });
}

}  // namespace

uint64_t mul_mat_work_size(const Tensor& node, int n_threads) {
  Layout l = layout(node, n_threads);
  return l.act_bytes + l.scratch_each * uint64_t(n_threads);
}

void compute_mul_mat(const Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const MatmulKernels& k = *matmul_kernels(w.type);
  const Layout l = layout(node, ctx.pool.size());
  const uint64_t act_row = k.act_row_bytes(w.ne[0]);
  uint8_t* act = ctx.work;
  convert_all(k, x, act, act_row, ctx);

  const int64_t N = w.ne[1], T = x.ne[1];
  const int64_t r2 = x.ne[2] / w.ne[2], r3 = x.ne[3] / w.ne[3];
  ctx.pool.run([&](int ith, int nth) {
    int64_t n0, n1;
    split_range(N, ith, nth, &n0, &n1);
    if (n0 >= n1) return;
    for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < x.ne[2]; ++i2) {
        GemmArgs a;
        a.w = static_cast<const uint8_t*>(w.data) + (i2 / r2) * w.nb[2] + (i3 / r3) * w.nb[3];
        a.w_row_bytes = w.nb[1];
        a.k = w.ne[0];
        a.row_begin = n0;
        a.row_end = n1;
        a.act = act + uint64_t((i2 + i3 * x.ne[2]) * T) * act_row;
        a.act_row_bytes = act_row;
        a.n_act = T;
        a.out = reinterpret_cast<float*>(row_ptr(node, 0, i2, i3));
        a.out_stride = int64_t(node.nb[1] / sizeof(float));
        a.scratch = reinterpret_cast<float*>(ctx.work + l.act_bytes + l.scratch_each * uint64_t(ith));
        k.gemm(a);
      }
  });
}

void compute_mul_mat_id(const Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const MatmulKernels& k = *matmul_kernels(w.type);
  const Layout l = layout(node, ctx.pool.size());
  const uint64_t act_row = k.act_row_bytes(w.ne[0]);
  uint8_t* act = ctx.work;
  convert_all(k, x, act, act_row, ctx);

  const int64_t N = w.ne[1], n_used = ids.ne[0], T = ids.ne[1], S = x.ne[1], E = w.ne[2];
  ctx.pool.run([&](int ith, int nth) {
    int64_t n0, n1;
    split_range(N, ith, nth, &n0, &n1);
    if (n0 >= n1) return;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < n_used; ++j) {
        const int32_t e = *reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(ids.data) + j * ids.nb[0] +
                                                            t * ids.nb[1]);
        float* out = reinterpret_cast<float*>(row_ptr(node, j, t, 0));
        if (e < 0 || e >= E) {  // cannot happen with TOP_K ids; never read out of bounds
          for (int64_t n = n0; n < n1; ++n) out[n] = 0.0f;
          continue;
        }
        GemmArgs a;
        a.w = static_cast<const uint8_t*>(w.data) + uint64_t(e) * w.nb[2];
        a.w_row_bytes = w.nb[1];
        a.k = w.ne[0];
        a.row_begin = n0;
        a.row_end = n1;
        a.act = act + uint64_t((j % S) + t * S) * act_row;
        a.act_row_bytes = act_row;
        a.n_act = 1;
        a.out = out;
        a.out_stride = 0;
        a.scratch = reinterpret_cast<float*>(ctx.work + l.act_bytes + l.scratch_each * uint64_t(ith));
        k.gemm(a);
      }
  });
}

}  // namespace opal::cpu
