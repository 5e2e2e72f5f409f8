// TOP_K: the indices of the k largest values of each f32 row, largest first
// (ties: lower index first), as I32. Used for MoE expert selection.
#include <algorithm>
#include <numeric>

#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {

void compute_top_k(const Tensor& node, const OpContext& ctx) {
  const Tensor& x = *node.src[0];
  const int k = node.iparams[0];
  const int64_t n = x.ne[0];
  ctx.pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_range(x.n_rows(), ith, nth, &r0, &r1);
    int32_t idx[1024];
    for (int64_t r = r0; r < r1; ++r) {
      const float* v = reinterpret_cast<const float*>(row_ptr_flat(x, r));
      int32_t* out = reinterpret_cast<int32_t*>(row_ptr_flat(node, r));
      std::iota(idx, idx + n, 0);
      std::partial_sort(idx, idx + k, idx + n,
                        [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
      std::copy(idx, idx + k, out);
    }
  });
}

}  // namespace opal::cpu
