// Per-tensor type choice for `opal quantize` (see recipe.h and docs/quantize.md).
// The rules are llama.cpp's llama_tensor_get_type for the file types Opal can
// write, with no importance matrix:
//   1. Only tensors named *weight with >= 2 dimensions are quantized, except
//      norms (*_norm.weight), MoE routers (ffn_gate_inp) and a few tiny
//      per-architecture tensors; everything else keeps its type.
//   2. --token-embedding-type / --output-tensor-type override their tensor.
//   3. For a quantized default type, unless --pure, the mixture rules below
//      (output/tied embeddings, attn_v, attn_k, ffn_down, attn_output) apply.
//   4. A type whose block does not divide ne0 falls back (K -> legacy; F16 last).
// attn_v tensors are counted in file order; ffn_down layers come from the
// counter too, or from the name "blk.N." for mixture-of-experts models.
#include "core/quant/recipe.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "core/error.h"

namespace opal::quant {
namespace {

constexpr FileTypeInfo kFileTypes[] = {
    {FileType::ALL_F32, "F32", DType::F32, "32-bit float, no quantization"},
    {FileType::MOSTLY_F16, "F16", DType::F16, "16-bit float"},
    {FileType::MOSTLY_BF16, "BF16", DType::BF16, "bfloat16"},
    {FileType::MOSTLY_Q8_0, "Q8_0", DType::Q8_0, "8.5 bpw"},
    {FileType::MOSTLY_Q4_0, "Q4_0", DType::Q4_0, "4.5 bpw"},
    {FileType::MOSTLY_Q4_1, "Q4_1", DType::Q4_1, "5.0 bpw"},
    {FileType::MOSTLY_Q5_0, "Q5_0", DType::Q5_0, "5.5 bpw"},
    {FileType::MOSTLY_Q5_1, "Q5_1", DType::Q5_1, "6.0 bpw"},
    {FileType::MOSTLY_Q2_K, "Q2_K", DType::Q2_K, "mostly Q2_K, attn_v/ffn_down/attn_output higher"},
    {FileType::MOSTLY_Q3_K_S, "Q3_K_S", DType::Q3_K, "all Q3_K"},
    {FileType::MOSTLY_Q3_K_M, "Q3_K_M", DType::Q3_K, "Q3_K, attn_v Q5_K/Q4_K, ffn_down and attn_output Q4_K"},
    {FileType::MOSTLY_Q3_K_L, "Q3_K_L", DType::Q3_K, "Q3_K, attn_v/ffn_down/attn_output Q5_K"},
    {FileType::MOSTLY_Q4_K_S, "Q4_K_S", DType::Q4_K, "Q4_K, a few attn_v/ffn_down Q5_K"},
    {FileType::MOSTLY_Q4_K_M, "Q4_K_M", DType::Q4_K, "Q4_K, some attn_v/ffn_down Q6_K"},
    {FileType::MOSTLY_Q5_K_S, "Q5_K_S", DType::Q5_K, "all Q5_K"},
    {FileType::MOSTLY_Q5_K_M, "Q5_K_M", DType::Q5_K, "Q5_K, some attn_v/ffn_down Q6_K"},
    {FileType::MOSTLY_Q6_K, "Q6_K", DType::Q6_K, "all Q6_K"},
    {FileType::MOSTLY_IQ4_NL, "IQ4_NL", DType::IQ4_NL, "4.5 bpw non-linear"},
};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower((unsigned char)x) == std::tolower((unsigned char)y);
         });
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// Layer number of "blk.N.*", or -1.
int block_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int v = -1;
  const char* b = name.data() + 4;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p == e || *p != '.') return -1;
  return v;
}

enum class Category {
  TokenEmbd,
  AttnQ,
  AttnV,
  AttnK,
  AttnQkv,
  AttnKvB,
  AttnOutput,
  FfnUp,
  FfnGate,
  FfnDown,
  Output,
  Other
};

Category categorize(const std::string& n) {
  if (n == "output.weight") return Category::Output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (contains(n, "attn_qkv.weight")) return Category::AttnQkv;
  if (contains(n, "attn_kv_b.weight")) return Category::AttnKvB;
  if (contains(n, "attn_v.weight")) return Category::AttnV;
  if (contains(n, "attn_k.weight")) return Category::AttnK;
  if (contains(n, "attn_q.weight")) return Category::AttnQ;
  if (contains(n, "attn_output.weight")) return Category::AttnOutput;
  if (contains(n, "ffn_up")) return Category::FfnUp;
  if (contains(n, "ffn_gate")) return Category::FfnGate;
  if (contains(n, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

bool is_attn_v_like(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

int n_dims(const std::vector<int64_t>& ne) {
  int n = int(ne.size());
  while (n > 1 && ne[size_t(n - 1)] == 1) --n;
  return n;
}

bool allows_quantization(const TensorDesc& t) {
  if (n_dims(t.ne) < 2) return false;
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  static constexpr std::string_view kNever[] = {"_norm.weight",
                                                "ffn_gate_inp.weight",
                                                "ffn_gate_tid2eid.weight",
                                                "altup",
                                                "laurel",
                                                "per_layer_model_proj",
                                                "ssm_conv1d",
                                                "shortconv.conv.weight",
                                                "indexer.k_proj.weight",
                                                "indexer.q_proj.weight",
                                                "time_mix_first.weight",
                                                "time_mix_w0.weight",
                                                "time_mix_w1.weight",
                                                "time_mix_w2.weight",
                                                "time_mix_v0.weight",
                                                "time_mix_v1.weight",
                                                "time_mix_v2.weight",
                                                "time_mix_a0.weight",
                                                "time_mix_a1.weight",
                                                "time_mix_a2.weight",
                                                "time_mix_g1.weight",
                                                "time_mix_g2.weight",
                                                "time_mix_decay_w1.weight",
                                                "time_mix_decay_w2.weight",
                                                "time_mix_lerp_fused.weight",
                                                "attn_rel_b.weight",
                                                ".position_embd",
                                                "sam.pos_embd",
                                                "sam.neck.",
                                                "sam.net_",
                                                ".rel_pos",
                                                ".patch_embd",
                                                ".patch_merger",
                                                "a.rvq.codebook",
                                                "mm.a.code_embd"};
  for (auto part : kNever)
    if (contains(n, part)) return false;
  if (n == "position_embd.weight" || n == "token_types.weight") return false;
  return true;
}

// More bits for the first and last eighth of the layers and every third in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

struct Counters {
  int n_attention_wv = 0, i_attention_wv = 0;
  int n_layer = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  bool tied_embeddings = true;
};

// Rule 3: the mixture rules for one tensor.
DType mixture_type(const ModelShape& m, Counters& c, const TensorDesc& t, Category cat, FileType ft, DType type,
                   const RecipeOptions& opt) {
  using F = FileType;
  auto layer_of = [&](int counter) {
    if (m.n_expert <= 1) return counter;
    const int i = block_index(t.name);
    if (i < 0) fail("quantize: cannot tell the layer of tensor {}", t.name);
    if (i >= c.n_layer) fail("quantize: tensor {} is in layer {}, but the model has {} layers", t.name, i, c.n_layer);
    return i;
  };
  const bool falcon = m.arch == "falcon";

  if (cat == Category::Output || (c.tied_embeddings && cat == Category::TokenEmbd)) {
    if (opt.output_type) return *opt.output_type;
    if (falcon || t.ne[0] % block_size(type) != 0) return DType::Q8_0;
    return type != DType::Q8_0 ? DType::Q6_K : type;
  }
  if (cat == Category::TokenEmbd) return opt.token_embd_type ? *opt.token_embd_type : type;

  if (is_attn_v_like(cat)) {
    if (ft == F::MOSTLY_Q2_K) type = m.n_gqa() >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_M) type = c.i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft == F::MOSTLY_Q3_K_L) type = DType::Q5_K;
    else if (ft == F::MOSTLY_IQ4_NL && m.n_gqa() >= 4) type = DType::Q5_K;
    else if ((ft == F::MOSTLY_Q4_K_M || ft == F::MOSTLY_Q5_K_M) && use_more_bits(c.i_attention_wv, c.n_attention_wv))
      type = DType::Q6_K;
    else if (ft == F::MOSTLY_Q4_K_S && c.i_attention_wv < 4) type = DType::Q5_K;
    const bool is_70b = m.arch == "llama" && m.n_layer == 80 && m.n_head != m.n_head_kv;
    if (is_70b && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
    if (m.n_expert == 8) type = DType::Q8_0;
    ++c.i_attention_wv;
  } else if (cat == Category::AttnK) {
    if (m.n_expert == 8) type = DType::Q8_0;
  } else if (cat == Category::FfnDown) {
    const int i_layer = layer_of(c.i_ffn_down), n_layer = c.n_layer;
    if (ft == F::MOSTLY_Q2_K) type = DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_M)
      type = i_layer < n_layer / 16                       ? DType::Q5_K
             : !falcon || use_more_bits(i_layer, n_layer) ? DType::Q4_K
                                                          : DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_L) type = falcon ? DType::Q4_K : DType::Q5_K;
    else if (ft == F::MOSTLY_Q4_K_M) {
      if (falcon)
        type = i_layer < n_layer / 16 ? DType::Q6_K : use_more_bits(i_layer, n_layer) ? DType::Q5_K : DType::Q4_K;
      else if (use_more_bits(i_layer, n_layer)) type = DType::Q6_K;
    } else if (i_layer < n_layer / 8 && ft == F::MOSTLY_IQ4_NL) type = DType::Q5_K;
    else if (ft == F::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) type = DType::Q6_K;
    else if (ft == F::MOSTLY_Q4_K_S && !falcon && i_layer < n_layer / 8) type = DType::Q5_K;
    ++c.i_ffn_down;
  } else if (cat == Category::AttnOutput) {
    if (!falcon) {
      if (m.n_expert == 8) {
        if (ft == F::MOSTLY_Q2_K || ft == F::MOSTLY_Q3_K_S || ft == F::MOSTLY_Q3_K_M || ft == F::MOSTLY_IQ4_NL ||
            ft == F::MOSTLY_Q4_K_S || ft == F::MOSTLY_Q4_K_M)
          type = DType::Q5_K;
      } else {
        if (ft == F::MOSTLY_Q2_K) type = DType::Q3_K;
        else if (ft == F::MOSTLY_Q3_K_M) type = DType::Q4_K;
        else if (ft == F::MOSTLY_Q3_K_L) type = DType::Q5_K;
      }
    } else if (ft == F::MOSTLY_Q3_K_L) {
      type = DType::Q4_K;
    }
  } else if (cat == Category::AttnQkv) {
    if (ft == F::MOSTLY_Q3_K_M || ft == F::MOSTLY_Q3_K_L) type = DType::Q4_K;
    else if (ft == F::MOSTLY_Q4_K_M) type = DType::Q5_K;
    else if (ft == F::MOSTLY_Q5_K_M) type = DType::Q6_K;
  } else if (cat == Category::FfnGate) {
    ++c.i_ffn_gate;
  } else if (cat == Category::FfnUp) {
    ++c.i_ffn_up;
  }
  return type;
}

// Rule 4: a type whose blocks do not tile a row.
DType shape_fallback(const TensorDesc& t, DType type, std::vector<std::string>* notes) {
  const int64_t ncols = t.ne[0];
  if (ncols % block_size(type) == 0) return type;
  DType fb;
  switch (type) {
    case DType::Q2_K:
    case DType::Q3_K: fb = DType::Q4_0; break;
    case DType::Q4_K: fb = DType::Q5_0; break;
    case DType::Q5_K: fb = DType::Q5_1; break;
    case DType::Q6_K: fb = DType::Q8_0; break;
    case DType::IQ4_XS: fb = DType::IQ4_NL; break;
    default:
      fail("quantize: tensor {} has rows of {} elements, not a multiple of {}'s block of {}, and {} has no fallback",
           t.name, ncols, dtype_name(type), block_size(type), dtype_name(type));
  }
  if (ncols % block_size(fb) != 0) fb = DType::F16;
  if (notes)
    notes->push_back(fmt::format("{}: rows of {} are not a multiple of {} (needed by {}): using {}", t.name, ncols,
                                 block_size(type), dtype_name(type), dtype_name(fb)));
  return fb;
}

}  // namespace

std::span<const FileTypeInfo> file_types() { return kFileTypes; }

const FileTypeInfo& file_type_info(FileType t) {
  for (const auto& f : kFileTypes)
    if (f.ftype == t) return f;
  fail("unknown file type {}", int(t));
}

std::optional<FileType> parse_file_type(std::string_view s) {
  for (const auto& f : kFileTypes)
    if (iequal(f.name, s)) return f.ftype;
  if (iequal(s, "Q3_K")) return FileType::MOSTLY_Q3_K_M;
  if (iequal(s, "Q4_K")) return FileType::MOSTLY_Q4_K_M;
  if (iequal(s, "Q5_K")) return FileType::MOSTLY_Q5_K_M;
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && p == s.data() + s.size())
    for (const auto& f : kFileTypes)
      if (int(f.ftype) == v) return f.ftype;
  return std::nullopt;
}

ModelShape ModelShape::from_gguf(const gguf::File& f) {
  ModelShape m;
  m.arch = f.get_string("general.architecture", "");
  auto first_int = [&](const std::string& key, int64_t def) -> int64_t {
    const gguf::Value* v = f.find(key);
    if (!v) return def;
    if (v->type == gguf::ValueType::ARRAY) return v->array.empty() ? def : v->array[0].as_int(key);
    return v->as_int(key);
  };
  m.n_layer = int(first_int(m.arch + ".block_count", 0));
  m.n_head = int(first_int(m.arch + ".attention.head_count", 0));
  m.n_head_kv = int(first_int(m.arch + ".attention.head_count_kv", m.n_head));
  m.n_expert = int(first_int(m.arch + ".expert_count", 0));
  return m;
}

bool tensor_order_less(const std::string& a, const std::string& b) {
  const int la = block_index(a), lb = block_index(b);
  if (la != lb) return la < lb;
  return a < b;
}

std::vector<DType> choose_tensor_types(const ModelShape& model, const std::vector<TensorDesc>& tensors,
                                       const RecipeOptions& opt, std::vector<std::string>* notes) {
  const DType def = file_type_info(opt.ftype).default_type;
  const bool def_quantized = dtype_traits(def).quantized;
  Counters c;
  c.n_layer = model.n_layer;
  for (const auto& t : tensors) {
    const Category cat = categorize(t.name);
    if (is_attn_v_like(cat)) ++c.n_attention_wv;
    if (cat == Category::Output) c.tied_embeddings = false;
  }
  std::vector<DType> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (!allows_quantization(t)) {
      out.push_back(t.type);
      continue;
    }
    const Category cat = categorize(t.name);
    if (opt.token_embd_type && cat == Category::TokenEmbd) {
      out.push_back(*opt.token_embd_type);
      continue;
    }
    if (opt.output_type && cat == Category::Output) {
      out.push_back(*opt.output_type);
      continue;
    }
    DType type = def;
    if (def_quantized) {
      if (!opt.pure) type = mixture_type(model, c, t, cat, opt.ftype, type, opt);
      type = shape_fallback(t, type, notes);
    }
    out.push_back(type);
  }
  return out;
}

const char* file_type_display_name(int64_t ft) {
  switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 4: return "Q4_1, some F16";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 19: return "IQ2_XXS - 2.0625 bpw";
    case 20: return "IQ2_XS - 2.3125 bpw";
    case 21: return "Q2_K - Small";
    case 22: return "IQ3_XS - 3.3 bpw";
    case 23: return "IQ3_XXS - 3.0625 bpw";
    case 24: return "IQ1_S - 1.5625 bpw";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 26: return "IQ3_S - 3.4375 bpw";
    case 27: return "IQ3_S mix - 3.66 bpw";
    case 28: return "IQ2_S - 2.5 bpw";
    case 29: return "IQ2_M - 2.7 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 31: return "IQ1_M - 1.75 bpw";
    case 32: return "BF16";
    case 36: return "TQ1_0 - 1.69 bpw ternary";
    case 37: return "TQ2_0 - 2.06 bpw ternary";
    case 38: return "MXFP4 MoE";
    default: return nullptr;
  }
}

}  // namespace opal::quant
