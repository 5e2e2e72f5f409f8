// Synthetic models: presets, tensor lists, metadata, vocabulary and the
// seeded weight generator (see synth_model.h).
#include "tools/synth_model.h"

#include <cmath>

#include "core/error.h"

namespace opal::tools {
namespace {

using gguf::Value;
using gguf::ValueType;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
// others are mapped to code points from 256 up, in byte order.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    out[b] = utf8(printable ? b : next++);
  }
  return out;
}

// The order in which bytes are paired into filler pieces: letters, the space
// marker, digits, punctuation, then the rest (so ordinary text does merge).
std::vector<int> byte_order() {
  std::vector<int> order;
  std::vector<bool> used(256, false);
  auto add = [&](int b) {
    if (!used[size_t(b)]) order.push_back(b), used[size_t(b)] = true;
  };
  for (int b = 'a'; b <= 'z'; ++b) add(b);
  add(' ');
  for (int b = 'A'; b <= 'Z'; ++b) add(b);
  for (int b = '0'; b <= '9'; ++b) add(b);
  for (int b = 33; b < 127; ++b) add(b);
  for (int b = 0; b < 256; ++b) add(b);
  return order;
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Value u32(int64_t v) { return Value::from_u32(uint32_t(v)); }
Value f32(double v) { return Value::from_f32(float(v)); }

}  // namespace

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = [] {
    std::vector<SynthPreset> v;
    SynthPreset s;
    s.name = "smollm2-135m", s.arch = "llama", s.model_name = "SmolLM2 135M (synthetic)", s.size_label = "135M";
    s.tokenizer_pre = "smollm";
    s.n_embd = 576, s.n_layer = 30, s.n_head = 9, s.n_head_kv = 3, s.head_dim = 64, s.n_ff = 1536, s.n_vocab = 49152;
    s.n_ctx_train = 8192, s.rope_base = 100000.0, s.rms_eps = 1e-5;
    v.push_back(s);
    SynthPreset q;
    q.name = "qwen3-0.6b", q.arch = "qwen3", q.model_name = "Qwen3 0.6B (synthetic)", q.size_label = "0.6B";
    q.tokenizer_pre = "qwen2";
    q.n_embd = 1024, q.n_layer = 28, q.n_head = 16, q.n_head_kv = 8, q.head_dim = 128, q.n_ff = 3072;
    q.n_vocab = 151936, q.n_ctx_train = 40960, q.rope_base = 1000000.0, q.rms_eps = 1e-6, q.qk_norm = true;
    q.add_bos = false;
    v.push_back(q);
    SynthPreset l;
    l.name = "llama32-1b", l.arch = "llama", l.model_name = "Llama 3.2 1B (synthetic)", l.size_label = "1B";
    l.tokenizer_pre = "llama-bpe";
    l.n_embd = 2048, l.n_layer = 16, l.n_head = 32, l.n_head_kv = 8, l.head_dim = 64, l.n_ff = 8192;
    l.n_vocab = 128256, l.n_ctx_train = 131072, l.rope_base = 500000.0, l.rms_eps = 1e-5, l.llama3_rope = true;
    v.push_back(l);
    SynthPreset r;  // RWKV-7 "Goose" 0.1B (rwkv7-g1 0.1b) as convert_hf_to_gguf.py writes it
    r.name = "rwkv7-0.1b", r.arch = "rwkv7", r.model_name = "RWKV7 0.1B (synthetic)", r.size_label = "0.1B";
    r.n_embd = 768, r.n_layer = 12, r.n_ff = 3072, r.n_vocab = 65536, r.n_ctx_train = 1048576, r.rms_eps = 1e-5;
    r.wkv_head_size = 64, r.lora_decay = 64, r.lora_iclr = 64, r.lora_value = 32, r.lora_gate = 128;
    r.add_bos = false;
    v.push_back(r);
    // Gemma 3 1B as convert_hf_to_gguf.py writes google/gemma-3-1b-it: 26 layers (5 sliding : 1 global,
    // window 512), 4 heads, 1 KV head of 256, GELU FFN 6912, vocab 262144, tied embeddings, no RoPE scaling.
    SynthPreset g3;
    g3.name = "gemma-3-1b", g3.arch = "gemma3", g3.model_name = "Gemma 3 1B (synthetic)", g3.size_label = "1B";
    g3.tokenizer_pre = "default";
    g3.n_embd = 1152, g3.n_layer = 26, g3.n_head = 4, g3.n_head_kv = 1, g3.head_dim = 256, g3.n_ff = 6912;
    g3.n_vocab = 262144, g3.n_ctx_train = 32768, g3.rope_base = 1000000.0, g3.rms_eps = 1e-6, g3.qk_norm = true;
    g3.post_norms = true, g3.sliding_window = 512;
    v.push_back(g3);
    // Gemma 4 E2B as convert_hf_to_gguf.py writes google/gemma-4-E2B-it: 35 layers (4 sliding : 1 global,
    // window 512), 8 heads, 1 KV head of 256 (sliding) / 512 (global, proportional RoPE over a quarter of the
    // pairs), FFN 6144 (12288 in the 20 KV-shared layers), per-layer inputs of 256, vocab 262144, soft-cap 30.
    SynthPreset g4;
    g4.name = "gemma-4-e2b", g4.arch = "gemma4", g4.model_name = "Gemma 4 E2B (synthetic)", g4.size_label = "E2B";
    g4.tokenizer_pre = "default";
    g4.n_embd = 1536, g4.n_layer = 35, g4.n_head = 8, g4.n_head_kv = 1, g4.head_dim = 512, g4.n_ff = 6144;
    g4.n_vocab = 262144, g4.n_ctx_train = 131072, g4.rope_base = 1000000.0, g4.rms_eps = 1e-6, g4.qk_norm = true;
    g4.post_norms = true, g4.sliding_window = 512, g4.llama3_rope = true;
    g4.gemma4 = true, g4.swa_period = 5, g4.head_dim_swa = 256, g4.shared_kv_layers = 20, g4.n_ff_shared = 12288;
    g4.n_embd_per_layer = 256, g4.rope_partial = 0.25, g4.logit_softcap = 30.0;
    v.push_back(g4);
    return v;
  }();
  return presets;
}

const SynthPreset& find_synth_preset(const std::string& name) {
  std::string names;
  for (const auto& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("unknown preset '{}' (known: {})", name, names);
}

quant::FileType synth_file_type(const std::string& name) {
  std::string n;
  for (char c : name) n += char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f16") return quant::FileType::MOSTLY_F16;
  if (n == "q8_0") return quant::FileType::MOSTLY_Q8_0;
  if (n == "q4_0") return quant::FileType::MOSTLY_Q4_0;
  if (n == "q4_k_m" || n == "q4_k") return quant::FileType::MOSTLY_Q4_K_M;
  fail("--type {}: synth writes f16, q8_0, q4_0 or q4_k_m", name);
}

int64_t SynthTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

uint64_t SynthTensor::bytes() const { return uint64_t(n_elements() / block_size(type)) * uint64_t(type_size(type)); }

std::vector<SynthTensor> synth_tensors(const SynthPreset& p, quant::FileType ftype) {
  std::vector<SynthTensor> t;
  using Init = SynthTensor::Init;
  if (p.arch == "rwkv7") t = rwkv7_synth_tensor_list(p);
  const bool attention = p.arch != "rwkv7";
  if (attention) t.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}, DType::F32, Init::Random});
  if (attention) t.push_back({"output_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
  if (p.llama3_rope) t.push_back({"rope_freqs.weight", {p.head_dim / 2}, DType::F32, Init::RopeFreqs});
  const int64_t npl = p.n_embd_per_layer;
  if (p.gemma4) {
    t.push_back({"per_layer_token_embd.weight", {npl * p.n_layer, p.n_vocab}, DType::F32, Init::Random});
    t.push_back({"per_layer_model_proj.weight", {p.n_embd, npl * p.n_layer}, DType::F32, Init::Random});
    t.push_back({"per_layer_proj_norm.weight", {npl}, DType::F32, Init::Ones});
  }
  for (int64_t i = 0; i < p.n_layer && attention; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const int64_t hd = p.head_dim_at(i), q_dim = p.n_head * hd, kv_dim = p.n_head_kv * hd;
    const bool kv = !p.gemma4 || p.has_kv(i);
    t.push_back({b + "attn_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
    t.push_back({b + "attn_q.weight", {p.n_embd, q_dim}, DType::F32, Init::Random});
    if (kv) {
      t.push_back({b + "attn_k.weight", {p.n_embd, kv_dim}, DType::F32, Init::Random});
      t.push_back({b + "attn_v.weight", {p.n_embd, kv_dim}, DType::F32, Init::Random});
    }
    t.push_back({b + "attn_output.weight", {q_dim, p.n_embd}, DType::F32, Init::Random});
    if (p.qk_norm) {
      t.push_back({b + "attn_q_norm.weight", {hd}, DType::F32, Init::Ones});
      if (kv) t.push_back({b + "attn_k_norm.weight", {hd}, DType::F32, Init::Ones});
    }
    if (p.gemma4) {
      t.push_back({b + "inp_gate.weight", {p.n_embd, npl}, DType::F32, Init::Random});
      t.push_back({b + "proj.weight", {npl, p.n_embd}, DType::F32, Init::Random});
      t.push_back({b + "post_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
      t.push_back({b + "layer_output_scale.weight", {1}, DType::F32, Init::Ones});
    }
    if (p.post_norms) {
      t.push_back({b + "post_attention_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
      t.push_back({b + "post_ffw_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
    }
    t.push_back({b + "ffn_norm.weight", {p.n_embd}, DType::F32, Init::Ones});
    const int64_t ff = p.n_ff_at(i);
    t.push_back({b + "ffn_gate.weight", {p.n_embd, ff}, DType::F32, Init::Random});
    t.push_back({b + "ffn_up.weight", {p.n_embd, ff}, DType::F32, Init::Random});
    t.push_back({b + "ffn_down.weight", {ff, p.n_embd}, DType::F32, Init::Random});
  }
  std::stable_sort(t.begin(), t.end(),
                   [](const SynthTensor& a, const SynthTensor& b) { return quant::tensor_order_less(a.name, b.name); });
  std::vector<quant::TensorDesc> descs;
  for (const auto& x : t) descs.push_back({x.name, x.ne, x.type});
  quant::ModelShape shape;
  shape.arch = p.arch, shape.n_layer = int(p.n_layer), shape.n_head = int(p.n_head), shape.n_head_kv = int(p.n_head_kv);
  quant::RecipeOptions opt;
  opt.ftype = ftype;
  const auto types = quant::choose_tensor_types(shape, descs, opt);
  for (size_t i = 0; i < t.size(); ++i) t[i].type = types[i];
  return t;
}

std::vector<float> llama3_rope_factors(int64_t head_dim, double rope_base) {
  // Llama-3 "llama3" rope scaling as the converter writes rope_freqs: factor
  // 32, low_freq_factor 1, high_freq_factor 4, original context 8192.
  const double factor = 32.0, low = 1.0, high = 4.0, original = 8192.0;
  const double low_wavelen = original / low, high_wavelen = original / high;
  std::vector<float> out;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(rope_base, double(i) / double(head_dim));
    const double wavelen = 2.0 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

std::vector<float> synth_rope_factors(const SynthPreset& p) {
  if (!p.gemma4) return llama3_rope_factors(p.head_dim, p.rope_base);
  // Gemma 4's proportional RoPE: the first rope_partial of the head's pairs rotate (factor 1), the others
  // get 1e30 (an angle of ~0), as the converter writes rope_freqs.
  std::vector<float> out(size_t(p.head_dim / 2), 1e30f);
  const auto rotating = size_t(double(p.head_dim / 2) * p.rope_partial);
  for (size_t i = 0; i < rotating && i < out.size(); ++i) out[i] = 1.0f;
  return out;
}

SynthVocab make_synth_vocab(int64_t n_vocab) {
  if (n_vocab < 258) fail("a synthetic vocabulary needs at least 258 tokens, not {}", n_vocab);
  SynthVocab v;
  v.tokens = byte_tokens();
  v.types.assign(256, 1);
  const auto order = byte_order();
  const int64_t n_fill = n_vocab - 256 - 2;
  // Level 1: byte pairs; level 2: a pair followed by a byte.
  std::vector<std::string> pairs;
  for (int a : order) {
    for (int b : order) {
      if (int64_t(pairs.size()) >= n_fill) break;
      pairs.push_back(v.tokens[size_t(a)] + v.tokens[size_t(b)]);
      v.merges.push_back(v.tokens[size_t(a)] + " " + v.tokens[size_t(b)]);
    }
  }
  for (const auto& p : pairs) v.tokens.push_back(p), v.types.push_back(1);
  for (size_t i = 0; int64_t(v.tokens.size()) < n_vocab - 2; ++i) {
    const std::string& pair = pairs[i / 256];
    const std::string byte = v.tokens[size_t(order[i % 256])];  // a copy: v.tokens grows below
    v.tokens.push_back(pair + byte);
    v.types.push_back(1);
    v.merges.push_back(pair + " " + byte);
  }
  v.bos = int32_t(v.tokens.size());
  v.tokens.push_back("<|synth_bos|>");
  v.types.push_back(3);
  v.eos = int32_t(v.tokens.size());
  v.tokens.push_back("<|synth_eos|>");
  v.types.push_back(3);
  return v;
}

void add_synth_metadata(gguf::Writer& w, const SynthPreset& p, quant::FileType ftype) {
  if (p.arch == "rwkv7") return add_rwkv7_synth_metadata(w, p, ftype);
  const std::string a = p.arch + ".";
  w.set("general.architecture", Value::from_string(p.arch));
  w.set("general.type", Value::from_string("model"));
  w.set("general.name", Value::from_string(p.model_name));
  w.set("general.size_label", Value::from_string(p.size_label));
  w.set(a + "vocab_size", u32(p.n_vocab));
  w.set(a + "context_length", u32(p.n_ctx_train));
  w.set(a + "embedding_length", u32(p.n_embd));
  w.set(a + "block_count", u32(p.n_layer));
  if (p.gemma4) {
    std::vector<Value> ff, pattern;
    for (int64_t il = 0; il < p.n_layer; ++il) {
      ff.push_back(u32(p.n_ff_at(il)));
      pattern.push_back(Value::from_bool(p.is_swa(il)));
    }
    w.set(a + "feed_forward_length", Value::from_array(ValueType::U32, std::move(ff)));
    w.set(a + "attention.sliding_window_pattern", Value::from_array(ValueType::BOOL, std::move(pattern)));
    w.set(a + "attention.key_length_swa", u32(p.head_dim_swa));
    w.set(a + "attention.value_length_swa", u32(p.head_dim_swa));
    w.set(a + "rope.dimension_count_swa", u32(p.head_dim_swa));
    w.set(a + "rope.freq_base_swa", f32(p.rope_base_swa));
    w.set(a + "attention.shared_kv_layers", u32(p.shared_kv_layers));
    w.set(a + "embedding_length_per_layer_input", u32(p.n_embd_per_layer));
    w.set(a + "final_logit_softcapping", f32(p.logit_softcap));
  } else {
    w.set(a + "feed_forward_length", u32(p.n_ff));
  }
  w.set(a + "attention.head_count", u32(p.n_head));
  w.set(a + "attention.head_count_kv", u32(p.n_head_kv));
  w.set(a + "attention.key_length", u32(p.head_dim));
  w.set(a + "attention.value_length", u32(p.head_dim));
  w.set(a + "attention.layer_norm_rms_epsilon", f32(p.rms_eps));
  w.set(a + "rope.freq_base", f32(p.rope_base));
  w.set(a + "rope.dimension_count", u32(p.head_dim));
  if (p.sliding_window > 0) w.set(a + "attention.sliding_window", u32(p.sliding_window));
  w.set("general.file_type", u32(int(ftype)));
  if (dtype_traits(quant::file_type_info(ftype).default_type).quantized) w.set("general.quantization_version", u32(2));

  const SynthVocab v = make_synth_vocab(p.n_vocab);
  std::vector<Value> tokens, types, merges;
  tokens.reserve(v.tokens.size());
  for (const auto& t : v.tokens) tokens.push_back(Value::from_string(t));
  for (int32_t t : v.types) types.push_back(Value::from_i32(t));
  merges.reserve(v.merges.size());
  for (const auto& m : v.merges) merges.push_back(Value::from_string(m));
  w.set("tokenizer.ggml.model", Value::from_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::from_string(p.tokenizer_pre));
  w.set("tokenizer.ggml.tokens", Value::from_array(ValueType::STRING, std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::from_array(ValueType::I32, std::move(types)));
  w.set("tokenizer.ggml.merges", Value::from_array(ValueType::STRING, std::move(merges)));
  w.set("tokenizer.ggml.bos_token_id", u32(v.bos));
  w.set("tokenizer.ggml.eos_token_id", u32(v.eos));
  w.set("tokenizer.ggml.add_bos_token", Value::from_bool(p.add_bos));
}

void synth_random_row(uint64_t seed, uint64_t tensor_index, int64_t row, float* out, int64_t n) {
  uint64_t state = seed;
  splitmix64(state);
  state ^= tensor_index * 0xD1B54A32D192ED03ull;
  splitmix64(state);
  state ^= uint64_t(row) * 0xAEF17502108EF2D9ull;
  // Uniform on [-a, a) with a = 0.02 * sqrt(3): standard deviation 0.02.
  constexpr float kScale = 0.02f * 1.7320508f * 2.0f / 16777216.0f;
  constexpr float kHalf = 0.02f * 1.7320508f;
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t r = splitmix64(state);
    out[i] = float(uint32_t(r) >> 8) * kScale - kHalf;
    out[i + 1] = float(uint32_t(r >> 32) >> 8) * kScale - kHalf;
  }
  if (i < n) out[i] = float(uint32_t(splitmix64(state)) >> 8) * kScale - kHalf;
}

}  // namespace opal::tools
