// The compute graph: tensor descriptors and a small closed op set.
//
// A Tensor describes an n-d array (up to 4 dims, ggml order: ne[0] is the
// fastest-varying, contiguous dimension; nb[i] are byte strides) and, for a
// computed tensor, the op and sources that produce it. A Graph owns its
// tensors and lists the compute nodes in topological order (the order they
// were built in). Leaves (op None) are inputs, weights or the KV cache.
// Views (op View) alias the bytes of another tensor at an offset and cost nothing.
//
// Shapes follow ggml so that every llama.cpp graph maps one to one:
//   MUL_MAT(W [K, N, ...], X [K, T, ...]) -> [N, T, ...]   (y = W x, row by row)
// Op semantics are documented next to each Op below; the scalar reference in
// backends/cpu/ops/ is the definition.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace opal {

class Buffer;

enum class Op : uint8_t {
  None,       // leaf: input, weight or cache; no computation
  View,       // alias of src[0]'s bytes at view_offset with this tensor's ne/nb
  GetRows,    // src0 table [K, R, B] (any dtype), src1 ids I32 [n, B] -> F32 [K, n, B]
  RmsNorm,    // src0 F32 rows of ne[0]; fparams[0] = eps. y = x / sqrt(mean(x^2) + eps)
  Mul,        // src0 * src1, F32, src1 broadcast (each dim of src1 divides src0's)
  Add,        // src0 + src1, same broadcasting as Mul
  Div,        // src0 / src1, same broadcasting as Mul
  Scale,      // src0 * fparams[0]
  SumRows,    // F32 [K, ...] -> [1, ...]: sum over ne[0]
  MulMat,     // src0 weight [K, N, B] (any dtype), src1 F32 [K, T, B] -> F32 [N, T, B]
  MulMatId,   // src0 experts [K, N, E], src1 F32 [K, S, T] (S = 1 or n_used), src2 ids I32 [n_used, T]
              //   -> F32 [N, n_used, T]: out[:, j, t] = W[ids[j, t]] x[:, j % S, t]
  Rope,       // src0 F32 [D, H, T], src1 positions I32 [T], src2 freq factors F32 [n_rot/2] or null.
              //   iparams: 0 n_rot, 1 mode (RopeMode); fparams: 0 freq_base, 1 freq_scale
  Attention,  // causal multi-head attention with GQA over the KV cache, see AttentionSrc
  KvStore,    // src0 cache [E, n_cells] (F16/F32), src1 F32 [E, T], src2 cell index I32 [T]:
              //   cache[:, cell[t]] = convert(src1[:, t]). The result aliases the cache.
  Swiglu,     // silu(src0) * src1, F32, same shape
  Silu,       // x * sigmoid(x)
  Softmax,    // softmax over ne[0] of each row, F32
  TopK,       // src0 F32 [N, T] -> I32 [k, T]: indices of the k largest, descending; iparams[0] = k
  Cpy,        // src0 (any layout, F32/F16/BF16) -> this tensor's dtype, contiguous
  // RWKV-7 (issue 17):
  Norm,        // layer norm (ggml_norm): rows of ne[0], F32; fparams[0] = eps. y = (x - mean) / sqrt(var + eps);
               //   GROUP_NORM is this over a [group, n_groups * T] reshape. Optional src1 weight and src2 bias
               //   (F32, ne[0] = x's, higher dims broadcast as Mul): then y = (y * weight) + bias, each rounded
               //   to f32 on its own, as the MUL and ADD nodes it fuses
  Unary,       // y = f(x), F32; iparams[0] = UnaryFn: sigmoid, tanh, exp, relu^2, Gemma's soft-cap
  L2Norm,      // rows of ne[0], F32; fparams[0] = eps. y = x / max(sqrt(sum(x^2)), eps)
  TokenShift,  // src0 x F32 [C, T], src1 state F32 [C, n_slots] (Cache), src2 slot I32 [T] -> F32 [C, T]:
               //   y[:, t] = x[:, t'] for the last t' < t with slot[t'] == slot[t], else state[:, slot[t]];
               //   then state[:, s] = x[:, last t of slot s] (the state is updated in place)
  Wkv7,        // RWKV-7 time mix recurrence, see Wkv7Src; output F32 [S*H, T]; the state is updated in place
  // Gemma (issue 17).
  Gelu,   // gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), through llama.cpp's f16 table
  Geglu,  // gelu_tanh(src0) * src1, F32, same shape (GELU as Gelu)
  // RWKV-7's token-shift mixes in one pass (the fused form of n SUB, MUL, ADD chains):
  Lerp,  // src0 x F32 [C, T], src1 p F32 [C, T] (both contiguous), src2 mix F32 [C, n] (contiguous)
         //   -> F32 [C, T, n]: y[:, t, i] = ((p[:, t] - x[:, t]) * mix[:, i]) + x[:, t], each operation
         //   rounded to f32 on its own (no fused multiply-add), as the three separate ops round
  // RWKV-7's element-wise chain between the projections and the recurrence in one pass (the fused
  // form of 15 ADD, UNARY, SCALE, MUL and L2_NORM nodes per layer), see Wkv7InputsSrc:
  Wkv7Inputs,
  // ... and the chain after it (the fused form of 6 MUL, SUM_ROWS and ADD nodes per layer):
  Wkv7Output,  // src0 y (the group norm's output), src1 r, src2 k, src3 v, src5 gate F32 [C, T], src4 r_k F32 [C],
               //   all contiguous; iparams[0] = S (divides C). Per head h of S channels and token t:
               //   rk = SUM_ROWS of (k * r) * r_k over the head (in double, rounded to f32), then
               //   out = (y + (v * rk)) * gate, each operation rounded on its own -> F32 [C, T]
  // ... and the value residual of layers >= 1 (the fused form of ADD, UNARY, SCALE, ADD, MUL, ADD):
  Wkv7ValueMix,  // src0 v, src1 v_first, src2 vl (the value LoRA's output) F32 [C, T], src3 v0 F32 [C], all
                 //   contiguous -> F32 [C, T]: v + ((v_first + (v * -1)) * sigmoid(vl + v0)), each operation
                 //   rounded on its own, sigmoid as UNARY's
  Count
};
const char* op_name(Op op);

enum class RopeMode : int32_t { Normal = 0, Neox = 2 };  // ggml's numbering

// Sources of an Attention node. q F32 [Dk, Hq, T]; k cache [Dk*Hkv, n_cells];
// v cache [Dv*Hkv, n_cells] (both usually KvStore results, which orders the
// stores before the read); tokens I32 [2, T] = (pos, seq) per token;
// cells I32 [2, n_cells] = (pos, seq) per cache cell, seq -1 for an empty cell.
// Token t attends to every cell with the same seq and pos <= its pos; with a
// sliding window W = iparams[1] > 0, only those with pos_token - pos_cell < W.
// iparams[0] = Hkv; fparams[0] = scale (usually 1/sqrt(Dk)). Output F32 [Dv*Hq, T].
// With an F16 cache, q and the softmax probabilities are rounded to f16 before
// the two products, as llama.cpp's (non flash-attention) path does.
enum AttentionSrc { kAttnQ = 0, kAttnK = 1, kAttnV = 2, kAttnTokens = 3, kAttnCells = 4 };

// Sources of a Wkv7 node: r, w, k, v, a, b F32 [S, H, T] contiguous; state F32
// [S*S*H, n_slots] (Cache; per slot, per head h a row-major S x S matrix
// St[i][j], i the value index, j the key index); slot I32 [T]. Tokens run in
// order; token t of slot s, per head:
//   sa_i = sum_j a_j St[i][j];  St[i][j] = St[i][j] w_j + v_i k_j + sa_i b_j;  y_i = sum_j St[i][j] r_j.
enum Wkv7Src { kWkvR = 0, kWkvW, kWkvK, kWkvV, kWkvA, kWkvB, kWkvState, kWkvSlot };

// Sources of a Wkv7Inputs node: k, wl (the decay LoRA's output), al (the ICLR
// LoRA's output) F32 [C, T] contiguous; w0, a0, k_k, k_a F32 [C] contiguous.
// iparams[0] = S (the head size, divides C); fparams[0] = the L2 norm's eps.
// Output F32 [C, T, 4], the inputs of RWKV_WKV7 besides r and v, each
// operation rounded to f32 on its own (no fused multiply-add), as the nodes
// it replaces round; with a = sigmoid(al + a0), ka = k * k_a and
// kk = L2_NORM of k * k_k over each head's S channels:
//   [:, :, 0] w  = exp(sigmoid(wl + w0) * -0.606531)
//   [:, :, 1] k' = k + ((a * ka) + (ka * -1))
//   [:, :, 2] -kk (kk * -1)
//   [:, :, 3] kk * a
// sigmoid and exp as UNARY's.
enum Wkv7InputsSrc { kWinK = 0, kWinWl, kWinAl, kWinW0, kWinA0, kWinKk, kWinKa };

// Functions of a Unary node (iparams[0]).
// SoftCap (Graph::softcap only): y = tanh(x * fparams[0]) * fparams[1] with fparams[0] = 1/cap and
// fparams[1] = cap, each product rounded on its own: Gemma's SCALE, UNARY(tanh), SCALE soft-cap in one pass.
enum class UnaryFn : int32_t { Sigmoid = 0, Tanh = 1, Exp = 2, ReluSqr = 3, SoftCap = 4 };
const char* unary_fn_name(UnaryFn f);

enum class TensorRole : uint8_t {
  Compute,  // produced by a node; memory planned by the scheduler
  Input,    // written by the runtime before each run (token ids, positions, ...)
  Weight,   // model parameter, lives in a backend weight buffer
  Cache,    // KV cache, persistent across runs
};

constexpr int kMaxDims = 4;
constexpr int kMaxSrc = 8;

struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
  std::array<uint64_t, kMaxDims> nb{0, 0, 0, 0};
  Op op = Op::None;
  TensorRole role = TensorRole::Compute;
  std::array<Tensor*, kMaxSrc> src{};
  std::array<int32_t, 4> iparams{};
  std::array<float, 4> fparams{};
  uint64_t view_offset = 0;  // for View: byte offset into src[0]
  // How a weight's bytes are laid out: 0 = as in the GGUF (ne/nb describe
  // them); anything else is a layout its backend chose at upload (the CPU's
  // row groups, backends/cpu/kernels/repack.h), read only by that backend's
  // kernels and the ops it taught the layout.
  uint8_t layout = 0;

  // Where the bytes are. Set for leaves by their owner; for computed tensors by
  // the scheduler's memory plan. Never dereference `data` of a tensor whose
  // buffer is not host-visible.
  void* data = nullptr;
  Buffer* buffer = nullptr;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t nbytes() const;  // bytes spanned (contiguous: row_bytes * n_rows)
  bool is_contiguous() const;
  bool is_leaf() const { return op == Op::None; }
  bool is_view() const { return op == Op::View; }
  // The tensor whose memory this one ultimately aliases (itself if none).
  const Tensor* storage() const;
  Tensor* storage();
  std::string shape_string() const;  // "[256, 64]"
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// Contiguous strides for a shape of type t.
std::array<uint64_t, kMaxDims> contiguous_strides(DType t, const std::array<int64_t, kMaxDims>& ne);

// An Attention node's value columns per kv head (Dv).
inline int64_t attention_dv(const Tensor& node) { return node.src[kAttnV]->ne[0] / node.iparams[0]; }

// A graph owns its tensors (stable addresses) and the order of its nodes.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Leaves.
  Tensor* new_leaf(std::string name, DType type, std::array<int64_t, kMaxDims> ne, TensorRole role);
  // Adopts an external tensor (a weight or cache owned by the model/context) as a leaf.
  Tensor* external(Tensor* t);

  // Ops. Shapes are checked; a mismatch throws opal::Error naming the node.
  Tensor* get_rows(Tensor* table, Tensor* ids);
  Tensor* rms_norm(Tensor* x, float eps);
  Tensor* mul(Tensor* a, Tensor* b);
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* div(Tensor* a, Tensor* b);
  Tensor* scale(Tensor* a, float s);
  Tensor* sum_rows(Tensor* a);
  Tensor* mul_mat(Tensor* w, Tensor* x);
  Tensor* mul_mat_id(Tensor* experts, Tensor* x, Tensor* ids);
  Tensor* rope(Tensor* x, Tensor* pos, Tensor* freq_factors, int n_rot, RopeMode mode, float freq_base,
               float freq_scale);
  Tensor* kv_store(Tensor* cache, Tensor* x, Tensor* cells);
  // window > 0: sliding-window attention (see AttentionSrc). flash: iparams[2] = 1, the tiled form with an
  // online softmax that never holds a whole row of scores (-fa on; the CPU's ops/attention_flash.cpp).
  Tensor* attention(Tensor* q, Tensor* k, Tensor* v, Tensor* tokens, Tensor* cells, int n_head_kv, float scale,
                    int window = 0, bool flash = false);
  Tensor* swiglu(Tensor* gate, Tensor* up);
  Tensor* silu(Tensor* x);
  Tensor* softmax(Tensor* x);
  Tensor* top_k(Tensor* x, int k);
  Tensor* cpy(Tensor* x, DType type);
  // RWKV-7 (issue 17).
  Tensor* norm(Tensor* x, float eps, Tensor* weight = nullptr, Tensor* bias = nullptr);  // NORM (+ MUL, ADD)
  Tensor* unary(Tensor* x, UnaryFn f);
  Tensor* l2_norm(Tensor* x, float eps);
  Tensor* token_shift(Tensor* x, Tensor* state, Tensor* slots);
  Tensor* wkv7(Tensor* r, Tensor* w, Tensor* k, Tensor* v, Tensor* a, Tensor* b, Tensor* state, Tensor* slots);
  Tensor* gelu(Tensor* x);
  Tensor* geglu(Tensor* gate, Tensor* up);
  Tensor* tanh(Tensor* x);                          // UNARY(tanh)
  Tensor* softcap(Tensor* x, float cap);            // UNARY(softcap): cap * tanh(x / cap), rounded as the chain
  Tensor* lerp(Tensor* x, Tensor* p, Tensor* mix);  // LERP: mix [C, n] (or [C, 1, 1, n]) -> [C, T, n]
  // WKV7_INPUTS (Wkv7InputsSrc): head size S, L2 eps -> [C, T, 4] = (w, k', -kk, kk * a)
  Tensor* wkv7_inputs(Tensor* k, Tensor* wl, Tensor* al, Tensor* w0, Tensor* a0, Tensor* k_k, Tensor* k_a, int64_t S,
                      float eps);
  // WKV7_OUTPUT: (y + v * sum_head((k * r) * r_k)) * gate, head size S -> [C, T]
  Tensor* wkv7_output(Tensor* y, Tensor* r, Tensor* k, Tensor* v, Tensor* r_k, Tensor* gate, int64_t S);
  // WKV7_VALUE_MIX: v + (v_first - v) * sigmoid(vl + v0) -> [C, T]
  Tensor* wkv7_value_mix(Tensor* v, Tensor* v_first, Tensor* vl, Tensor* v0);
  // Views: reshape needs a contiguous source; view() takes explicit strides.
  Tensor* reshape(Tensor* x, std::array<int64_t, kMaxDims> ne);
  Tensor* view(Tensor* x, std::array<int64_t, kMaxDims> ne, std::array<uint64_t, kMaxDims> nb, uint64_t offset);

  // Names the last-built tensor (for reports and errors): "blk.3.attn_q".
  Tensor* named(Tensor* t, std::string name);

  const std::vector<Tensor*>& nodes() const { return nodes_; }  // computed (incl. views), topological
  const std::vector<Tensor*>& leaves() const { return leaves_; }
  void mark_output(Tensor* t) { outputs_.push_back(t); }
  const std::vector<Tensor*>& outputs() const { return outputs_; }

 private:
  Tensor* new_node(Op op, DType type, std::array<int64_t, kMaxDims> ne, std::initializer_list<Tensor*> srcs);
  std::deque<Tensor> storage_;
  std::vector<Tensor*> nodes_, leaves_, outputs_;
};

}  // namespace opal
