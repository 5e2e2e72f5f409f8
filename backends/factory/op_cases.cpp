#include "backends/factory/op_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/op_info.h"

namespace opal {
namespace {

void fill_uniform(Tensor* t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  const int64_t n = t->n_elements();
  if (t->type == DType::F32) {
    for (int64_t i = 0; i < n; ++i) t->ptr<float>()[i] = d(rng);
  } else if (t->type == DType::F16) {
    for (int64_t i = 0; i < n; ++i) t->ptr<uint16_t>()[i] = f32_to_f16(d(rng));
  } else if (t->type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) t->ptr<uint16_t>()[i] = f32_to_bf16(d(rng));
  } else {
    fail("conformance: cannot fill an input of type {}", dtype_name(t->type));
  }
}

// Bytes of a weight of type t with rows of uniform values in [-1, 1].
std::vector<uint8_t> weight_bytes(const Tensor& t, std::mt19937& rng) {
  const int64_t K = t.ne[0], rows = t.n_rows();
  std::vector<float> f(size_t(K * rows));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& v : f) v = d(rng);
  std::vector<uint8_t> out(size_t(row_bytes(t.type, K) * uint64_t(rows)));
  switch (t.type) {
    case DType::F32: std::memcpy(out.data(), f.data(), out.size()); break;
    case DType::F16:
      for (size_t i = 0; i < f.size(); ++i) reinterpret_cast<uint16_t*>(out.data())[i] = f32_to_f16(f[i]);
      break;
    case DType::BF16:
      for (size_t i = 0; i < f.size(); ++i) reinterpret_cast<uint16_t*>(out.data())[i] = f32_to_bf16(f[i]);
      break;
    default:
      if (!can_quantize(t.type)) fail("no reference quantizer for {}", dtype_name(t.type));
      quantize_rows(t.type, f.data(), out.data(), rows, K);
  }
  return out;
}

}  // namespace

std::string OpCase::label() const {
  std::string s = fmt::format("{} {} m={} n={} k={}", op_name(op), dtype_name(dtype), m, n, k);
  if (op == Op::Rope) s += variant ? " neox" : " normal";
  if (op == Op::Unary) s += std::string(" ") + unary_fn_name(UnaryFn(variant));
  if (op == Op::Attention && variant > 0) s += fmt::format(" window {}", variant);
  if (op == Op::Norm && variant > 0) s += " weight bias";
  return s;
}

std::vector<Op> computing_ops() {
  std::vector<Op> v;
  for (int i = 0; i < int(Op::Count); ++i)
    if (op_info(Op(i)).case_type != OpCaseType::None) v.push_back(Op(i));
  return v;
}

std::vector<DType> matrix_dtypes(Op op) {
  switch (op_info(op).case_type) {  // no default: a new kind of case dtype needs its list here
    case OpCaseType::None: return {};
    case OpCaseType::Weight: {
      std::vector<DType> v = {DType::F32, DType::F16, DType::BF16};
      for (uint32_t raw = 0; raw < 64; ++raw) {
        const DTypeTraits* t = dtype_traits_or_null(raw);
        if (t && t->quantized && t->has_reference && t->type != DType::Q8_1 && t->type != DType::Q8_K)
          v.push_back(t->type);
      }
      return v;
    }
    case OpCaseType::Cache:
    case OpCaseType::Output: return {DType::F32, DType::F16, DType::BF16, DType::Q8_0};
    case OpCaseType::Input: return {DType::F32, DType::F16};
  }
  return {};
}

OpCase probe_case(Op op, DType dtype) {
  OpCase c;
  c.op = op;
  c.dtype = dtype;
  c.m = 32;  // a prompt batch: accelerators may decline single tokens (their reason says so)
  const bool heads =
      op == Op::Rope || op == Op::Attention || op == Op::Wkv7 || op == Op::Wkv7Inputs || op == Op::Wkv7Output;
  c.n = heads ? 4 : 64;
  c.k = heads ? 64 : 256;
  return c;
}

BuiltCase build_case(const OpCase& c, Graph& g, uint32_t seed, bool with_data) {
  BuiltCase b;
  auto rng = std::make_shared<std::mt19937>(seed);
  std::vector<std::function<void()>> fills;
  auto input = [&](const std::string& name, DType t, std::array<int64_t, 4> ne, float lo = -1, float hi = 1) {
    Tensor* x = g.new_leaf(name, t, ne, TensorRole::Input);
    fills.push_back([x, rng, lo, hi] { fill_uniform(x, *rng, lo, hi); });
    return x;
  };
  auto ints = [&](const std::string& name, std::array<int64_t, 4> ne, std::function<void(int32_t*, int64_t)> f) {
    Tensor* x = g.new_leaf(name, DType::I32, ne, TensorRole::Input);
    fills.push_back([x, f] { f(x->ptr<int32_t>(), x->n_elements()); });
    return x;
  };
  auto weight = [&](const std::string& name, std::array<int64_t, 4> ne) {
    Tensor* w = g.new_leaf(name, c.dtype, ne, TensorRole::Weight);
    if (ne[0] % block_size(c.dtype) != 0)
      fail("row length {} is not a whole number of {} blocks", ne[0], dtype_name(c.dtype));
    b.weights.push_back({w, with_data ? weight_bytes(*w, *rng) : std::vector<uint8_t>()});
    return w;
  };
  const int64_t m = c.m, n = c.n, k = c.k;
  Tensor* out = nullptr;
  switch (c.op) {
    case Op::MulMat: out = g.mul_mat(weight("w", {k, n, 1, 1}), input("x", DType::F32, {k, m, 1, 1})); break;
    case Op::MulMatId: {
      const int64_t E = 4, used = 2;
      Tensor* ids = ints("ids", {used, m, 1, 1}, [rng, E, used](int32_t* p, int64_t cnt) {
        for (int64_t t = 0; t < cnt / used; ++t) {
          const int32_t first = int32_t((*rng)() % uint32_t(E));
          for (int64_t j = 0; j < used; ++j) p[t * used + j] = int32_t((first + j) % E);
        }
      });
      out = g.mul_mat_id(weight("experts", {k, n, E, 1}), input("x", DType::F32, {k, used, m, 1}), ids);
      break;
    }
    case Op::GetRows: {
      Tensor* table = weight("table", {k, n, 1, 1});
      Tensor* ids = ints("ids", {m, 1, 1, 1}, [rng, n](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) p[i] = int32_t((*rng)() % uint32_t(n));
      });
      out = g.get_rows(table, ids);
      break;
    }
    case Op::RmsNorm: out = g.rms_norm(input("x", c.dtype, {k, m, 1, 1}), 1e-5f); break;
    case Op::Softmax: out = g.softmax(input("x", c.dtype, {k, m, 1, 1}, -4, 4)); break;
    case Op::SumRows: out = g.sum_rows(input("x", c.dtype, {k, m, 1, 1})); break;
    case Op::Scale: out = g.scale(input("x", c.dtype, {k, m, 1, 1}), 0.37f); break;
    case Op::Silu: out = g.silu(input("x", c.dtype, {k, m, 1, 1}, -4, 4)); break;
    case Op::Mul: out = g.mul(input("a", c.dtype, {k, m, 1, 1}), input("b", c.dtype, {k, 1, 1, 1})); break;
    case Op::Add: out = g.add(input("a", c.dtype, {k, m, 1, 1}), input("b", c.dtype, {k, 1, 1, 1})); break;
    case Op::Div: out = g.div(input("a", c.dtype, {k, m, 1, 1}), input("b", c.dtype, {k, 1, 1, 1}, 0.5f, 2)); break;
    case Op::Swiglu:
      out = g.swiglu(input("gate", c.dtype, {k, m, 1, 1}, -4, 4), input("up", c.dtype, {k, m, 1, 1}));
      break;
    case Op::Gelu: out = g.gelu(input("x", c.dtype, {k, m, 1, 1}, -12, 12)); break;
    case Op::Geglu:
      out = g.geglu(input("gate", c.dtype, {k, m, 1, 1}, -12, 12), input("up", c.dtype, {k, m, 1, 1}));
      break;
    case Op::Rope: {
      Tensor* x = input("x", c.dtype, {k, n, m, 1});
      Tensor* pos = ints("pos", {m, 1, 1, 1}, [](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) p[i] = int32_t(3 + 17 * i);
      });
      out = g.rope(x, pos, nullptr, int(k), c.variant ? RopeMode::Neox : RopeMode::Normal, 10000.0f, 1.0f);
      break;
    }
    case Op::Attention: {
      const int64_t hq = n, hkv = std::max<int64_t>(1, n / 2), cells = m + 5;
      Tensor* q = input("q", DType::F32, {k, hq, m, 1});
      Tensor* kc = input("k_cache", c.dtype, {k * hkv, cells, 1, 1});
      Tensor* vc = input("v_cache", c.dtype, {k * hkv, cells, 1, 1});
      // tokens t at positions 2..m+1 of sequence 0; cell i holds position i for i < m + 2, the rest empty
      Tensor* tok = ints("tokens", {2, m, 1, 1}, [](int32_t* p, int64_t cnt) {
        for (int64_t t = 0; t < cnt / 2; ++t) p[2 * t] = int32_t(t + 2), p[2 * t + 1] = 0;
      });
      Tensor* cel = ints("cells", {2, cells, 1, 1}, [m](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt / 2; ++i) {
          const bool used = i < m + 2;
          p[2 * i] = used ? int32_t(i) : -1;
          p[2 * i + 1] = used ? 0 : -1;
        }
      });
      out = g.attention(q, kc, vc, tok, cel, int(hkv), 1.0f / std::sqrt(float(k)), c.variant);
      break;
    }
    case Op::KvStore: {
      const int64_t cells = m + 8;
      Tensor* cache = input("cache", c.dtype, {k, cells, 1, 1});
      Tensor* cel = ints("cells", {m, 1, 1, 1}, [cells](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) p[i] = int32_t((cells - 1 - i) % cells);
      });
      out = g.kv_store(cache, input("x", DType::F32, {k, m, 1, 1}), cel);
      break;
    }
    case Op::TopK: out = g.top_k(input("x", c.dtype, {k, m, 1, 1}), int(std::min<int64_t>(8, k))); break;
    case Op::Cpy: out = g.cpy(input("x", DType::F32, {k, m, 1, 1}, -8, 8), c.dtype); break;
    // RWKV-7: tokens alternate between two state slots (two sequences in one batch).
    case Op::Norm:
      if (c.variant == 0) {
        out = g.norm(input("x", c.dtype, {k, m, 1, 1}, -2, 3), 1e-5f);
      } else {  // with weight and bias (a LayerNorm for n = 1, RWKV-7's group norm of n heads of k)
        out = g.norm(input("x", c.dtype, {k, n, m, 1}, -2, 3), 1e-5f, input("weight", DType::F32, {k, n, 1, 1}, -2, 2),
                     input("bias", DType::F32, {k, n, 1, 1}, -1, 1));
      }
      break;
    case Op::L2Norm: out = g.l2_norm(input("x", c.dtype, {k, m, 1, 1}), 1e-12f); break;
    case Op::Unary:
      if (UnaryFn(c.variant) == UnaryFn::SoftCap) {  // Gemma's logits: values past the cap of 30
        out = g.softcap(input("x", c.dtype, {k, m, 1, 1}, -80, 80), 30.0f);
      } else {
        out = g.unary(input("x", c.dtype, {k, m, 1, 1}, -4, 4), UnaryFn(c.variant));
      }
      break;
    case Op::TokenShift: {
      Tensor* slots = ints("slots", {m, 1, 1, 1}, [](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) p[i] = int32_t(i % 2);
      });
      out = g.token_shift(input("x", c.dtype, {k, m, 1, 1}), input("state", DType::F32, {k, 2, 1, 1}), slots);
      break;
    }
    case Op::Lerp:  // RWKV-7's six token-shift mixes of one time mix
      out = g.lerp(input("x", c.dtype, {k, m, 1, 1}), input("p", DType::F32, {k, m, 1, 1}),
                   input("mix", DType::F32, {k, 6, 1, 1}, 0, 1));
      break;
    case Op::Wkv7: {  // S = k, H = n, T = m; decays in (0.5, 1), small a and b as after RWKV-7's L2 norm
      auto in = [&](const char* name, float lo, float hi) { return input(name, DType::F32, {k, n, m, 1}, lo, hi); };
      Tensor* r = input("r", c.dtype, {k, n, m, 1});  // the case's dtype: f16 is declined
      Tensor* w = in("w", 0.5f, 1);
      Tensor* kk = in("k", -1, 1);
      Tensor* v = in("v", -1, 1);
      Tensor* a = in("a", -0.1f, 0.1f);
      Tensor* bb = in("b", -0.1f, 0.1f);
      Tensor* slots = ints("slots", {m, 1, 1, 1}, [](int32_t* p, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) p[i] = int32_t(i % 2);
      });
      out = g.wkv7(r, w, kk, v, a, bb, input("state", DType::F32, {k * k * n, 2, 1, 1}), slots);
      break;
    }
    case Op::Wkv7Inputs: {  // heads of S = k, C = k * n, T = m; LoRA outputs and vectors as in a trained model
      const int64_t C = k * n;
      auto vec = [&](const char* name, float lo, float hi) { return input(name, DType::F32, {C, 1, 1, 1}, lo, hi); };
      Tensor* kk = input("k", c.dtype, {C, m, 1, 1}, -2, 2);  // the case's dtype: f16 is declined
      Tensor* wl = input("wl", DType::F32, {C, m, 1, 1}, -2, 2);
      Tensor* al = input("al", DType::F32, {C, m, 1, 1}, -2, 2);
      out = g.wkv7_inputs(kk, wl, al, vec("w0", -3, 1), vec("a0", -1, 1), vec("k_k", 0, 1.5f), vec("k_a", 0, 1.5f), k,
                          1e-12f);
      break;
    }
    case Op::Wkv7Output: {  // heads of S = k, C = k * n, T = m
      const int64_t C = k * n;
      auto in = [&](const char* name) { return input(name, DType::F32, {C, m, 1, 1}, -2, 2); };
      Tensor* y = input("y", c.dtype, {C, m, 1, 1}, -2, 2);  // the case's dtype: f16 is declined
      out = g.wkv7_output(y, in("r"), in("k"), in("v"), input("r_k", DType::F32, {C, 1, 1, 1}, -1, 1), in("gate"), k);
      break;
    }
    case Op::Wkv7ValueMix: {                                 // C = k, T = m
      Tensor* v = input("v", c.dtype, {k, m, 1, 1}, -2, 2);  // the case's dtype: f16 is declined
      out =
          g.wkv7_value_mix(v, input("v_first", DType::F32, {k, m, 1, 1}, -2, 2),
                           input("vl", DType::F32, {k, m, 1, 1}, -3, 3), input("v0", DType::F32, {k, 1, 1, 1}, -1, 1));
      break;
    }
    case Op::None:
    case Op::View:
    case Op::Count: fail("op {} computes nothing", op_name(c.op));
  }
  g.named(out, c.label());
  g.mark_output(out);
  b.out = out;
  b.fill = [fills] {
    for (const auto& f : fills) f();
  };
  return b;
}

}  // namespace opal
