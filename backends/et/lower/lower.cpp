// Graph node -> ET kernel launch (lower.h). The checks mirror the argument
// comments of backends/et/abi/et_kernel_abi.h: a node the kernels cannot take
// is refused here with a reason, so that it runs on the CPU instead of
// failing on the device.
#include "backends/et/lower/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "backends/et/abi/et_kernel_abi.h"
#include "core/dtype.h"
#include "core/error.h"
#include "graph/rope.h"

namespace opal::et {
namespace {

bool rows_contiguous(const Tensor& t) {
  return t.nb[0] == uint64_t(type_size(t.type)) && t.nb[1] >= row_bytes(t.type, t.ne[0]);
}

bool fits_i32(const Tensor& t) {
  for (int64_t n : t.ne)
    if (n <= 0 || n > INT32_MAX) return false;
  return true;
}

bool contiguous(const Tensor& t) {
  uint64_t nb = uint64_t(type_size(t.type));
  for (size_t i = 0; i < 4; ++i) {
    if (t.nb[i] != nb) return false;
    nb *= uint64_t(t.ne[i]);
  }
  return true;
}

KernelChoice no(std::string why) { return {0, std::move(why)}; }

// The matmul kernels give each hart 16-row groups of N, i.e. whole 64-byte
// lines of every output row. When N is not a multiple of 16 and there is more
// than one row, they split the output rows instead, in groups that fill whole
// lines (matmul.c, mul_mat_rows): that needs a contiguous output.
std::string check_line_rows(const Tensor& n) {
  if (n.n_rows() > 1 && (n.ne[0] * 4) % 64 != 0 &&
      (n.nb[1] != uint64_t(n.ne[0]) * 4 || n.nb[2] != n.nb[1] * uint64_t(n.ne[1]) ||
       n.nb[3] != n.nb[2] * uint64_t(n.ne[2])))
    return fmt::format(
        "output rows of {} floats (not whole 64-byte lines) in a non-contiguous output: ET splits such "
        "matmuls by output rows, which must be contiguous",
        n.ne[0]);
  return {};
}

uint32_t by_type(DType t, uint32_t f32, uint32_t f16, uint32_t q8, uint32_t q4, uint32_t q4k, uint32_t q6k) {
  switch (t) {
    case DType::F32: return f32;
    case DType::F16: return f16;
    case DType::Q8_0: return q8;
    case DType::Q4_0: return q4;
    case DType::Q4_K: return q4k;
    case DType::Q6_K: return q6k;
    default: return 0;
  }
}

// Checks every tensor of the node: F32 unless named otherwise, rows contiguous, sizes in int32.
std::string check_f32(const Tensor& node, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t) continue;
    if (t->type != DType::F32) return fmt::format("'{}' is {}: the ET kernel takes f32", t->name, dtype_name(t->type));
    if (!rows_contiguous(*t)) return fmt::format("'{}': rows not contiguous", t->name);
    if (!fits_i32(*t)) return fmt::format("'{}': a dimension past int32", t->name);
  }
  return {};
}

EtTensor desc(const Tensor* t, const DeviceAddressOf& addr) {
  EtTensor d{};
  if (!t) return d;
  d.addr = addr(*t);
  d.type = uint32_t(t->type);
  for (int i = 0; i < 4; i++) {
    d.ne[i] = int32_t(t->ne[size_t(i)]);
    d.nb[i] = t->nb[size_t(i)];
  }
  return d;
}

template <class Args>
std::vector<uint8_t> blob(Args& a, uint32_t kernel_id, const HartSet& h, DevAddr scratch, uint64_t scratch_bytes) {
  a.h.scratch = scratch;
  a.h.scratch_bytes = scratch ? scratch_bytes : 0;
  a.h.abi_version = ET_ABI_VERSION;
  a.h.kernel_id = kernel_id;
  a.h.shire_mask = h.shire_mask;
  a.h.minion_mask = h.minion_mask;
  a.h.threads = h.threads;
  a.h.blob_bytes = sizeof(Args);
  std::vector<uint8_t> b(sizeof(Args));
  std::memcpy(b.data(), &a, sizeof(Args));
  return b;
}

}  // namespace

KernelChoice choose_kernel(const Tensor& n, const TensorRows& tensor_rows) {
  const Tensor* s0 = n.src[0];
  const Tensor* s1 = n.src[1];
  const Tensor* s2 = n.src[2];
  std::string r;
  switch (n.op) {
    case Op::Add:
    case Op::Mul:
    case Op::Div:
      if (!(r = check_f32(n, {s0, s1, &n})).empty()) return no(r);
      for (int i = 0; i < 4; i++)
        if (s0->ne[size_t(i)] % s1->ne[size_t(i)] != 0)
          return no(
              fmt::format("'{}' {} does not broadcast over {}", s1->name, s1->shape_string(), s0->shape_string()));
      if (s1->ne[0] != 1 && s1->ne[0] != s0->ne[0])
        return no(fmt::format("'{}' rows of {} broadcast within a row: ET takes a whole row or one value", s1->name,
                              s1->ne[0]));
      if (n.ne != s0->ne) return no("output shape differs from source 0");
      return {n.op == Op::Add   ? uint32_t(ET_K_ADD_F32)
              : n.op == Op::Mul ? uint32_t(ET_K_MUL_F32)
                                : uint32_t(ET_K_DIV_F32),
              {}};
    case Op::Scale:
      if (!(r = check_f32(n, {s0, &n})).empty()) return no(r);
      if (n.ne != s0->ne) return no("output shape differs from the source");
      return {ET_K_SCALE_F32, {}};
    case Op::Softmax:
    case Op::SumRows:
      if (!(r = check_f32(n, {s0, &n})).empty()) return no(r);
      if (!contiguous(n)) return no("output not contiguous");
      return {n.op == Op::Softmax ? uint32_t(ET_K_SOFTMAX_F32) : uint32_t(ET_K_SUM_ROWS_F32), {}};
    case Op::Cpy:
      if (!(r = check_f32(n, {s0})).empty()) return no(r);
      if (n.type != DType::F32 && n.type != DType::F16)
        return no(fmt::format("copy to {}: ET converts f32 rows to f32 or f16", dtype_name(n.type)));
      if (!contiguous(n) || n.ne != s0->ne) return no("output not contiguous or of another shape");
      return {ET_K_CPY_F32, {}};
    case Op::TopK:
      if (!(r = check_f32(n, {s0})).empty()) return no(r);
      if (n.type != DType::I32 || !contiguous(n)) return no("output not contiguous i32");
      if (s0->ne[0] > 4096) return no(fmt::format("rows of {} values: ET's TOP_K takes at most 4096", s0->ne[0]));
      return {ET_K_TOP_K_F32, {}};
    case Op::RmsNorm:
      if (!(r = check_f32(n, {s0, &n})).empty()) return no(r);
      return {ET_K_RMS_NORM_F32, {}};
    case Op::Silu:
      if (!(r = check_f32(n, {s0, &n})).empty()) return no(r);
      if (n.ne != s0->ne) return no("output shape differs from the source");
      return {ET_K_SILU_F32, {}};
    case Op::Swiglu:
      if (!(r = check_f32(n, {s0, s1, &n})).empty()) return no(r);
      if (n.ne != s0->ne || n.ne != s1->ne) return no("gate, up and output shapes differ");
      return {ET_K_SWIGLU_F32, {}};
    case Op::MulMat: {
      uint32_t k = by_type(s0->type, ET_K_MUL_MAT_F32, ET_K_MUL_MAT_F16, ET_K_MUL_MAT_Q8_0, ET_K_MUL_MAT_Q4_0,
                           ET_K_MUL_MAT_Q4_K, ET_K_MUL_MAT_Q6_K);
      if (!k)
        return no(
            fmt::format("weight type {}: ET multiplies f32, f16, q8_0, q4_0, q4_k and q6_k", dtype_name(s0->type)));
      if (!rows_contiguous(*s0) || !fits_i32(*s0)) return no(fmt::format("'{}': rows not contiguous", s0->name));
      if (!(r = check_f32(n, {s1, &n})).empty()) return no(r);
      if (s1->ne[2] % s0->ne[2] != 0 || s1->ne[3] != s0->ne[3])
        return no(fmt::format("batch {} of '{}' is not a multiple of the weight's {}", s1->ne[2], s1->name, s0->ne[2]));
      if (!(r = check_line_rows(n)).empty()) return no(r);
      // prompts through the tensor unit: 16 weight rows x 16 activation rows per TensorFMA tile,
      // each minion whole 64-byte lines of every output row
      // (F16: the weight rows go straight into the scratchpad, so whole 64-byte lines: K % 32 == 0)
      const bool tu_type = k == ET_K_MUL_MAT_Q8_0 || k == ET_K_MUL_MAT_Q4_0 ||
                           (k == ET_K_MUL_MAT_F16 && s0->ne[0] % 32 == 0 && s0->nb[2] % 64 == 0 && s0->nb[3] % 64 == 0);
      const uint32_t rows = k == ET_K_MUL_MAT_Q8_0   ? tensor_rows.q8_0
                            : k == ET_K_MUL_MAT_Q4_0 ? tensor_rows.q4_0
                                                     : tensor_rows.f16;
      if (rows && tu_type && uint64_t(s1->ne[1]) >= rows && n.ne[0] % 16 == 0 && n.nb[0] == 4 && n.nb[1] % 64 == 0 &&
          n.nb[2] % 64 == 0 && n.nb[3] % 64 == 0)
        return {k == ET_K_MUL_MAT_Q8_0   ? uint32_t(ET_K_MUL_MAT_TU_Q8_0)
                : k == ET_K_MUL_MAT_Q4_0 ? uint32_t(ET_K_MUL_MAT_TU_Q4_0)
                                         : uint32_t(ET_K_MUL_MAT_TU_F16),
                {}};
      return {k, {}};
    }
    case Op::MulMatId: {
      uint32_t k = by_type(s0->type, ET_K_MUL_MAT_ID_F32, ET_K_MUL_MAT_ID_F16, ET_K_MUL_MAT_ID_Q8_0,
                           ET_K_MUL_MAT_ID_Q4_0, ET_K_MUL_MAT_ID_Q4_K, ET_K_MUL_MAT_ID_Q6_K);
      if (!k)
        return no(
            fmt::format("expert type {}: ET multiplies f32, f16, q8_0, q4_0, q4_k and q6_k", dtype_name(s0->type)));
      if (!rows_contiguous(*s0) || !fits_i32(*s0)) return no(fmt::format("'{}': rows not contiguous", s0->name));
      if (!(r = check_f32(n, {s1, &n})).empty()) return no(r);
      if (s2->type != DType::I32) return no("expert ids are not i32");
      if (!(r = check_line_rows(n)).empty()) return no(r);
      return {k, {}};
    }
    case Op::GetRows: {
      uint32_t k = by_type(s0->type, ET_K_GET_ROWS_F32, ET_K_GET_ROWS_F16, ET_K_GET_ROWS_Q8_0, ET_K_GET_ROWS_Q4_0,
                           ET_K_GET_ROWS_Q4_K, ET_K_GET_ROWS_Q6_K);
      if (!k)
        return no(
            fmt::format("table type {}: ET reads f32, f16, q8_0, q4_0, q4_k and q6_k rows", dtype_name(s0->type)));
      if (!rows_contiguous(*s0) || !fits_i32(*s0)) return no(fmt::format("'{}': rows not contiguous", s0->name));
      if (s1->type != DType::I32) return no("row ids are not i32");
      if (!(r = check_f32(n, {&n})).empty()) return no(r);
      return {k, {}};
    }
    case Op::Rope: {
      if (!(r = check_f32(n, {s0, &n, s2})).empty()) return no(r);
      if (s1->type != DType::I32) return no("positions are not i32");
      const RopeParams p = rope_params_of(n);
      if (p.mode != RopeMode::Normal && p.mode != RopeMode::Neox)
        return no(fmt::format("rope mode {}: ET runs normal and NeoX", int(p.mode)));
      return {ET_K_ROPE_F32, {}};
    }
    case Op::Attention: {
      const Tensor* k = n.src[kAttnK];
      const Tensor* v = n.src[kAttnV];
      if (k->type != v->type || (k->type != DType::F16 && k->type != DType::F32))
        return no(
            fmt::format("KV cache {}/{}: ET attends over f16 or f32 caches", dtype_name(k->type), dtype_name(v->type)));
      if (!(r = check_f32(n, {n.src[kAttnQ], &n})).empty()) return no(r);
      if (!rows_contiguous(*k) || !rows_contiguous(*v)) return no("KV cache rows not contiguous");
      return {k->type == DType::F16 ? uint32_t(ET_K_ATTENTION_F16) : uint32_t(ET_K_ATTENTION_F32), {}};
    }
    case Op::KvStore:
      if (s0->type != DType::F16 && s0->type != DType::F32)
        return no(fmt::format("cache type {}: ET stores into f16 or f32 caches", dtype_name(s0->type)));
      if (!(r = check_f32(n, {s1})).empty()) return no(r);
      if (s2->type != DType::I32) return no("cell indices are not i32");
      if (row_bytes(s0->type, s0->ne[0]) % 64 != 0)
        return no(fmt::format("cache rows of {} bytes: ET stores whole 64-byte lines per cell",
                              row_bytes(s0->type, s0->ne[0])));
      if (!rows_contiguous(*s0)) return no("cache rows not contiguous");
      return {s0->type == DType::F16 ? uint32_t(ET_K_KV_STORE_F16) : uint32_t(ET_K_KV_STORE_F32), {}};
    default: return no(fmt::format("no ET kernel for {}", op_name(n.op)));
  }
}

std::vector<const Tensor*> kernel_sources(const Tensor& n) {
  std::vector<const Tensor*> v;
  for (const Tensor* s : n.src)
    if (s) v.push_back(s);
  return v;
}

bool writes_in_place(const Tensor& n) { return n.op == Op::KvStore; }

bool uses_tensor_unit(uint32_t kernel_id) {
  return kernel_id == ET_K_MUL_MAT_TU_Q8_0 || kernel_id == ET_K_MUL_MAT_TU_Q4_0 || kernel_id == ET_K_MUL_MAT_TU_F16;
}

HartSet fit_harts(const Tensor& n, const HartSet& all) {
  const uint64_t lines = std::max<uint64_t>(1, (n.nbytes() + 63) / 64);
  if (lines >= all.count()) return all;
  const unsigned per_minion = all.threads;
  const unsigned minions = unsigned(std::popcount(all.minion_mask));
  uint64_t want_minions = (lines + per_minion - 1) / per_minion;  // < minions x shires
  HartSet h = all;
  h.shire_mask = 0;
  for (uint64_t s = all.shire_mask; s && want_minions; s &= s - 1) {  // whole shires first
    h.shire_mask |= s & (~s + 1);
    if (want_minions <= minions) {
      if (h.shire_mask == (s & (~s + 1))) {  // one shire: only the minions needed
        uint32_t m = 0;
        for (uint32_t bits = all.minion_mask; bits && want_minions; bits &= bits - 1, --want_minions)
          m |= bits & (~bits + 1);
        h.minion_mask = m;
      }
      break;
    }
    want_minions -= minions;
  }
  return h;
}

uint64_t scratch_bytes(const Tensor& n, uint32_t kid, const HartSet& h) {
  // RMS_NORM splits a row over every hart when there are fewer rows than harts (norm.c).
  if (kid == ET_K_RMS_NORM_F32 && n.n_rows() < int64_t(h.count())) return 64 * (2 * uint64_t(h.count()) + 1);
  return 0;
}

KernelCall build_call(const Tensor& n, uint32_t kid, const HartSet& h, const DeviceAddressOf& addr, DevAddr scratch) {
  const uint64_t sbytes = scratch_bytes(n, kid, h);
  KernelCall c;
  c.kernel_id = kid;
  c.name = et_kernel_name(kid) ? et_kernel_name(kid) : "?";
  const Tensor* s0 = n.src[0];
  const Tensor* s1 = n.src[1];
  const Tensor* s2 = n.src[2];
  switch (n.op) {
    case Op::Add:
    case Op::Mul:
    case Op::Div:
    case Op::Swiglu: {
      EtBinaryArgs a{};
      a.a = desc(s0, addr);
      a.b = desc(s1, addr);
      a.dst = desc(&n, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::Scale: {
      EtScaleArgs a{};
      a.src = desc(s0, addr);
      a.dst = desc(&n, addr);
      a.scale = n.fparams[0];
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::TopK: {
      EtTopKArgs a{};
      a.src = desc(s0, addr);
      a.dst = desc(&n, addr);
      a.k = int32_t(n.ne[0]);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::Softmax:
    case Op::SumRows:
    case Op::Cpy:
    case Op::Silu: {
      EtUnaryArgs a{};
      a.src = desc(s0, addr);
      a.dst = desc(&n, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::RmsNorm: {
      EtRmsNormArgs a{};
      a.src = desc(s0, addr);
      a.dst = desc(&n, addr);
      a.eps = n.fparams[0];
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::MulMat: {
      EtMulMatArgs a{};
      a.w = desc(s0, addr);
      a.x = desc(s1, addr);
      a.dst = desc(&n, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::MulMatId: {
      EtMulMatIdArgs a{};
      a.w = desc(s0, addr);
      a.x = desc(s1, addr);
      a.ids = desc(s2, addr);
      a.dst = desc(&n, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::GetRows: {
      EtGetRowsArgs a{};
      a.table = desc(s0, addr);
      a.ids = desc(s1, addr);
      a.dst = desc(&n, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::Rope: {
      const RopeParams p = rope_params_of(n);
      EtRopeArgs a{};
      a.src = desc(s0, addr);
      a.pos = desc(s1, addr);
      a.freq_factors = desc(s2, addr);
      a.dst = desc(&n, addr);
      a.n_rot = p.n_rot;
      a.mode = int32_t(p.mode);
      // As graph/rope.cpp (rope_cos_sin) computes them, once on the host.
      a.theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
      a.freq_scale = p.freq_scale;
      a.ext_factor = p.ext_factor;
      float mscale = p.attn_factor;
      if (p.ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
      if (p.unit_magnitude) mscale = 1.0f;
      a.mscale = mscale;
      a.corr_low = p.corr_low;
      a.corr_high = p.corr_high;
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::Attention: {
      EtAttentionArgs a{};
      a.q = desc(n.src[kAttnQ], addr);
      a.k = desc(n.src[kAttnK], addr);
      a.v = desc(n.src[kAttnV], addr);
      a.tokens = desc(n.src[kAttnTokens], addr);
      a.cells = desc(n.src[kAttnCells], addr);
      a.dst = desc(&n, addr);
      a.n_head_kv = n.iparams[0];
      a.scale = n.fparams[0];
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    case Op::KvStore: {
      EtKvStoreArgs a{};
      a.cache = desc(s0, addr);
      // The graph's rows (contiguous, E * T elements, e.g. [head_dim, n_head_kv, T]) as the kernel's [E, T].
      a.src = desc(s1, addr);
      a.src.ne[0] = int32_t(s0->ne[0]);
      a.src.ne[1] = int32_t(s2->ne[0]);
      a.src.ne[2] = a.src.ne[3] = 1;
      a.src.nb[1] = uint64_t(s0->ne[0]) * 4;
      a.src.nb[2] = a.src.nb[3] = a.src.nb[1] * uint64_t(s2->ne[0]);
      a.cells = desc(s2, addr);
      c.args = blob(a, kid, h, scratch, sbytes);
      break;
    }
    default: fail("et: no ET kernel for {} ('{}')", op_name(n.op), n.name);
  }
  return c;
}

}  // namespace opal::et
