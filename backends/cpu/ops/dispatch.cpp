// What the CPU backend supports, the scratch each op needs, and the switch
// from op to its implementation.
#include <fmt/format.h>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"

namespace opal::cpu {
namespace {

bool rows_f32(const Tensor* t) { return t && t->type == DType::F32 && t->nb[0] == 4; }
bool i32(const Tensor* t) { return t && t->type == DType::I32 && t->is_contiguous(); }
bool cache_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
// A KV cache's: the float types, and q8_0 / q4_0 (a quantized V is read by the tiled attention only).
bool kv_type(DType t) { return cache_type(t) || t == DType::Q8_0 || t == DType::Q4_0; }
bool kv_quantized(DType t) { return t == DType::Q8_0 || t == DType::Q4_0; }

Support need(bool ok, const char* why) { return ok ? Support::yes() : Support::no(why); }

Support supports_mul_mat(const Tensor& node) {
  const Tensor* w = node.src[0];
  const Tensor* x = node.src[1];
  if (!matmul_kernels(w->type))
    return Support::no(fmt::format("no CPU matmul kernel for weight type {}", dtype_name(w->type)));
  if (w->ne[0] % block_size(w->type) != 0)
    return Support::no(fmt::format("row length {} is not a whole number of {} blocks", w->ne[0], dtype_name(w->type)));
  if (w->nb[0] != uint64_t(type_size(w->type))) return Support::no("weight rows are not contiguous");
  if (!rows_f32(x)) return Support::no("activations must be f32 rows");
  if (node.op == Op::MulMatId && !i32(node.src[2])) return Support::no("expert ids must be contiguous i32");
  return Support::yes();
}

}  // namespace

Support supports(const Tensor& node) {
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::None:
    case Op::View: return Support::yes();
    case Op::GetRows:
      if (!can_read_as_f32(a->type))
        return Support::no(fmt::format("no reference dequantizer for {}", dtype_name(a->type)));
      return need(i32(node.src[1]) && a->nb[0] == uint64_t(type_size(a->type)), "needs contiguous rows and i32 ids");
    case Op::RmsNorm:
    case Op::Softmax:
    case Op::SumRows:
    case Op::Scale:
    case Op::Silu:
    case Op::Gelu: return need(rows_f32(a), "input must be f32 rows");
    case Op::Mul:
    case Op::Add:
    case Op::Div:
    case Op::Swiglu:
    case Op::Geglu: return need(rows_f32(a) && rows_f32(node.src[1]), "inputs must be f32 rows");
    case Op::Cpy:
      return need(cache_type(a->type) && cache_type(node.type), "CPY converts between f32, f16 and bf16 only");
    case Op::MulMat:
    case Op::MulMatId: return supports_mul_mat(node);
    case Op::Rope: return need(rows_f32(a) && node.iparams[0] <= 1024, "input must be f32 rows, n_rot <= 1024");
    case Op::Attention:
      if (kv_quantized(node.src[kAttnV]->type) && !node.iparams[2])
        return Support::no("a q8_0 / q4_0 V cache is read by the tiled (flash) attention only");
      return need(rows_f32(a) && kv_type(node.src[kAttnK]->type) && kv_type(node.src[kAttnV]->type) &&
                      node.src[kAttnK]->nb[0] == uint64_t(type_size(node.src[kAttnK]->type)) &&
                      node.src[kAttnV]->nb[0] == uint64_t(type_size(node.src[kAttnV]->type)) &&
                      i32(node.src[kAttnTokens]) && i32(node.src[kAttnCells]),
                  "needs f32 q and an f32/f16/bf16/q8_0/q4_0 cache");
    case Op::KvStore:
      return need(kv_type(a->type) && node.src[1]->type == DType::F32 && a->ne[0] % block_size(a->type) == 0,
                  "cache must be f32/f16/bf16/q8_0/q4_0 (whole blocks per row)");
    case Op::TopK: return need(rows_f32(a) && a->ne[0] <= 1024, "input must be f32 rows of at most 1024");
    case Op::Norm:
      return need(rows_f32(a) && (!node.src[1] || rows_f32(node.src[1])) && (!node.src[2] || rows_f32(node.src[2])),
                  "input, weight and bias must be f32 rows");
    case Op::L2Norm:
    case Op::Unary: return need(rows_f32(a), "input must be f32 rows");
    case Op::TokenShift:
      return need(a->is_contiguous() && node.src[1]->is_contiguous() && i32(node.src[2]),
                  "needs contiguous x and state and i32 slots");
    case Op::Wkv7: return need(i32(node.src[kWkvSlot]), "needs i32 slots");
    case Op::Lerp:
      return need(a->is_contiguous() && node.src[1]->is_contiguous() && node.src[2]->is_contiguous(),
                  "needs contiguous x, p and mix");
    case Op::Wkv7Inputs: {
      bool ok = true;
      for (int i = kWinK; i <= kWinKa; ++i) ok = ok && node.src[i]->is_contiguous();
      return need(ok && node.iparams[0] > 0 && a->ne[0] % node.iparams[0] == 0,
                  "needs contiguous inputs and a head size that divides C");
    }
    case Op::Wkv7Output: {
      bool ok = true;
      for (int i = 0; i < 6; ++i) ok = ok && node.src[i]->is_contiguous();
      return need(ok && node.iparams[0] > 0 && a->ne[0] % node.iparams[0] == 0,
                  "needs contiguous inputs and a head size that divides C");
    }
    case Op::Wkv7ValueMix: {
      bool ok = true;
      for (int i = 0; i < 4; ++i) ok = ok && node.src[i]->is_contiguous();
      return need(ok && node.src[3]->n_elements() == a->ne[0], "needs contiguous inputs and v0 of C elements");
    }
    case Op::Count: break;
  }
  return Support::no("unknown op");
}

uint64_t work_size(const Tensor& node, int n_threads) {
  switch (node.op) {
    case Op::MulMat:
    case Op::MulMatId: return mul_mat_work_size(node, n_threads);
    case Op::Attention: return attention_work_size(node, n_threads);
    default: return 0;
  }
}

void compute(const Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::None:
    case Op::View: return;
    case Op::GetRows: compute_get_rows(node, ctx); return;
    case Op::RmsNorm:
    case Op::Softmax:
    case Op::SumRows: compute_norm(node, ctx); return;
    case Op::Mul:
    case Op::Add:
    case Op::Div:
    case Op::Scale:
    case Op::Silu:
    case Op::Swiglu:
    case Op::Gelu:
    case Op::Geglu:
    case Op::Cpy: compute_elementwise(node, ctx); return;
    case Op::MulMat: compute_mul_mat(node, ctx); return;
    case Op::MulMatId: compute_mul_mat_id(node, ctx); return;
    case Op::Rope: compute_rope(node, ctx); return;
    case Op::Attention: compute_attention(node, ctx); return;
    case Op::KvStore: compute_kv_store(node, ctx); return;
    case Op::TopK: compute_top_k(node, ctx); return;
    case Op::Norm:
    case Op::L2Norm:
    case Op::Unary: compute_rwkv_rows(node, ctx); return;
    case Op::TokenShift: compute_token_shift(node, ctx); return;
    case Op::Wkv7: compute_wkv7(node, ctx); return;
    case Op::Lerp: compute_lerp(node, ctx); return;
    case Op::Wkv7Inputs: compute_wkv7_inputs(node, ctx); return;
    case Op::Wkv7Output: compute_wkv7_output(node, ctx); return;
    case Op::Wkv7ValueMix: compute_wkv7_value_mix(node, ctx); return;
    case Op::Count: return;
  }
}

const char* kernel_name(const Tensor& node) {
  if (node.op == Op::MulMat || node.op == Op::MulMatId) {
    const MatmulKernels* k = matmul_kernels(node.src[0]->type);
    return k ? k->name : "none";
  }
  return "ref";
}

}  // namespace opal::cpu
