#include "graph/perf/node_cost.h"

#include <algorithm>

namespace opal {
namespace {

uint64_t src_bytes(const Tensor& node) {
  uint64_t b = 0;
  for (const Tensor* s : node.src)
    if (s) b += s->nbytes();
  return b;
}

}  // namespace

NodeCost node_cost(const Tensor& node) {
  NodeCost c;
  const double n = double(node.n_elements());
  switch (node.op) {
    case Op::None:
    case Op::View:
    case Op::Count: return c;
    case Op::MulMat: {
      const Tensor& w = *node.src[0];
      c.flops = 2.0 * double(w.ne[0]) * n;  // K multiply-adds per output element
      c.bytes = src_bytes(node) + node.nbytes();
      return c;
    }
    case Op::MulMatId: {
      const Tensor& w = *node.src[0];
      const Tensor& x = *node.src[1];
      const Tensor& ids = *node.src[2];
      c.flops = 2.0 * double(w.ne[0]) * n;
      const int64_t experts_read = std::min<int64_t>(w.ne[2], ids.n_elements());
      const uint64_t per_expert = w.ne[2] ? w.nbytes() / uint64_t(w.ne[2]) : 0;
      c.bytes = per_expert * uint64_t(experts_read) + x.nbytes() + ids.nbytes() + node.nbytes();
      return c;
    }
    case Op::Attention: {
      const Tensor& q = *node.src[kAttnQ];
      const Tensor& k = *node.src[kAttnK];
      const double dk = double(q.ne[0]), hq = double(q.ne[1]), t = double(q.ne[2]);
      const double cells = double(k.ne[1]);
      const double dv = double(node.ne[0]) / std::max(1.0, hq);
      c.flops = 2.0 * (dk + dv) * hq * t * cells + 5.0 * hq * t * cells;  // QK^T, PV, softmax
      c.bytes = src_bytes(node) + node.nbytes();
      return c;
    }
    case Op::RmsNorm: c.flops = 4.0 * n; break;     // square, sum, scale, multiply
    case Op::Softmax: c.flops = 5.0 * n; break;     // max, subtract, exp, sum, divide
    case Op::Silu: c.flops = 4.0 * n; break;
    case Op::Swiglu: c.flops = 5.0 * n; break;
    case Op::Rope: c.flops = 6.0 * n; break;        // 4 multiplies, 2 adds per pair
    case Op::SumRows: c.flops = double(node.src[0]->n_elements()); break;
    case Op::Mul:
    case Op::Add:
    case Op::Div:
    case Op::Scale: c.flops = n; break;
    case Op::TopK: c.flops = double(node.src[0]->n_elements()); break;  // one comparison per input
    case Op::GetRows:
    case Op::KvStore:
    case Op::Cpy: c.flops = 0; break;
  }
  if (node.op == Op::GetRows) {  // reads only the selected rows of the table
    const Tensor& table = *node.src[0];
    const uint64_t row = table.ne[1] ? table.nb[1] : 0;
    c.bytes = row * uint64_t(node.ne[1] * node.ne[2]) + node.src[1]->nbytes() + node.nbytes();
    return c;
  }
  if (node.op == Op::KvStore) {  // writes T columns of the cache, not the whole cache
    const Tensor& x = *node.src[1];
    c.bytes = x.nbytes() + node.src[2]->nbytes() +
              uint64_t(x.ne[1]) * uint64_t(x.ne[0]) * uint64_t(type_size(node.src[0]->type)) /
                  uint64_t(block_size(node.src[0]->type));
    return c;
  }
  c.bytes = src_bytes(node) + node.nbytes();
  return c;
}

}  // namespace opal
