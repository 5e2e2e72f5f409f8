// Which CPU weights are repacked at load, and the repack itself
// (CpuBufferType; layouts in kernels/repack.h, the policy in
// docs/cpu-decode.md "Decode at the wall"). A weight is repacked when the
// selected ISA's kernel entry for its type has a packed layout and every node
// reading it understands that layout: MUL_MAT as the weight (at least one) and
// GET_ROWS as the table (a tied embedding). Anything else reading it (a view,
// MUL_MAT_ID's experts, another op) keeps the GGUF's bytes, as does a weight
// of more than one matrix.
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "core/error.h"

namespace opal {

uint8_t CpuBufferType::repack_layout(const Tensor& t, const std::vector<const Tensor*>& consumers) const {
  if (t.layout != cpu::kLayoutPlain || t.ne[2] != 1 || t.ne[3] != 1 || !t.is_contiguous()) return cpu::kLayoutPlain;
  const cpu::MatmulKernels* k = cpu::matmul_kernels(t.type);
  if (!k || k->packed_layout == cpu::kLayoutPlain || !cpu::layout_supports(k->packed_layout, t.type))
    return cpu::kLayoutPlain;
  if (t.ne[1] < cpu::layout_group_rows(k->packed_layout)) return cpu::kLayoutPlain;
  bool matmul = false;
  for (const Tensor* c : consumers) {
    if (c->op == Op::MulMat && c->src[0] == &t && c->src[1] != &t) matmul = true;
    else if (!(c->op == Op::GetRows && c->src[0] == &t)) return cpu::kLayoutPlain;
  }
  return matmul ? k->packed_layout : cpu::kLayoutPlain;
}

void CpuBufferType::repack_weight(Tensor& t, uint8_t layout) const {
  if (!t.data) fail("repack of weight '{}': it has no bytes yet", t.name);
  if (t.layout != cpu::kLayoutPlain) fail("repack of weight '{}': already in layout {}", t.name, int(t.layout));
  cpu::repack_matrix(layout, t.type, static_cast<uint8_t*>(t.data), t.ne[0], t.ne[1]);
  t.layout = layout;
}

}  // namespace opal
