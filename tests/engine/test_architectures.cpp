// The architecture table (models/architecture.cpp): Llama, Qwen2, Qwen3 and
// Qwen3-MoE are rows of one DecoderDesc built by one decoder; the seams the
// next families need (block kind, per-layer attention kind, norm placement,
// embedding scaling, GELU FFN) are named in the description and rejected
// with a clear error until they are built. Their logits are pinned by
// test_fidelity.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/architecture.h"
#include "models/decoder.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

TEST(Architectures, TheRows) {
  EXPECT_EQ(architecture_names(), (std::vector<std::string>{"llama", "qwen2", "qwen3", "qwen3moe", "rwkv7"}));
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
    EXPECT_EQ(a.build, &build_decoder) << n;
  }
  EXPECT_THROW(find_architecture("gemma3"), Error);
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

TEST(Architectures, UnbuiltSeamsAreNamedErrors) {
  expect_rejected({.block = BlockKind::Recurrent}, "recurrent block");
  expect_rejected({.attention = AttentionPattern::SlidingThenGlobal, .sliding_period = 6}, "sliding-window");
  expect_rejected({.norms = NormPlacement::PreAndPost}, "post-FFN norms");
  expect_rejected({.embed_scale = EmbedScale::SqrtEmbd}, "embedding scaling");
  expect_rejected({.ffn = FfnKind::GeluGated}, "GELU");
}

TEST(Architectures, LayerAttentionKinds) {
  HParams hp;
  hp.n_rot = 64;
  hp.rope_freq_base = 500000.0f;
  hp.rope_mode = RopeMode::Neox;
  const LayerAttention g = layer_attention(DecoderDesc{}, hp, 3);
  EXPECT_EQ(g.kind, AttentionKind::Global);
  EXPECT_EQ(g.rope.freq_base, 500000.0f);
  EXPECT_EQ(g.rope.n_rot, 64);
  DecoderDesc gemma3{.attention = AttentionPattern::SlidingThenGlobal, .sliding_period = 6};
  for (int64_t il = 0; il < 12; ++il)
    EXPECT_EQ(layer_attention(gemma3, hp, il).kind,
              il == 5 || il == 11 ? AttentionKind::Global : AttentionKind::SlidingWindow)
        << il;
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
