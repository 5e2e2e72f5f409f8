// GET_ROWS: out[:, i, b] = to_f32(table[:, ids[i, b], b]). Used for token
// embeddings (any weight dtype, a row dequantized at a time) and MoE router
// weights. An id outside the table gives a zero row (ids are validated by the
// runtime before a run; this only guards memory). A table repacked at load
// (a tied embedding that is also the output matrix: Tensor::layout,
// kernels/repack.h) has each row unpacked to its plain bytes first.
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"
#include "core/error.h"

namespace opal::cpu {

void compute_get_rows(const Tensor& node, const OpContext& ctx) {
  const Tensor& table = *node.src[0];
  const Tensor& ids = *node.src[1];
  const int64_t n = ids.ne[0], B = ids.ne[1];
  if (table.layout != kLayoutPlain && (table.ne[2] != 1 || table.ne[3] != 1 || !table.is_contiguous()))
    fail("GET_ROWS '{}': table '{}' in layout {} must be one contiguous matrix, found {}", node.name, table.name,
         layout_name(table.layout), table.shape_string());
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    std::vector<uint8_t> plain(table.layout != kLayoutPlain ? table.nb[1] : 0);
    int64_t r0, r1;
    split_range(n * B, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % n, b = r / n;
      const int32_t id =
          *reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(ids.data) + i * ids.nb[0] + b * ids.nb[1]);
      float* out = reinterpret_cast<float*>(row_ptr(node, i, b, 0));
      if (id < 0 || id >= table.ne[1]) {
        for (int64_t k = 0; k < node.ne[0]; ++k) out[k] = 0.0f;
        continue;
      }
      if (table.layout != kLayoutPlain) {
        unpack_rows(table.layout, table.type, static_cast<const uint8_t*>(table.data), table.ne[0], table.ne[1], id,
                    id + 1, plain.data());
        row_to_f32(table.type, plain.data(), out, table.ne[0]);
        continue;
      }
      row_to_f32(table.type, row_ptr(table, id, b, 0), out, table.ne[0]);
    }
  });
}

}  // namespace opal::cpu
