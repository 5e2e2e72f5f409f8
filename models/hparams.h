// Model hyperparameters as data, read from `<arch>.*` GGUF keys with the
// defaults llama.cpp uses when a key is absent (rope base 10000, head_dim =
// n_embd / n_head, n_head_kv = n_head, n_rot = head_dim, ...).
#pragma once
#include <cstdint>
#include <string>

#include "backends/graph.h"
#include "core/gguf.h"

namespace opal {

struct HParams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // attention.key_length
  int64_t head_dim_v = 0;  // attention.value_length
  int64_t n_ff = 0;
  int64_t n_rot = 0;       // rope.dimension_count
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;
  RopeMode rope_mode = RopeMode::Normal;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool expert_weights_norm = true;

  int64_t n_embd_k_gqa() const { return head_dim_k * n_head_kv; }
  int64_t n_embd_v_gqa() const { return head_dim_v * n_head_kv; }

  // Reads and validates (positive sizes, n_head divisible by n_head_kv, ...).
  // n_vocab comes from the token embedding when vocab_size is absent (set by the loader).
  static HParams from_gguf(const gguf::File& f, const std::string& arch, RopeMode rope_mode);
};

}  // namespace opal
