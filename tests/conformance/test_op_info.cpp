// The op-info table (graph/op_info.h): one complete row per op that every
// consumer reads — names, arity, costs, OPAL_PERF fields, tolerances and the
// conformance case dtypes — with the numbers each consumer used before the
// table existed pinned here, so a wrong row fails a test.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "backends/factory/op_cases.h"
#include "backends/shadow/tolerance.h"
#include "core/error.h"
#include "graph/op_info.h"
#include "graph/perf/node_cost.h"

namespace opal {
namespace {

Tensor* input(Graph& g, DType t, std::array<int64_t, 4> ne) { return g.new_leaf("x", t, ne, TensorRole::Input); }

TEST(OpInfo, OneRowPerOpWithItsOwnName) {
  std::set<std::string> names;
  for (int i = 0; i < int(Op::Count); ++i) {
    const OpInfo& r = op_info(Op(i));
    EXPECT_EQ(r.op, Op(i));
    EXPECT_STREQ(r.name, op_name(Op(i)));
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_LE(r.n_optional, r.n_src);
    EXPECT_TRUE(r.cost && r.perf_fields && r.max_nmse) << r.name << ": a function column is empty";
  }
  EXPECT_STREQ(op_name(Op::MulMat), "MUL_MAT");
  EXPECT_STREQ(op_name(Op::Count), "?");
  EXPECT_THROW(op_info(Op::Count), Error);
}

TEST(OpInfo, ArityMatchesTheBuilders) {
  Graph g;
  Tensor* x = input(g, DType::F32, {64, 2, 3, 1});
  Tensor* pos = g.new_leaf("pos", DType::I32, {3, 1, 1, 1}, TensorRole::Input);
  Tensor* r = g.rope(x, pos, nullptr, 64, RopeMode::Neox, 10000.0f, 1.0f);  // frequency factors are optional
  EXPECT_EQ(op_info(Op::Rope).n_src, 3);
  EXPECT_EQ(op_info(Op::Rope).n_optional, 1);
  EXPECT_EQ(r->src[2], nullptr);
  EXPECT_EQ(op_info(Op::Attention).n_src, 5);
  EXPECT_EQ(op_info(Op::MulMatId).n_src, 3);
  EXPECT_EQ(op_info(Op::Add).n_src, 2);
  EXPECT_EQ(op_info(Op::None).n_src, 0);
  for (const Tensor* n : g.nodes()) {
    const OpInfo& info = op_info(n->op);
    for (int i = info.n_src; i < kMaxSrc; ++i) EXPECT_EQ(n->src[i], nullptr) << n->name;
  }
}

TEST(OpInfo, CostsAreTheCostModel) {
  Graph g;
  Tensor* w = g.new_leaf("w", DType::F32, {256, 64, 1, 1}, TensorRole::Weight);
  Tensor* x = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* mm = g.mul_mat(w, x);
  EXPECT_EQ(node_cost(*mm).flops, 2.0 * 256 * 64 * 4);
  EXPECT_EQ(node_cost(*mm).bytes, uint64_t(256 * 64 * 4 + 256 * 4 * 4 + 64 * 4 * 4));
  Tensor* n = g.rms_norm(x, 1e-5f);
  EXPECT_EQ(node_cost(*n).flops, 4.0 * 256 * 4);
  EXPECT_EQ(node_cost(*g.softmax(x)).flops, 5.0 * 256 * 4);
  EXPECT_EQ(node_cost(*g.add(x, x)).flops, 256.0 * 4);
  EXPECT_EQ(node_cost(*g.sum_rows(x)).flops, 256.0 * 4);
  EXPECT_EQ(node_cost(*g.cpy(x, DType::F16)).flops, 0.0);
  Tensor* v = g.reshape(x, {1024, 1, 1, 1});
  EXPECT_EQ(node_cost(*v).flops, 0.0);
  EXPECT_EQ(node_cost(*v).bytes, 0u);
  // KV_STORE writes its T columns of the cache, not the whole cache.
  Tensor* cache = g.new_leaf("cache", DType::F16, {256, 100, 1, 1}, TensorRole::Cache);
  Tensor* cells = g.new_leaf("cells", DType::I32, {4, 1, 1, 1}, TensorRole::Input);
  Tensor* st = g.kv_store(cache, x, cells);
  EXPECT_EQ(node_cost(*st).bytes, uint64_t(256 * 4 * 4 + 4 * 4 + 256 * 4 * 2));
}

TEST(OpInfo, PerfFieldsAreTheRows) {
  Graph g;
  Tensor* w = g.new_leaf("w", DType::Q8_0, {256, 64, 1, 1}, TensorRole::Weight);
  Tensor* x = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* mm = g.mul_mat(w, x);
  EXPECT_EQ(op_info(Op::MulMat).perf_fields(*mm), "|wtype=q8_0|k=256|n=64|m=4");
  EXPECT_EQ(op_info(Op::TopK).perf_fields(*g.top_k(x, 3)), "|k=3");
  EXPECT_EQ(op_info(Op::Add).perf_fields(*g.add(x, x)), "");
  Tensor* q = input(g, DType::F32, {16, 4, 4, 1});
  Tensor* k = g.new_leaf("k", DType::F16, {32, 8, 1, 1}, TensorRole::Cache);
  Tensor* tok = g.new_leaf("tok", DType::I32, {2, 4, 1, 1}, TensorRole::Input);
  Tensor* cel = g.new_leaf("cel", DType::I32, {2, 8, 1, 1}, TensorRole::Input);
  EXPECT_EQ(op_info(Op::Attention).perf_fields(*g.attention(q, k, k, tok, cel, 2, 0.25f)),
            "|heads=4|kv_heads=2|tokens=4|cells=8");
  EXPECT_EQ(op_info(Op::Attention).perf_fields(*g.attention(q, k, k, tok, cel, 2, 0.25f, 32)),
            "|heads=4|kv_heads=2|tokens=4|cells=8|window=32");
}

// Gemma's ops (issue 17): GELU 8 FLOPs per element, GEGLU 9; both allow the f16
// table's rounding (1e-5). The soft-cap's tanh is UNARY(tanh) (one op, not a
// second TANH): 4 FLOPs, the f32 default.
TEST(OpInfo, GemmaRows) {
  Graph g;
  Tensor* x = input(g, DType::F32, {256, 4, 1, 1});
  EXPECT_STREQ(op_name(Op::Gelu), "GELU");
  EXPECT_STREQ(op_name(Op::Geglu), "GEGLU");
  EXPECT_EQ(op_info(Op::Geglu).n_src, 2);
  EXPECT_EQ(node_cost(*g.gelu(x)).flops, 8.0 * 256 * 4);
  EXPECT_EQ(node_cost(*g.geglu(x, x)).flops, 9.0 * 256 * 4);
  Tensor* th = g.tanh(x);
  EXPECT_EQ(th->op, Op::Unary);
  EXPECT_EQ(UnaryFn(th->iparams[0]), UnaryFn::Tanh);
  EXPECT_EQ(node_cost(*th).flops, 4.0 * 256 * 4);
  EXPECT_EQ(node_cost(*g.geglu(x, x)).bytes, uint64_t(3 * 256 * 4 * 4));
  EXPECT_EQ(max_nmse(*g.gelu(x)), 1e-5);
  EXPECT_EQ(max_nmse(*g.geglu(x, x)), 1e-5);
  EXPECT_EQ(max_nmse(*th), 1e-7);
  EXPECT_EQ(op_info(Op::Gelu).case_type, OpCaseType::Input);
  Tensor* y = input(g, DType::F32, {128, 4, 1, 1});
  EXPECT_THROW(g.geglu(x, y), Error);
}

TEST(OpInfo, TolerancesPerOpAndDtype) {
  Graph g;
  Tensor* x = input(g, DType::F32, {64, 4, 1, 1});
  Tensor* w = g.new_leaf("w", DType::Q4_0, {64, 8, 1, 1}, TensorRole::Weight);
  EXPECT_EQ(max_nmse(*g.mul_mat(w, x)), 5e-4);
  EXPECT_EQ(max_nmse(*g.add(x, x)), 1e-7);
  EXPECT_EQ(max_nmse(*g.rms_norm(x, 1e-5f)), 1e-7);
  EXPECT_EQ(max_nmse(*g.top_k(x, 2)), 0.0);
  EXPECT_EQ(max_nmse(*g.cpy(x, DType::F32)), 1e-12);
  EXPECT_EQ(max_nmse(*g.cpy(x, DType::BF16)), 1e-5);
  Tensor* ids = g.new_leaf("ids", DType::I32, {2, 1, 1, 1}, TensorRole::Input);
  EXPECT_EQ(max_nmse(*g.get_rows(w, ids)), 1e-12);
  for (DType cache : {DType::F32, DType::F16}) {
    Tensor* q = input(g, DType::F32, {16, 4, 4, 1});
    Tensor* k = g.new_leaf("k", cache, {32, 8, 1, 1}, TensorRole::Cache);
    Tensor* v = g.new_leaf("v", cache, {32, 8, 1, 1}, TensorRole::Cache);
    Tensor* tok = g.new_leaf("tok", DType::I32, {2, 4, 1, 1}, TensorRole::Input);
    Tensor* cel = g.new_leaf("cel", DType::I32, {2, 8, 1, 1}, TensorRole::Input);
    EXPECT_EQ(max_nmse(*g.attention(q, k, v, tok, cel, 2, 0.25f)), cache == DType::F32 ? 1e-6 : 5e-4);
  }
}

TEST(OpInfo, CaseDtypesFollowTheRow) {
  auto has = [](const std::vector<DType>& v, DType t) { return std::find(v.begin(), v.end(), t) != v.end(); };
  EXPECT_TRUE(has(matrix_dtypes(Op::MulMat), DType::Q4_K));
  EXPECT_TRUE(has(matrix_dtypes(Op::GetRows), DType::Q8_0));
  EXPECT_FALSE(has(matrix_dtypes(Op::MulMat), DType::Q8_K));
  EXPECT_EQ(matrix_dtypes(Op::Attention), (std::vector<DType>{DType::F32, DType::F16, DType::BF16, DType::Q8_0}));
  EXPECT_EQ(matrix_dtypes(Op::Cpy), matrix_dtypes(Op::KvStore));
  EXPECT_EQ(matrix_dtypes(Op::Softmax), (std::vector<DType>{DType::F32, DType::F16}));
  EXPECT_TRUE(matrix_dtypes(Op::View).empty());
  const std::vector<Op> ops = computing_ops();
  EXPECT_EQ(ops.size(), size_t(Op::Count) - 2);  // all but NONE and VIEW
  EXPECT_EQ(ops.front(), Op::GetRows);
}

// The RWKV-7 rows (issue 17): arity, cost, fields, tolerance.
TEST(OpInfo, RwkvRows) {
  Graph g;
  Tensor* x = input(g, DType::F32, {256, 4, 1, 1});
  EXPECT_EQ(node_cost(*g.norm(x, 1e-5f)).flops, 5.0 * 256 * 4);
  EXPECT_EQ(node_cost(*g.l2_norm(x, 1e-12f)).flops, 3.0 * 256 * 4);
  Tensor* u = g.unary(x, UnaryFn::Tanh);
  EXPECT_EQ(node_cost(*u).flops, 4.0 * 256 * 4);
  EXPECT_EQ(op_info(Op::Unary).perf_fields(*u), "|fn=tanh");
  EXPECT_EQ(max_nmse(*u), 1e-7);
  Tensor* state = g.new_leaf("state", DType::F32, {256, 3, 1, 1}, TensorRole::Cache);
  Tensor* slots = g.new_leaf("slots", DType::I32, {4, 1, 1, 1}, TensorRole::Input);
  Tensor* ts = g.token_shift(x, state, slots);
  EXPECT_EQ(op_info(Op::TokenShift).n_src, 3);
  EXPECT_EQ(node_cost(*ts).flops, 0.0);
  EXPECT_EQ(node_cost(*ts).bytes, uint64_t(2 * 256 * 4 * 4 + 4 * 4 + 2 * 256 * 4 * 4));
  EXPECT_EQ(max_nmse(*ts), 1e-12);
  Tensor* r = input(g, DType::F32, {64, 4, 4, 1});
  Tensor* ws = g.new_leaf("wkv", DType::F32, {64 * 64 * 4, 2, 1, 1}, TensorRole::Cache);
  Tensor* y = g.wkv7(r, r, r, r, r, r, ws, slots);
  EXPECT_EQ(op_info(Op::Wkv7).n_src, 8);
  EXPECT_EQ(y->ne, (std::array<int64_t, 4>{256, 4, 1, 1}));
  EXPECT_EQ(node_cost(*y).flops, 10.0 * 64 * 256 * 4);
  EXPECT_EQ(node_cost(*y).bytes, uint64_t(6 * 64 * 4 * 4 * 4 + 4 * 4 + 256 * 4 * 4 + 2 * 64 * 64 * 4 * 4 * 2));
  EXPECT_EQ(op_info(Op::Wkv7).perf_fields(*y), "|heads=4|head_size=64|tokens=4");
  EXPECT_EQ(max_nmse(*y), 1e-6);
}

// NORM: optional weight and bias (the fused LayerNorm / GroupNorm), 5 FLOPs per element and one more for each.
TEST(OpInfo, NormRowWithWeightAndBias) {
  Graph g;
  Tensor* x = input(g, DType::F32, {64, 12, 4, 1});
  Tensor* wb = input(g, DType::F32, {64, 12, 1, 1});
  EXPECT_EQ(op_info(Op::Norm).n_src, 3);
  EXPECT_EQ(op_info(Op::Norm).n_optional, 2);
  Tensor* plain = g.norm(x, 1e-5f);
  Tensor* both = g.norm(x, 1e-5f, wb, wb);
  EXPECT_EQ(node_cost(*plain).flops, 5.0 * 64 * 12 * 4);
  EXPECT_EQ(node_cost(*plain).bytes, uint64_t(2 * 64 * 12 * 4 * 4));
  EXPECT_EQ(node_cost(*both).flops, 7.0 * 64 * 12 * 4);
  EXPECT_EQ(node_cost(*both).bytes, uint64_t((2 * 64 * 12 * 4 + 2 * 64 * 12) * 4));
  EXPECT_EQ(max_nmse(*both), 1e-7);
  EXPECT_THROW(g.norm(x, 1e-5f, input(g, DType::F32, {64, 5, 1, 1})), Error);
}

// LERP (RWKV-7's token-shift mixes): [C, T] and [C, n] -> [C, T, n], 3 FLOPs per output element, f32 tolerance.
TEST(OpInfo, LerpRow) {
  Graph g;
  Tensor* x = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* mix = input(g, DType::F32, {256, 1, 1, 6});
  Tensor* y = g.lerp(x, x, mix);
  EXPECT_STREQ(op_name(Op::Lerp), "LERP");
  EXPECT_EQ(op_info(Op::Lerp).n_src, 3);
  EXPECT_EQ(y->ne, (std::array<int64_t, 4>{256, 4, 6, 1}));
  EXPECT_EQ(node_cost(*y).flops, 3.0 * 256 * 4 * 6);
  EXPECT_EQ(node_cost(*y).bytes, uint64_t((2 * 256 * 4 + 256 * 6 + 256 * 4 * 6) * 4));
  EXPECT_EQ(max_nmse(*y), 1e-7);
  EXPECT_THROW(g.lerp(x, input(g, DType::F32, {256, 3, 1, 1}), mix), Error);
  EXPECT_THROW(g.lerp(x, x, input(g, DType::F32, {128, 6, 1, 1})), Error);
}

// WKV7_INPUTS (RWKV-7's chain from the projections to the recurrence): [C, T] -> [C, T, 4], 7 FLOPs per output
// element, its seven sources read once, f32 tolerance.
TEST(OpInfo, Wkv7InputsRow) {
  Graph g;
  Tensor* k = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* v = input(g, DType::F32, {256, 1, 1, 1});
  Tensor* y = g.wkv7_inputs(k, k, k, v, v, v, v, 64, 1e-12f);
  EXPECT_STREQ(op_name(Op::Wkv7Inputs), "WKV7_INPUTS");
  EXPECT_EQ(op_info(Op::Wkv7Inputs).n_src, 7);
  EXPECT_EQ(y->ne, (std::array<int64_t, 4>{256, 4, 4, 1}));
  EXPECT_EQ(y->iparams[0], 64);
  EXPECT_EQ(node_cost(*y).flops, 7.0 * 256 * 4 * 4);
  EXPECT_EQ(node_cost(*y).bytes, uint64_t((3 * 256 * 4 + 4 * 256 + 256 * 4 * 4) * 4));
  EXPECT_EQ(max_nmse(*y), 1e-7);
}

// WKV7_OUTPUT (RWKV-7's chain after the recurrence): [C, T] -> [C, T], 6 FLOPs per element, f32 tolerance.
TEST(OpInfo, Wkv7OutputRow) {
  Graph g;
  Tensor* y = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* r_k = input(g, DType::F32, {256, 1, 1, 1});
  Tensor* out = g.wkv7_output(y, y, y, y, r_k, y, 64);
  EXPECT_STREQ(op_name(Op::Wkv7Output), "WKV7_OUTPUT");
  EXPECT_EQ(op_info(Op::Wkv7Output).n_src, 6);
  EXPECT_EQ(out->ne, y->ne);
  EXPECT_EQ(node_cost(*out).flops, 6.0 * 256 * 4);
  EXPECT_EQ(node_cost(*out).bytes, uint64_t((6 * 256 * 4 + 256) * 4));
  EXPECT_EQ(max_nmse(*out), 1e-7);
}

// WKV7_VALUE_MIX (RWKV-7's value residual): [C, T] -> [C, T], 9 FLOPs per element, f32 tolerance.
TEST(OpInfo, Wkv7ValueMixRow) {
  Graph g;
  Tensor* v = input(g, DType::F32, {256, 4, 1, 1});
  Tensor* v0 = input(g, DType::F32, {256, 1, 1, 1});
  Tensor* out = g.wkv7_value_mix(v, v, v, v0);
  EXPECT_STREQ(op_name(Op::Wkv7ValueMix), "WKV7_VALUE_MIX");
  EXPECT_EQ(op_info(Op::Wkv7ValueMix).n_src, 4);
  EXPECT_EQ(out->ne, v->ne);
  EXPECT_EQ(node_cost(*out).flops, 9.0 * 256 * 4);
  EXPECT_EQ(node_cost(*out).bytes, uint64_t((4 * 256 * 4 + 256) * 4));
  EXPECT_EQ(max_nmse(*out), 1e-7);
}

}  // namespace
}  // namespace opal
