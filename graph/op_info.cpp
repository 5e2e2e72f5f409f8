// The op-info table: one row per Op, in enum order, pinned at compile time.
//
// Costs (graph/op_info.h, NodeCost): FLOPs per output element RMS_NORM 4
// (square, sum, scale, multiply), SOFTMAX 5 (max, subtract, exp, sum,
// divide), SILU 4, SWIGLU 5, ROPE 6 (4 multiplies, 2 adds per pair), MUL /
// ADD / DIV / SCALE 1, copies 0; SUM_ROWS and TOP_K one per input element
// (a sum, a comparison); MUL_MAT_ID reads the experts it uses (at most n_used * T of
// them); ATTENTION counts every cell of the cache it scans (an upper bound:
// causal masking skips some); GET_ROWS reads only the selected rows; KV_STORE
// writes T columns of the cache, not the whole cache. Views and leaves cost
// nothing.
//
// Tolerances (NMSE against the CPU reference; backends/shadow/tolerance.h):
//   - elementwise ops, norms, softmax, rope in f32: a few ulp of rounding and
//     differently ordered sums: 1e-7 (ggml's default);
//   - MUL_MAT / MUL_MAT_ID: activations are rounded to the weight type's
//     vec_dot type (q8_0, q8_K, f16, bf16) on one side and possibly not on the
//     other; a q8 rounding error is at most 1/254 of a block's max, so the
//     relative error of a dot product stays below ~1e-2 and its square below
//     1e-4; 5e-4 is ggml's limit for matmuls;
//   - ATTENTION with an f16 cache rounds q and the probabilities to f16:
//     5e-4; f32 cache: 1e-6;
//   - CPY / KV_STORE to f16 or bf16: one rounding of the output type: bf16
//     has 8 significant bits (relative error 2^-9, squared ~4e-6): 1e-5;
//     f32 to f32: exact (1e-12);
//   - GET_ROWS copies dequantized rows: exact (1e-12); TOP_K indices: exact (0).
//
// RWKV-7 ops (issue 17): NORM 5 FLOPs per element (mean, subtract, square,
// sum, scale; one more each for its optional weight and bias), L2_NORM 3 (square, sum, scale), UNARY 4 (sigmoid's exp,
// add, divide; tanh, exp and relu^2 counted alike), TOKEN_SHIFT a copy (0 FLOPs; it reads x and writes y, and touches
// one state column per slot), RWKV_WKV7 10 * S FLOPs per output element (per key index: a multiply-add for sa, three
// multiplies and two adds for the state, a multiply-add for y) and its bytes the inputs, the state of the slots it
// reads and writes, and y. Tolerances: NORM, L2_NORM, UNARY as the f32 row ops (1e-7); TOKEN_SHIFT copies (1e-12);
// RWKV_WKV7 sums S products per token over a recurrence whose rounding compounds over the tokens: 1e-6.
//   - GELU / GEGLU: llama.cpp's CPU backend reads GELU from an f16 table (the
//     input rounded to f16, the result rounded to f16: relative error up to
//     2^-11 each, squared ~5e-7); a backend that computes the tanh form in f32
//     differs by that much from the reference: 1e-5.
// GELU costs 8 FLOPs per element (x^3, two multiply-adds, tanh counted as 4,
// the final product), GEGLU one more (the product with the up projection).
// Gemma's soft-cap tanh is UNARY(tanh).
// LERP (RWKV-7's token-shift mixes) costs 3 FLOPs per output element (subtract,
// multiply, add) and rounds as the SUB/MUL/ADD chain it replaces: 1e-7.
// WKV7_INPUTS (RWKV-7's chain from the projections to the recurrence) costs 7
// FLOPs per output element (per channel: the decay 10 with sigmoid and exp
// counted as 4 each, a 5, k' 5, kk and its two products 6: 26 over the 4
// outputs, rounded up) and rounds as the 15 nodes it replaces: 1e-7.
// WKV7_OUTPUT (the chain after the recurrence and the group norm) costs 6 FLOPs
// per output element (two multiplies and an add for the head's sum, a
// multiply, an add and the gate's multiply) and rounds as the MUL, SUM_ROWS
// and ADD nodes it replaces: 1e-7.
// WKV7_VALUE_MIX (RWKV-7's value residual, layers >= 1) costs 9 FLOPs per
// element (an add, the sigmoid counted as 4, the negation, an add, a multiply
// and an add) and rounds as the ADD, UNARY, SCALE, ADD, MUL, ADD nodes it
// replaces: 1e-7.
#include "graph/op_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/error.h"

namespace opal {
namespace {

// ---- costs

uint64_t src_bytes(const Tensor& node) {
  uint64_t b = 0;
  for (const Tensor* s : node.src)
    if (s) b += s->nbytes();
  return b;
}

// Every source and the output, `flops_per_element` per output element.
template <int kFlopsPerElement>
NodeCost elementwise_cost(const Tensor& node) {
  return {double(kFlopsPerElement) * double(node.n_elements()), src_bytes(node) + node.nbytes()};
}

// One operation per input element (a sum or a comparison).
NodeCost per_input_cost(const Tensor& node) {
  return {double(node.src[0]->n_elements()), src_bytes(node) + node.nbytes()};
}

NodeCost no_cost(const Tensor&) { return {}; }

// NORM: 5 per element, one more for each of its optional weight and bias.
NodeCost norm_cost(const Tensor& node) {
  const int flops = 5 + (node.src[1] ? 1 : 0) + (node.src[2] ? 1 : 0);
  return {double(flops) * double(node.n_elements()), src_bytes(node) + node.nbytes()};
}

NodeCost mul_mat_cost(const Tensor& node) {
  const Tensor& w = *node.src[0];
  return {2.0 * double(w.ne[0]) * double(node.n_elements()),  // K multiply-adds per output element
          src_bytes(node) + node.nbytes()};
}

NodeCost mul_mat_id_cost(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const int64_t experts_read = std::min<int64_t>(w.ne[2], ids.n_elements());
  const uint64_t per_expert = w.ne[2] ? w.nbytes() / uint64_t(w.ne[2]) : 0;
  return {2.0 * double(w.ne[0]) * double(node.n_elements()),
          per_expert * uint64_t(experts_read) + x.nbytes() + ids.nbytes() + node.nbytes()};
}

NodeCost attention_cost(const Tensor& node) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const double dk = double(q.ne[0]), hq = double(q.ne[1]), t = double(q.ne[2]);
  const double cells = double(k.ne[1]);
  const double dv = double(node.ne[0]) / std::max(1.0, hq);
  return {2.0 * (dk + dv) * hq * t * cells + 5.0 * hq * t * cells,  // QK^T, PV, softmax
          src_bytes(node) + node.nbytes()};
}

NodeCost token_shift_cost(const Tensor& node) {  // x, y, the slots, and at most one state column per token
  const uint64_t col = node.src[1]->nb[1];
  return {0, 2 * node.nbytes() + node.src[2]->nbytes() + 2 * col * uint64_t(node.ne[1])};
}

NodeCost wkv7_cost(const Tensor& node) {
  const Tensor& r = *node.src[kWkvR];
  const uint64_t state_col = node.src[kWkvState]->nb[1];
  const uint64_t inputs = 6 * r.nbytes() + node.src[kWkvSlot]->nbytes();
  return {10.0 * double(r.ne[0]) * double(node.n_elements()),
          inputs + node.nbytes() + 2 * state_col * uint64_t(std::min<int64_t>(r.ne[2], node.src[kWkvState]->ne[1]))};
}

NodeCost get_rows_cost(const Tensor& node) {  // reads only the selected rows of the table
  const Tensor& table = *node.src[0];
  const uint64_t row = table.ne[1] ? table.nb[1] : 0;
  return {0, row * uint64_t(node.ne[1] * node.ne[2]) + node.src[1]->nbytes() + node.nbytes()};
}

NodeCost kv_store_cost(const Tensor& node) {  // writes T columns of the cache, not the whole cache
  const Tensor& x = *node.src[1];
  return {0, x.nbytes() + node.src[2]->nbytes() +
                 uint64_t(x.ne[1]) * uint64_t(x.ne[0]) * uint64_t(type_size(node.src[0]->type)) /
                     uint64_t(block_size(node.src[0]->type))};
}

// ---- OPAL_PERF fields

std::string no_fields(const Tensor&) { return {}; }

std::string mul_mat_fields(const Tensor& t) {
  return fmt::format("|wtype={}|k={}|n={}|m={}", dtype_name(t.src[0]->type), t.src[0]->ne[0], t.ne[0], t.n_rows());
}
std::string attention_fields(const Tensor& t) {
  std::string s = fmt::format("|heads={}|kv_heads={}|tokens={}|cells={}", t.src[kAttnQ]->ne[1], t.iparams[0],
                              t.src[kAttnQ]->ne[2], t.src[kAttnK]->ne[1]);
  if (t.iparams[1] > 0) s += fmt::format("|window={}", t.iparams[1]);
  return s;
}
std::string get_rows_fields(const Tensor& t) { return fmt::format("|table_type={}", dtype_name(t.src[0]->type)); }
std::string kv_store_fields(const Tensor& t) { return fmt::format("|cache_type={}", dtype_name(t.src[0]->type)); }
std::string rope_fields(const Tensor& t) { return fmt::format("|n_rot={}|mode={}", t.iparams[0], t.iparams[1]); }
std::string top_k_fields(const Tensor& t) { return fmt::format("|k={}", t.iparams[0]); }
std::string unary_fields(const Tensor& t) { return fmt::format("|fn={}", unary_fn_name(UnaryFn(t.iparams[0]))); }
std::string wkv7_fields(const Tensor& t) {
  return fmt::format("|heads={}|head_size={}|tokens={}", t.src[kWkvR]->ne[1], t.src[kWkvR]->ne[0], t.ne[1]);
}

// ---- tolerances

double f32_nmse(const Tensor&) { return 1e-7; }
double mul_mat_nmse(const Tensor&) { return 5e-4; }
double exact_copy_nmse(const Tensor&) { return 1e-12; }
double exact_nmse(const Tensor&) { return 0; }
double wkv7_nmse(const Tensor&) { return 1e-6; }
double gelu_nmse(const Tensor&) { return 1e-5; }
double attention_nmse(const Tensor& node) { return node.src[kAttnK]->type == DType::F32 ? 1e-6 : 5e-4; }
double convert_nmse(const Tensor& node) {
  return node.type == DType::F32 && node.src[0]->type == DType::F32 ? 1e-12 : 1e-5;
}

// ---- the table

using C = OpCaseType;
// One aligned row per op: kept out of clang-format.
// clang-format off
constexpr OpInfo kOps[] = {
    // op           name          src opt cost                 perf fields       tolerance        case dtype
    {Op::None,      "NONE",       0, 0, no_cost,                no_fields,        f32_nmse,        C::None},
    {Op::View,      "VIEW",       1, 0, no_cost,                no_fields,        f32_nmse,        C::None},
    {Op::GetRows,   "GET_ROWS",   2, 0, get_rows_cost,          get_rows_fields,  exact_copy_nmse, C::Weight},
    {Op::RmsNorm,   "RMS_NORM",   1, 0, elementwise_cost<4>,    no_fields,        f32_nmse,        C::Input},
    {Op::Mul,       "MUL",        2, 0, elementwise_cost<1>,    no_fields,        f32_nmse,        C::Input},
    {Op::Add,       "ADD",        2, 0, elementwise_cost<1>,    no_fields,        f32_nmse,        C::Input},
    {Op::Div,       "DIV",        2, 0, elementwise_cost<1>,    no_fields,        f32_nmse,        C::Input},
    {Op::Scale,     "SCALE",      1, 0, elementwise_cost<1>,    no_fields,        f32_nmse,        C::Input},
    {Op::SumRows,   "SUM_ROWS",   1, 0, per_input_cost,         no_fields,        f32_nmse,        C::Input},
    {Op::MulMat,    "MUL_MAT",    2, 0, mul_mat_cost,           mul_mat_fields,   mul_mat_nmse,    C::Weight},
    {Op::MulMatId,  "MUL_MAT_ID", 3, 0, mul_mat_id_cost,        mul_mat_fields,   mul_mat_nmse,    C::Weight},
    {Op::Rope,      "ROPE",       3, 1, elementwise_cost<6>,    rope_fields,      f32_nmse,        C::Input},
    {Op::Attention, "ATTENTION",  5, 0, attention_cost,         attention_fields, attention_nmse,  C::Cache},
    {Op::KvStore,   "KV_STORE",   3, 0, kv_store_cost,          kv_store_fields,  convert_nmse,    C::Cache},
    {Op::Swiglu,    "SWIGLU",     2, 0, elementwise_cost<5>,    no_fields,        f32_nmse,        C::Input},
    {Op::Silu,      "SILU",       1, 0, elementwise_cost<4>,    no_fields,        f32_nmse,        C::Input},
    {Op::Softmax,   "SOFTMAX",    1, 0, elementwise_cost<5>,    no_fields,        f32_nmse,        C::Input},
    {Op::TopK,      "TOP_K",      1, 0, per_input_cost,         top_k_fields,     exact_nmse,      C::Input},
    {Op::Cpy,       "CPY",        1, 0, elementwise_cost<0>,    no_fields,        convert_nmse,    C::Output},
    // RWKV-7 (issue 17)
    {Op::Norm,      "NORM",       3, 2, norm_cost,              no_fields,        f32_nmse,        C::Input},
    {Op::Unary,     "UNARY",      1, 0, elementwise_cost<4>,    unary_fields,     f32_nmse,        C::Input},
    {Op::L2Norm,    "L2_NORM",    1, 0, elementwise_cost<3>,    no_fields,        f32_nmse,        C::Input},
    {Op::TokenShift,"TOKEN_SHIFT",3, 0, token_shift_cost,       no_fields,        exact_copy_nmse, C::Input},
    {Op::Wkv7,      "RWKV_WKV7",  8, 0, wkv7_cost,              wkv7_fields,      wkv7_nmse,       C::Input},
    // Gemma (issue 17)
    {Op::Gelu,      "GELU",       1, 0, elementwise_cost<8>,    no_fields,        gelu_nmse,       C::Input},
    {Op::Geglu,     "GEGLU",      2, 0, elementwise_cost<9>,    no_fields,        gelu_nmse,       C::Input},
    {Op::Lerp,      "LERP",       3, 0, elementwise_cost<3>,    no_fields,        f32_nmse,        C::Input},
    {Op::Wkv7Inputs,"WKV7_INPUTS",7, 0, elementwise_cost<7>,    no_fields,        f32_nmse,        C::Input},
    {Op::Wkv7Output,"WKV7_OUTPUT",6, 0, elementwise_cost<6>,    no_fields,        f32_nmse,        C::Input},
    {Op::Wkv7ValueMix,"WKV7_VALUE_MIX",4,0,elementwise_cost<9>, no_fields,        f32_nmse,        C::Input},
};
// clang-format on

// The function columns are not compared with null here (GCC under
// -fsanitize=undefined does not fold such comparisons in a constant
// expression); a row that leaves them out fails -Wmissing-field-initializers
// under -Werror, and tests/conformance/test_op_info.cpp checks them.
constexpr bool rows_complete_and_in_enum_order() {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    const OpInfo& r = kOps[i];
    if (r.op != Op(i) || !r.name || !r.name[0]) return false;
    if (r.n_src < 0 || r.n_src > kMaxSrc || r.n_optional < 0 || r.n_optional > r.n_src) return false;
  }
  return true;
}
static_assert(std::size(kOps) == size_t(Op::Count), "graph/op_info.cpp: one row per Op, no more, no less");
static_assert(rows_complete_and_in_enum_order(), "graph/op_info.cpp: rows must be complete and in Op enum order");

}  // namespace

const OpInfo& op_info(Op op) {
  if (size_t(op) >= std::size(kOps)) fail("no such op (value {})", int(op));
  return kOps[size_t(op)];
}

}  // namespace opal
