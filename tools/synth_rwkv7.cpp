// `opal synth --preset rwkv7-0.1b`: RWKV-7's tensor list, metadata and an
// RWKV world vocabulary, as llama.cpp's convert_hf_to_gguf.py writes them for
// the real RWKV-7 0.1B (n_embd 768, 12 layers, heads of 64, channel-mix 3072,
// LoRA ranks decay 64 / ICLR 64 / value 32 / gate 128, vocab 65536). The
// recipe (core/quant/recipe.cpp) keeps RWKV's small tensors in F32 as
// llama-quantize does.
//
// The vocabulary: id 0 "<s>" (control), ids 1-256 the bytes 0x00-0xFF, then
// byte pairs up to the real size, every text written as a Python bytes
// literal without b'' (printable ASCII as is, '\\' and '\'' escaped, the rest
// \xNN); BOS = EOS = 0, EOT = the "\n\n" token, no BOS added.
#include <fmt/format.h>

#include "core/error.h"
#include "tools/synth_model.h"

namespace opal::tools {
namespace {

using gguf::Value;
using gguf::ValueType;

std::string escape_byte(uint8_t b) {
  if (b == '\\') return "\\\\";
  if (b == '\'') return "\\'";
  if (b == '\n') return "\\n";
  if (b == '\t') return "\\t";
  if (b == '\r') return "\\r";
  if (b >= 32 && b < 127) return std::string(1, char(b));
  return fmt::format("\\x{:02x}", b);
}

}  // namespace

std::vector<SynthTensor> rwkv7_synth_tensor_list(const SynthPreset& p) {
  using Init = SynthTensor::Init;
  const int64_t C = p.n_embd;
  std::vector<SynthTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> ne, Init init = Init::Random) {
    t.push_back({std::move(name), std::move(ne), DType::F32, init});
  };
  add("token_embd.weight", {C, p.n_vocab});
  add("token_embd_norm.weight", {C}, Init::Ones);
  add("token_embd_norm.bias", {C});
  add("output_norm.weight", {C}, Init::Ones);
  add("output_norm.bias", {C});
  add("output.weight", {C, p.n_vocab});
  for (int64_t i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* n : {"attn_norm", "attn_norm_2"}) {
      add(b + n + ".weight", {C}, Init::Ones);
      add(b + n + ".bias", {C});
    }
    add(b + "time_mix_lerp_fused.weight", {C, 1, 1, 6});
    auto lora = [&](const char* n, int64_t rank) {
      add(b + "time_mix_" + n + "0.weight", {C});
      add(b + "time_mix_" + n + "1.weight", {C, rank});
      add(b + "time_mix_" + n + "2.weight", {rank, C});
    };
    lora("w", p.lora_decay);
    lora("a", p.lora_iclr);
    lora("v", i == 0 ? p.lora_iclr : p.lora_value);
    add(b + "time_mix_g1.weight", {C, p.lora_gate});
    add(b + "time_mix_g2.weight", {p.lora_gate, C});
    for (const char* n : {"k_k", "k_a", "r_k"}) add(b + "time_mix_" + n + ".weight", {C});
    for (const char* n : {"key", "value", "receptance"}) add(b + "time_mix_" + n + ".weight", {C, C});
    add(b + "time_mix_ln.weight", {C}, Init::Ones);
    add(b + "time_mix_ln.bias", {C});
    add(b + "time_mix_output.weight", {C, C});
    add(b + "channel_mix_lerp_k.weight", {C, 1, 1});
    add(b + "channel_mix_key.weight", {C, p.n_ff});
    add(b + "channel_mix_value.weight", {p.n_ff, C});
  }
  return t;
}

void add_rwkv7_synth_metadata(gguf::Writer& w, const SynthPreset& p, quant::FileType ftype) {
  if (p.n_vocab < 258 || p.n_vocab > 1 + 256 + 65536)
    fail("an rwkv7 synthetic vocabulary holds 258 to 65793 tokens, not {}", p.n_vocab);
  const std::string a = p.arch + ".";
  auto u32 = [](int64_t v) { return Value::from_u32(uint32_t(v)); };
  w.set("general.architecture", Value::from_string(p.arch));
  w.set("general.type", Value::from_string("model"));
  w.set("general.name", Value::from_string(p.model_name));
  w.set("general.size_label", Value::from_string(p.size_label));
  w.set(a + "vocab_size", u32(p.n_vocab));
  w.set(a + "context_length", u32(p.n_ctx_train));
  w.set(a + "embedding_length", u32(p.n_embd));
  w.set(a + "block_count", u32(p.n_layer));
  w.set(a + "attention.layer_norm_epsilon", Value::from_f32(float(p.rms_eps)));
  w.set(a + "wkv.head_size", u32(p.wkv_head_size));
  w.set(a + "attention.decay_lora_rank", u32(p.lora_decay));
  w.set(a + "attention.iclr_lora_rank", u32(p.lora_iclr));
  w.set(a + "attention.value_residual_mix_lora_rank", u32(p.lora_value));
  w.set(a + "attention.gate_lora_rank", u32(p.lora_gate));
  w.set(a + "feed_forward_length", u32(p.n_ff));
  w.set(a + "attention.head_count", u32(0));
  w.set("general.file_type", u32(int(ftype)));
  if (dtype_traits(quant::file_type_info(ftype).default_type).quantized) w.set("general.quantization_version", u32(2));

  std::vector<Value> tokens, types;
  tokens.push_back(Value::from_string("<s>"));
  types.push_back(Value::from_i32(3));
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(Value::from_string(escape_byte(uint8_t(b))));
    types.push_back(Value::from_i32(1));
  }
  int32_t eot = -1;
  for (int x = 0; x < 256 && int64_t(tokens.size()) < p.n_vocab; ++x)
    for (int y = 0; y < 256 && int64_t(tokens.size()) < p.n_vocab; ++y) {
      if (x == '\n' && y == '\n') eot = int32_t(tokens.size());
      tokens.push_back(Value::from_string(escape_byte(uint8_t(x)) + escape_byte(uint8_t(y))));
      types.push_back(Value::from_i32(1));
    }
  w.set("tokenizer.ggml.model", Value::from_string("rwkv"));
  w.set("tokenizer.ggml.tokens", Value::from_array(ValueType::STRING, std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::from_array(ValueType::I32, std::move(types)));
  w.set("tokenizer.ggml.bos_token_id", u32(0));
  w.set("tokenizer.ggml.eos_token_id", u32(0));
  if (eot >= 0) w.set("tokenizer.ggml.eot_token_id", u32(eot));
}

}  // namespace opal::tools
