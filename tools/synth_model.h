// Random-weight GGUF models at the real shapes of small public models, so
// that anyone can benchmark Opal (and llama.cpp) without downloads.
//
// The presets are the shapes listed in ../shared/baselines/llamacpp-cpu.md
// (the files llama.cpp's figures were measured on). A synthetic file holds:
//   * the architecture's hparams as llama.cpp's converter writes them
//     (Llama 3.2: the `rope_freqs` tensor of Llama-3 rope scaling);
//   * a synthetic byte-level BPE vocabulary of the real size (256 byte tokens,
//     filler pieces made by merges, two control tokens at the end), so the
//     model loads and tokenizes through the normal path;
//   * weights drawn from a seeded generator (uniform, sd 0.02; norms 1.0),
//     each row from its own stream (seed, tensor, row), so the bytes do not
//     depend on threads or chunking; then quantized with the reference
//     quantizers and llama.cpp's per-tensor type rules (core/quant/recipe.h),
//     as llama-quantize would from an f16 file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/quant/recipe.h"

namespace opal::tools {

struct SynthPreset {
  std::string name;        // "smollm2-135m"
  std::string arch;        // "llama" | "qwen3"
  std::string model_name;  // general.name
  std::string size_label;  // general.size_label
  std::string tokenizer_pre;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int64_t n_ctx_train = 0;
  double rope_base = 10000.0;
  double rms_eps = 1e-5;
  bool qk_norm = false;      // qwen3: attn_q_norm / attn_k_norm
  bool llama3_rope = false;  // rope_freqs from Llama-3 scaling (factor 32, low 1, high 4, original 8192)
  bool add_bos = true;
  // rwkv7 (tools/synth_rwkv7.cpp): WKV head size and LoRA ranks.
  int64_t wkv_head_size = 0, lora_decay = 0, lora_iclr = 0, lora_value = 0, lora_gate = 0;
  // Gemma 3 (issue 17): post-attention / post-FFN norms and sliding-window layers (window > 0; the pattern is
  // not written, as in the real files, so llama.cpp's default period 6 applies).
  bool post_norms = false;
  int64_t sliding_window = 0;
  // Gemma 4 (E2B layout): every swa_period-th layer global (the pattern written as a bool array), sliding
  // layers with head_dim_swa, global ones with head_dim and "proportional" RoPE (rope_freqs: the first
  // rope_partial of the pairs rotate, the rest get factor 1e30); the last shared_kv_layers layers read earlier
  // layers' K/V and have an FFN of n_ff_shared; per-layer input embeddings of n_embd_per_layer; soft-cap.
  bool gemma4 = false;
  int64_t swa_period = 0, head_dim_swa = 0, shared_kv_layers = 0, n_ff_shared = 0, n_embd_per_layer = 0;
  double rope_base_swa = 10000.0, rope_partial = 1.0, logit_softcap = 0.0;
  bool is_swa(int64_t il) const { return swa_period > 0 && il % swa_period != swa_period - 1; }
  bool has_kv(int64_t il) const { return il < n_layer - shared_kv_layers; }
  int64_t head_dim_at(int64_t il) const { return gemma4 && is_swa(il) ? head_dim_swa : head_dim; }
  int64_t n_ff_at(int64_t il) const { return gemma4 && !has_kv(il) ? n_ff_shared : n_ff; }
};

// rope_freqs.weight of a preset: Llama 3's factors or Gemma 4's proportional ones.
std::vector<float> synth_rope_factors(const SynthPreset& p);

const std::vector<SynthPreset>& synth_presets();
// Throws naming the known presets.
const SynthPreset& find_synth_preset(const std::string& name);

// The file types synth writes: f16, q8_0, q4_0, q4_k_m (llama-quantize names accepted).
quant::FileType synth_file_type(const std::string& name);

struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  DType type = DType::F32;
  enum class Init { Random, Ones, RopeFreqs } init = Init::Random;
  uint64_t bytes() const;
  int64_t n_elements() const;
};

// Tensors in llama.cpp's order with their final types.
std::vector<SynthTensor> synth_tensors(const SynthPreset& p, quant::FileType ftype);

// Llama-3 rope frequency factors for head_dim / 2 pairs (llama.cpp's converter formula).
std::vector<float> llama3_rope_factors(int64_t head_dim, double rope_base);

// Metadata: general.*, the arch hparams, tokenizer.*.
void add_synth_metadata(gguf::Writer& w, const SynthPreset& p, quant::FileType ftype);

// The synthetic vocabulary: tokens, token types and merges.
struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t bos = 0, eos = 0;
};
SynthVocab make_synth_vocab(int64_t n_vocab);

// rwkv7 (tools/synth_rwkv7.cpp): its tensors in llama.cpp's order (all F32
// before the recipe), its metadata and an RWKV world vocabulary of the real size.
std::vector<SynthTensor> rwkv7_synth_tensor_list(const SynthPreset& p);
void add_rwkv7_synth_metadata(gguf::Writer& w, const SynthPreset& p, quant::FileType ftype);

// Deterministic weights: row `row` of tensor number `tensor_index`, ne0 values.
void synth_random_row(uint64_t seed, uint64_t tensor_index, int64_t row, float* out, int64_t n);

}  // namespace opal::tools
