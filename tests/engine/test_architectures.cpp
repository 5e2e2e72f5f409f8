// The architecture table (models/architecture.cpp): Llama, Qwen2, Qwen3,
// Qwen3-MoE and Gemma 3 are rows of one DecoderDesc built by one decoder; a
// seam not built yet (the recurrent block) is named in the description and
// rejected with a clear error. Their logits are pinned by test_fidelity.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/architecture.h"
#include "models/decoder.h"
#include "models/gemma4.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

TEST(Architectures, TheRows) {
  EXPECT_EQ(architecture_names(),
            (std::vector<std::string>{"llama", "qwen2", "qwen3", "qwen3moe", "rwkv7", "gemma3", "gemma4"}));
  const DecoderDesc& llama = find_architecture("llama").decoder;
  EXPECT_EQ(llama.rope_mode, RopeMode::Normal);
  EXPECT_EQ(llama.rope_freqs, Presence::Optional);
  EXPECT_EQ(llama.qkv_bias, Presence::Optional);
  EXPECT_EQ(llama.qk_norm, Presence::Absent);
  const DecoderDesc& qwen2 = find_architecture("qwen2").decoder;
  EXPECT_EQ(qwen2.rope_mode, RopeMode::Neox);
  EXPECT_EQ(qwen2.qkv_bias, Presence::Required);
  const DecoderDesc& qwen3 = find_architecture("qwen3").decoder;
  EXPECT_EQ(qwen3.qk_norm, Presence::Required);
  EXPECT_EQ(qwen3.qkv_bias, Presence::Absent);
  EXPECT_EQ(qwen3.ffn, FfnKind::SwiGlu);
  const DecoderDesc& moe = find_architecture("qwen3moe").decoder;
  EXPECT_EQ(moe.ffn, FfnKind::MoeSwiGlu);
  EXPECT_TRUE(moe.moe_renormalize);
  // RWKV-7: a recurrent block with its own row functions (models/rwkv7.cpp), untied output.
  const Architecture& rwkv7 = find_architecture("rwkv7");
  EXPECT_EQ(rwkv7.decoder.block, BlockKind::Recurrent);
  EXPECT_EQ(rwkv7.decoder.output, OutputHead::Own);
  EXPECT_NE(rwkv7.build, &build_decoder);
  EXPECT_NE(rwkv7.read_hparams, nullptr);
  for (const std::string& n : architecture_names()) {
    if (n == "rwkv7") continue;
    const Architecture& a = find_architecture(n);
    EXPECT_EQ(a.read_hparams, nullptr) << n;
    EXPECT_EQ(a.decoder.output, OutputHead::OwnOrTied) << n;
    EXPECT_NO_THROW(require_implemented(a)) << n;
    if (n != "gemma4") {
      EXPECT_EQ(a.build, &build_decoder) << n;
    }
  }
  const DecoderDesc& gemma3 = find_architecture("gemma3").decoder;
  EXPECT_EQ(gemma3.ffn, FfnKind::GeluGated);
  EXPECT_EQ(gemma3.norms, NormPlacement::PreAndPost);
  EXPECT_EQ(gemma3.embed_scale, EmbedScale::SqrtEmbd);
  EXPECT_EQ(gemma3.attention, AttentionPattern::SlidingThenGlobal);
  EXPECT_EQ(gemma3.sliding_period, 6);
  EXPECT_EQ(gemma3.rope_base_swa, 10000.0f);
  EXPECT_EQ(gemma3.attn_scale, AttentionScale::ScaleQ);
  EXPECT_EQ(gemma3.qk_norm, Presence::Required);
  const Architecture& gemma4 = find_architecture("gemma4");
  EXPECT_EQ(gemma4.build, &build_gemma4);
  EXPECT_EQ(gemma4.decoder.default_logit_softcap, 30.0f);
  EXPECT_THROW(find_architecture("gemma9"), Error);
}

void expect_rejected(const DecoderDesc& d, const std::string& what) {
  const Architecture a{"future", d, declare_decoder, build_decoder, nullptr};
  try {
    require_implemented(a);
    ADD_FAILURE() << "accepted a row needing " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'future'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Architectures, UnbuiltSeamsAreNamedErrors) { expect_rejected({.block = BlockKind::Recurrent}, "recurrent block"); }

TEST(Architectures, LayerAttentionKinds) {
  HParams hp;
  hp.n_rot = 64;
  hp.rope_freq_base = 500000.0f;
  hp.rope_mode = RopeMode::Neox;
  const LayerAttention g = layer_attention(DecoderDesc{}, hp, 3);
  EXPECT_EQ(g.kind, AttentionKind::Global);
  EXPECT_EQ(g.rope.freq_base, 500000.0f);
  EXPECT_EQ(g.rope.n_rot, 64);
  // Gemma 3: the layers hp.swa_layers names slide, with the row's fixed RoPE base and no scaling; the
  // global ones keep the file's base and linear scaling. q is pre-scaled by 1/sqrt(head_dim).
  hp.n_layer = 12, hp.n_swa = 512, hp.head_dim_k = 256, hp.rope_freq_scale = 0.125f, hp.n_rot_swa = 64;
  for (int64_t il = 0; il < 12; ++il) hp.swa_layers.push_back(il % 6 < 5);
  const DecoderDesc& gemma3 = find_architecture("gemma3").decoder;
  for (int64_t il = 0; il < 12; ++il) {
    const LayerAttention a = layer_attention(gemma3, hp, il);
    const bool global = il == 5 || il == 11;
    EXPECT_EQ(a.kind, global ? AttentionKind::Global : AttentionKind::SlidingWindow) << il;
    EXPECT_EQ(a.window, global ? 0 : 512) << il;
    EXPECT_EQ(a.rope.freq_base, global ? 500000.0f : 10000.0f) << il;
    EXPECT_EQ(a.rope.freq_scale, global ? 0.125f : 1.0f) << il;
    EXPECT_EQ(a.q_scale, 1.0f / 16.0f) << il;
    EXPECT_EQ(a.kq_scale, 1.0f) << il;
  }
}

// attention.sliding_window_pattern as llama.cpp reads it: a period P (layer il
// slides iff il % P < P - 1), a bool per layer, or absent (gemma3: P = 6); no
// window, no sliding layers.
TEST(Architectures, SlidingWindowPatternFromMetadata) {
  const gguf::File f = gguf::File::open(test::shared_path("golden/models/tiny-gemma3-f32.gguf"));
  auto with = [&](const std::function<void(gguf::Writer&)>& edit) {
    gguf::Writer w;
    w.copy_metadata(f);
    w.set("gemma3.block_count", gguf::Value::from_u32(8));
    edit(w);
    static int n = 0;
    const std::string path = test::temp_dir() + fmt::format("/swa-pattern-{}.gguf", n++);
    w.write(path);
    const gguf::File g = gguf::File::open(path);
    return HParams::from_gguf(g, "gemma3", RopeMode::Neox, {.swa_period = 6});
  };
  auto pattern = [](const HParams& h) {
    std::string s;
    for (uint8_t x : h.swa_layers) s += x ? 'S' : 'G';
    return s;
  };
  EXPECT_EQ(pattern(with([](gguf::Writer&) {})), "SSGSSGSS");  // the golden file's P = 3
  EXPECT_EQ(pattern(with([](gguf::Writer& w) { w.remove("gemma3.attention.sliding_window_pattern"); })), "SSSSSGSS");
  std::vector<gguf::Value> bools;
  for (int i = 0; i < 8; ++i) bools.push_back(gguf::Value::from_bool(i != 3));
  EXPECT_EQ(pattern(with([&](gguf::Writer& w) {
              w.set("gemma3.attention.sliding_window_pattern", gguf::Value::from_array(gguf::ValueType::BOOL, bools));
            })),
            "SSSGSSSS");
  const HParams none = with([](gguf::Writer& w) { w.remove("gemma3.attention.sliding_window"); });
  EXPECT_TRUE(none.swa_layers.empty());
  EXPECT_EQ(with([](gguf::Writer&) {}).n_swa, 32);
  EXPECT_EQ(with([](gguf::Writer&) {}).rope_freq_base_swa, 10000.0f);
  bools.pop_back();
  EXPECT_THROW(with([&](gguf::Writer& w) {
                 w.set("gemma3.attention.sliding_window_pattern",
                       gguf::Value::from_array(gguf::ValueType::BOOL, bools));
               }),
               Error);
}

// tiny-llama-f32 written as architecture `arch`, with Q/K/V biases of
// `bias` * (1 + i % 7) when `with_biases`. Returns the file's path.
std::string write_as(const std::string& arch, bool with_biases, float bias, const std::string& name) {
  gguf::File f = gguf::File::open(test::shared_path("golden/models/tiny-llama-f32.gguf"));
  gguf::Writer w;
  w.copy_metadata(f);
  w.set("general.architecture", gguf::Value::from_string(arch));
  for (const auto& kv : f.kvs())
    if (kv.key.rfind("llama.", 0) == 0) w.set(arch + kv.key.substr(5), kv.value);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  std::vector<std::vector<float>> keep;
  if (with_biases) {
    const int64_t n_layer = f.require_int("llama.block_count");
    for (int64_t il = 0; il < n_layer; ++il)
      for (const char* what : {"attn_q", "attn_k", "attn_v"}) {
        const std::string weight = fmt::format("blk.{}.{}.weight", il, what);
        const int64_t rows = f.find_tensor(weight)->ne[1];
        auto& v = keep.emplace_back(size_t(rows));
        for (size_t i = 0; i < v.size(); ++i) v[i] = bias * float(1 + i % 7);
        w.add_tensor(fmt::format("blk.{}.{}.bias", il, what), DType::F32, {rows}, v.data(), v.size() * 4);
      }
  }
  const std::string path = test::temp_dir() + "/" + name + ".gguf";
  w.write(path);
  return path;
}

// The logits of the last of six prompt tokens.
std::vector<float> last_logits(const std::string& path) {
  auto reg = make_registry({}, 1);
  std::unique_ptr<Model> m = Model::load(path, *reg);
  Context ctx(*m, ContextParams{});
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(3 + 5 * i, i, 0, i == 5);
  ctx.decode(b);
  const float* l = ctx.logits(0);
  return std::vector<float>(l, l + m->hparams().n_vocab);
}

TEST(Architectures, LlamaTakesQkvBiasesWhenPresent) {
  const std::vector<float> plain = last_logits(write_as("llama", false, 0, "arch-llama-plain"));
  EXPECT_EQ(last_logits(write_as("llama", true, 0.0f, "arch-llama-zero-bias")), plain);
  EXPECT_NE(last_logits(write_as("llama", true, 0.05f, "arch-llama-bias")), plain);
}

// Gemma 4 files with a required tensor or key missing fail at load, naming it
// (a KV-sharing layer's source is found among the earlier layers).
TEST(Architectures, Gemma4MissingTensorOrKeyIsNamed) {
  const gguf::File f = gguf::File::open(test::shared_path("golden/models/tiny-gemma4-f32.gguf"));
  auto load_without = [&](const std::string& tensor, const std::string& key) -> std::string {
    gguf::Writer w;
    w.copy_metadata(f);
    if (!key.empty()) w.remove(key);
    for (const auto& t : f.tensors())
      if (t.name != tensor) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    const std::string path = test::temp_dir() + "/gemma4-without-" + (tensor.empty() ? key : tensor) + ".gguf";
    w.write(path);
    auto reg = make_registry({}, 1);
    try {
      Model::load(path, *reg);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(load_without("blk.1.attn_k.weight", "").find("blk.1.attn_k.weight"), std::string::npos);
  EXPECT_NE(load_without("per_layer_model_proj.weight", "").find("per_layer_model_proj.weight"), std::string::npos);
  EXPECT_NE(load_without("blk.4.layer_output_scale.weight", "").find("blk.4.layer_output_scale.weight"),
            std::string::npos);
  EXPECT_NE(load_without("", "gemma4.embedding_length_per_layer_input").find("embedding_length_per_layer_input"),
            std::string::npos);
}

TEST(Architectures, Qwen2RequiresQkvBiasesAndUsesNeoxRope) {
  auto reg = make_registry({}, 1);
  try {
    Model::load(write_as("qwen2", false, 0, "arch-qwen2-no-bias"), *reg);
    ADD_FAILURE() << "qwen2 loaded without Q/K/V biases";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.bias"), std::string::npos) << e.what();
  }
  const std::vector<float> llama = last_logits(write_as("llama", true, 0.05f, "arch-llama-bias2"));
  const std::vector<float> qwen2 = last_logits(write_as("qwen2", true, 0.05f, "arch-qwen2-bias"));
  EXPECT_NE(qwen2, llama);  // same weights, NeoX instead of interleaved RoPE
  for (float v : qwen2) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace opal
