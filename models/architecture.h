// An architecture is a row of data: its GGUF name and a DecoderDesc that says
// how its decoder differs from the others (RoPE mode, Q/K/V biases, QK-norm,
// dense or MoE FFN, output head, and the seams the next families need: block
// kind, per-layer attention kind, norm placement, embedding scaling). The
// rows are the table in models/architecture.cpp; one declare function and one
// build function (models/decoder.cpp) serve every row, so adding a variant is
// adding a row. docs/adding-an-architecture.md says which fields are
// implemented and what the unimplemented ones (Gemma 3/4, RWKV-7) will need.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/hparams.h"

namespace opal {

class Model;
class TensorTable;

// The per-run inputs and caches a graph reads. Built by the runtime.
struct GraphInputs {
  Tensor* tokens = nullptr;       // I32 [T]
  Tensor* positions = nullptr;    // I32 [T]
  Tensor* token_info = nullptr;   // I32 [2, T]: (pos, seq)
  Tensor* cell_info = nullptr;    // I32 [2, n_cells]: (pos, seq), seq -1 = empty
  Tensor* store_cells = nullptr;  // I32 [T]: the cache cell each token is written to
  Tensor* out_ids = nullptr;      // I32 [n_out]: rows whose logits are wanted, null = all
  // Recurrent models: per layer the token-shift states of the time mix and the
  // channel mix (F32 [n_embd, n_slots]) and the WKV state (F32 [n_embd * head
  // size, n_slots]), and the state slot of each token (I32 [T]).
  std::vector<Tensor*> shift_att, shift_ffn, wkv_state;
  Tensor* state_slots = nullptr;
  std::vector<Tensor*> k_cache, v_cache;  // per layer [E, n_cells] (a sliding layer's in the sliding cache)
  // A separate cache for sliding-window layers (null: they use the one above): its cell info and the cells
  // the ubatch's tokens are written to.
  Tensor* swa_cell_info = nullptr;
  Tensor* swa_store_cells = nullptr;
  // Attention by tiles with an online softmax (ATTENTION iparams[2]; the context's flash-attention setting).
  bool flash_attn = false;
};

struct BuildContext {
  Graph& g;
  const Model& model;
  const HParams& hp;
  const GraphInputs& in;
  int64_t n_tokens = 0;
  // Embeddings: build() returns the hidden state after the output norm [n_embd, n_out] ("result_norm"),
  // without the LM head.
  bool hidden = false;
};

// Whether a tensor the description names is in the file.
enum class Presence : uint8_t { Absent, Optional, Required };

// What one layer is. Attention: norm -> attention over the KV cache -> residual,
// norm -> FFN -> residual. Recurrent (RWKV-7, models/rwkv7.cpp, its own row
// functions): time mix and channel mix over a per-sequence state instead of a KV cache.
enum class BlockKind : uint8_t { Attention, Recurrent };

// Which cells a layer's attention sees. Global: every earlier position of its
// sequence. SlidingWindow (Gemma 3/4): the last hp.n_swa positions, with the
// sliding layers' own RoPE base.
enum class AttentionKind : uint8_t { Global, SlidingWindow };

// Which layers are which kind. AllGlobal: every layer. SlidingThenGlobal
// (Gemma 3/4): as the GGUF's attention.sliding_window_pattern says
// (hp.swa_layers; absent: sliding_period - 1 sliding layers, then one global).
enum class AttentionPattern : uint8_t { AllGlobal, SlidingThenGlobal };

// Where a block's norms sit. Pre: x + f(norm(x)) (llama). PreAndPost (Gemma):
// x + post_norm(f(norm(x))) for attention and FFN.
enum class NormPlacement : uint8_t { Pre, PreAndPost };

// The FFN. SwiGlu: down(silu(gate x) * up x). MoeSwiGlu: softmax router, top
// expert_used_count experts, each a SwiGlu, weighted sum. GeluGated (Gemma):
// down(gelu_tanh(gate x) * up x).
enum class FfnKind : uint8_t { SwiGlu, MoeSwiGlu, GeluGated };

// The token embeddings' scale. None; SqrtEmbd (Gemma): * sqrtf(n_embd) in f32.
enum class EmbedScale : uint8_t { None, SqrtEmbd };

// How attention scores are scaled. InvSqrtHeadDim: softmax(q.k / sqrt(head_dim)) inside the attention op.
// ScaleQ (Gemma 3): q is scaled by 1/sqrt(head_dim) (1/sqrt(n_embd / n_head) for the 62-layer 27B) by a
// SCALE node before the attention op, whose scale is 1, as llama.cpp's graph does.
enum class AttentionScale : uint8_t { InvSqrtHeadDim, ScaleQ };

// What one layer's attention is: its kind, window, RoPE and scales (layer_attention()).
struct LayerAttention {
  AttentionKind kind = AttentionKind::Global;
  RopeParams rope;
  bool freq_factors = true;  // rope_freqs.weight applies (global layers; sliding layers never take it)
  int window = 0;            // SlidingWindow: a query at p sees keys at p - window + 1 .. p
  float q_scale = 0.0f;      // > 0: q *= q_scale before the attention op
  float kq_scale = 1.0f;     // the attention op's scale
};

// The LM head. OwnOrTied: output.weight when present, else token_embd.weight.
enum class OutputHead : uint8_t { OwnOrTied, Own, Tied };

struct DecoderDesc {
  RopeMode rope_mode = RopeMode::Normal;
  Presence rope_freqs = Presence::Absent;  // rope_freqs.weight frequency factors (Llama 3)
  Presence qkv_bias = Presence::Absent;    // blk.N.attn_{q,k,v}.bias
  Presence qk_norm = Presence::Absent;     // blk.N.attn_{q,k}_norm: per-head RMS norm before RoPE
  FfnKind ffn = FfnKind::SwiGlu;
  bool moe_renormalize = true;  // MoeSwiGlu: the selected experts' weights renormalised to sum 1
  OutputHead output = OutputHead::OwnOrTied;
  // Seams for the next families (docs/adding-an-architecture.md says which are implemented).
  BlockKind block = BlockKind::Attention;
  AttentionPattern attention = AttentionPattern::AllGlobal;
  int sliding_period = 0;  // SlidingThenGlobal: the pattern's period when the GGUF does not say
  // SlidingThenGlobal: > 0 fixes the sliding layers' RoPE base (and no scaling) whatever the file says
  // (llama.cpp's gemma3: 10000); 0 takes rope.freq_base_swa.
  float rope_base_swa = 0.0f;
  NormPlacement norms = NormPlacement::Pre;
  EmbedScale embed_scale = EmbedScale::None;
  AttentionScale attn_scale = AttentionScale::InvSqrtHeadDim;
  float default_logit_softcap = 0.0f;  // final_logit_softcapping when the key is absent
};

struct Architecture {
  std::string name;
  DecoderDesc decoder;
  // Declares (and validates) every tensor the architecture reads. A row that
  // names a seam that is not implemented fails here, naming it.
  void (*declare_tensors)(const Architecture& arch, TensorTable& table, const HParams& hp) = nullptr;
  // Builds the forward graph from c.model.arch(); returns the logits [n_vocab, n_out] (c.hidden: the normed
  // hidden state [n_embd, n_out]).
  Tensor* (*build)(BuildContext& ctx) = nullptr;
  // Reads the hyperparameters; null: HParams::from_gguf (attention models).
  HParams (*read_hparams)(const gguf::File& f, const std::string& arch) = nullptr;
};

// Throws opal::Error naming the architecture and listing the known ones.
const Architecture& find_architecture(const std::string& name);
// The RWKV-7 row (models/rwkv7.cpp).
Architecture rwkv7_architecture();
std::vector<std::string> architecture_names();

}  // namespace opal
