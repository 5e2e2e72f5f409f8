// `opal synth`: random-weight GGUF models at the shapes of
// ../shared/baselines/llamacpp-cpu.md. Expected shapes, hparams and file
// sizes are read from that file (the models llama.cpp was measured on, written
// by gguf-py and llama-quantize), never from Opal. Small files use the hidden
// --layers/--vocab overrides; full-size checks use --dry-run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "core/gguf.h"
#include "core/quant.h"
#include "support/test_support.h"

namespace {

struct Shape {
  std::string arch;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  double rope_base = 0;
  bool qk_norm = false, llama3_rope = false;
};

struct Baselines {
  std::map<std::string, Shape> shapes;                             // preset -> shape
  std::map<std::pair<std::string, std::string>, double> file_mib;  // (preset, type) -> file MiB
};

const Baselines& baselines() {
  static const Baselines b = [] {
    Baselines out;
    std::ifstream in(opal::test::shared_path("baselines/llamacpp-cpu.md"));
    std::string line;
    auto num = [](const std::string& s, const std::string& pattern) -> int64_t {
      std::smatch m;
      return std::regex_search(s, m, std::regex(pattern)) ? std::stoll(m[1]) : 0;
    };
    while (std::getline(in, line)) {
      std::vector<std::string> cols;
      std::stringstream ss(line);
      std::string c;
      while (std::getline(ss, c, '|')) {
        while (!c.empty() && c.front() == ' ') c.erase(c.begin());
        while (!c.empty() && c.back() == ' ') c.pop_back();
        cols.push_back(c);
      }
      if (cols.size() == 3 && cols[2].find(" arch:") != std::string::npos) {
        Shape s;
        s.arch = cols[2].substr(0, cols[2].find(' '));
        s.n_embd = num(cols[2], "n_embd (\\d+)");
        s.n_layer = num(cols[2], "(\\d+) layers");
        s.n_head = num(cols[2], "(\\d+) heads");
        s.n_head_kv = num(cols[2], "(\\d+) KV heads");
        s.head_dim = num(cols[2], "head_dim (\\d+)");
        if (s.head_dim == 0 && s.n_head) s.head_dim = s.n_embd / s.n_head;
        s.n_ff = num(cols[2], "n_ff (\\d+)");
        s.n_vocab = num(cols[2], "vocab (\\d+)");
        std::smatch m;
        if (std::regex_search(cols[2], m, std::regex("rope base ([0-9.e]+)"))) s.rope_base = std::stod(m[1]);
        s.qk_norm = cols[2].find("QK-norm") != std::string::npos;
        s.llama3_rope = cols[2].find("Llama-3 rope scaling") != std::string::npos;
        out.shapes[cols[1]] = s;
      } else if (cols.size() >= 9 && (cols[2] == "f16" || cols[2].rfind("q", 0) == 0)) {
        out.file_mib[{cols[1], cols[2]}] = std::stod(cols[7]);
      }
    }
    return out;
  }();
  return b;
}

struct SynthRun {
  int status = -1;
  std::string out;
};

SynthRun synth(const std::string& args) {
  SynthRun r;
  r.status = opal::test::run_command(opal::test::opal_binary() + " synth " + args, &r.out);
  return r;
}

uint64_t field(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(name + ": (\\d+)"))) return 0;
  return std::stoull(m[1]);
}

// Parameters of a tied-embedding model, from the shape alone.
uint64_t expected_params(const Shape& s) {
  const int64_t q = s.n_head * s.head_dim, kv = s.n_head_kv * s.head_dim;
  int64_t layer = s.n_embd * q * 2 + s.n_embd * kv * 2 + s.n_embd * s.n_ff * 3 + 2 * s.n_embd;
  if (s.qk_norm) layer += 2 * s.head_dim;
  return uint64_t(s.n_vocab * s.n_embd + s.n_embd + s.n_layer * layer + (s.llama3_rope ? s.head_dim / 2 : 0));
}

TEST(Synth, BaselinesListThreePresets) {
  const auto& b = baselines();
  ASSERT_EQ(b.shapes.size(), 3u);
  EXPECT_EQ(b.file_mib.size(), 12u);  // 3 presets x 4 types
}

TEST(Synth, FullSizeTensorBytesMatchLlamaCppFiles) {
  // llama.cpp's file = tensors + its real tokenizer (at most ~8 MiB here).
  for (const auto& [key, mib] : baselines().file_mib) {
    const auto& [preset, type] = key;
    const SynthRun r = synth("--preset " + preset + " --type " + type + " --dry-run");
    ASSERT_EQ(r.status, 0) << r.out;
    const double got_mib = double(field(r.out, "tensor bytes")) / 1048576.0;
    EXPECT_LE(got_mib, mib + 0.5) << preset << " " << type;
    EXPECT_GE(got_mib, mib - 8.0) << preset << " " << type;
    EXPECT_EQ(field(r.out, "params"), expected_params(baselines().shapes.at(preset))) << preset;
  }
}

TEST(Synth, Q4KMUsesLlamaCppMixture) {
  // llama-quantize Q4_K_M on a tied model: token_embd is the output, so Q6_K
  // (or Q8_0 when rows are not whole 256-blocks); half of attn_v / ffn_down get Q6_K.
  const SynthRun r = synth("--preset llama32-1b --type q4_k_m --dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("token_embd.weight            q6_K"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.0.attn_v.weight          q6_K"), std::string::npos);
  EXPECT_NE(r.out.find("blk.0.attn_q.weight          q4_K"), std::string::npos);
  EXPECT_NE(r.out.find("blk.0.ffn_down.weight        q6_K"), std::string::npos);
  const SynthRun s = synth("--preset smollm2-135m --type q4_k_m --dry-run");
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_NE(s.out.find("token_embd.weight            q8_0"), std::string::npos) << s.out;  // 576 % 256 != 0
}

TEST(Synth, SmallFilesHaveThePresetShapesAndHparams) {
  const std::string dir = opal::test::temp_dir();
  for (const auto& [preset, s] : baselines().shapes) {
    const std::string path = dir + "/" + preset + ".gguf";
    const SynthRun r = synth("--preset " + preset + " --type q8_0 --layers 2 --vocab 512 -t 2 -o " + path);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto f = opal::gguf::File::open(path);
    const std::string a = s.arch + ".";
    EXPECT_EQ(f.get_string("general.architecture"), s.arch);
    EXPECT_EQ(f.get_int(a + "embedding_length", 0), s.n_embd);
    EXPECT_EQ(f.get_int(a + "block_count", 0), 2);
    EXPECT_EQ(f.get_int(a + "attention.head_count", 0), s.n_head);
    EXPECT_EQ(f.get_int(a + "attention.head_count_kv", 0), s.n_head_kv);
    EXPECT_EQ(f.get_int(a + "attention.key_length", 0), s.head_dim);
    EXPECT_EQ(f.get_int(a + "feed_forward_length", 0), s.n_ff);
    EXPECT_DOUBLE_EQ(f.get_float(a + "rope.freq_base", 0), s.rope_base);
    EXPECT_EQ(f.get_int("general.file_type", -1), 7);  // LLAMA_FTYPE_MOSTLY_Q8_0
    EXPECT_EQ(f.get_int("general.quantization_version", 0), 2);
    // Tokenizer: 512 tokens, byte-level BPE.
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array.size(), 512u);
    // Tensors.
    const int64_t q = s.n_head * s.head_dim, kv = s.n_head_kv * s.head_dim;
    auto shape = [&](const std::string& n) {
      const auto* t = f.find_tensor(n);
      return t ? t->ne : std::vector<int64_t>{};
    };
    EXPECT_EQ(shape("token_embd.weight"), (std::vector<int64_t>{s.n_embd, 512}));
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied embeddings
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(shape(b + "attn_q.weight"), (std::vector<int64_t>{s.n_embd, q})) << preset;
      EXPECT_EQ(shape(b + "attn_k.weight"), (std::vector<int64_t>{s.n_embd, kv}));
      EXPECT_EQ(shape(b + "attn_v.weight"), (std::vector<int64_t>{s.n_embd, kv}));
      EXPECT_EQ(shape(b + "attn_output.weight"), (std::vector<int64_t>{q, s.n_embd}));
      EXPECT_EQ(shape(b + "ffn_gate.weight"), (std::vector<int64_t>{s.n_embd, s.n_ff}));
      EXPECT_EQ(shape(b + "ffn_up.weight"), (std::vector<int64_t>{s.n_embd, s.n_ff}));
      EXPECT_EQ(shape(b + "ffn_down.weight"), (std::vector<int64_t>{s.n_ff, s.n_embd}));
      EXPECT_EQ(shape(b + "attn_norm.weight"), (std::vector<int64_t>{s.n_embd}));
      EXPECT_EQ(f.find_tensor(b + "attn_q_norm.weight") != nullptr, s.qk_norm) << preset;
    }
    const auto* rf = f.find_tensor("rope_freqs.weight");
    EXPECT_EQ(rf != nullptr, s.llama3_rope) << preset;
    if (rf) {
      // Llama-3 scaling: the fastest pairs are unscaled, the slowest divided by factor 32.
      ASSERT_EQ(rf->ne, (std::vector<int64_t>{s.head_dim / 2}));
      const float* v = reinterpret_cast<const float*>(rf->data);
      EXPECT_FLOAT_EQ(v[0], 1.0f);
      EXPECT_FLOAT_EQ(v[s.head_dim / 2 - 1], 32.0f);
      for (int64_t i = 1; i < s.head_dim / 2; ++i) EXPECT_GE(v[i], v[i - 1]);
    }
  }
}

TEST(Synth, WeightsAreDeterministicFromTheSeed) {
  const std::string dir = opal::test::temp_dir();
  const std::string common = "--preset smollm2-135m --type q4_0 --layers 1 --vocab 300 ";
  ASSERT_EQ(synth(common + "-s 7 -t 1 -o " + dir + "/a.gguf").status, 0);
  ASSERT_EQ(synth(common + "-s 7 -t 2 -o " + dir + "/b.gguf").status, 0);
  ASSERT_EQ(synth(common + "-s 8 -t 2 -o " + dir + "/c.gguf").status, 0);
  const std::string a = opal::test::read_file(dir + "/a.gguf"), b = opal::test::read_file(dir + "/b.gguf"),
                    c = opal::test::read_file(dir + "/c.gguf");
  ASSERT_GT(a.size(), 1000u);
  EXPECT_EQ(a, b) << "same seed, different thread count: bytes differ";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c) << "different seeds gave the same weights";
}

TEST(Synth, WeightStatistics) {
  // Uniform weights with standard deviation 0.02, mean 0; norms are 1.
  const std::string path = opal::test::temp_dir() + "/stats.gguf";
  ASSERT_EQ(synth("--preset qwen3-0.6b --type f16 --layers 1 --vocab 300 -o " + path).status, 0);
  const auto f = opal::gguf::File::open(path);
  const auto* t = f.find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, opal::DType::F16);
  std::vector<float> v(size_t(t->n_elements()));
  opal::dequantize_row(t->type, t->data, v.data(), t->n_elements());
  double mean = 0, sq = 0, mx = 0;
  for (float x : v) mean += x, sq += double(x) * x, mx = std::max(mx, double(std::fabs(x)));
  mean /= double(v.size());
  const double sd = std::sqrt(sq / double(v.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(sd, 0.02, 0.0005);
  EXPECT_LE(mx, 0.02 * std::sqrt(3.0) + 1e-4);
  const auto* norm = f.find_tensor("blk.0.attn_k_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(reinterpret_cast<const float*>(norm->data)[0], 1.0f);
}

TEST(Synth, ModelLoadsTokenizesAndRuns) {
  const std::string path = opal::test::temp_dir() + "/run.gguf";
  ASSERT_EQ(synth("--preset llama32-1b --type q4_0 --layers 1 --vocab 2000 -o " + path).status, 0);
  std::string out;
  ASSERT_EQ(
      opal::test::run_command(opal::test::opal_binary() + " tokenize --ids -m " + path + " -p 'hello world'", &out), 0)
      << out;
  EXPECT_NE(out.find('['), std::string::npos) << out;
  ASSERT_EQ(opal::test::run_command(opal::test::opal_binary() + " run -m " + path + " -p 'hello' -n 4 --temp 0", &out),
            0)
      << out;
  EXPECT_NE(out.find("generation:"), std::string::npos) << out;
}

TEST(Synth, BadFlagsFailClearly) {
  const std::string dir = opal::test::temp_dir();
  SynthRun r = synth("--preset gpt5 -o " + dir + "/x.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("smollm2-135m"), std::string::npos) << r.out;
  r = synth("--preset smollm2-135m --type q3_k -o " + dir + "/x.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("q4_k_m"), std::string::npos) << r.out;
  r = synth("--preset smollm2-135m");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("-o"), std::string::npos) << r.out;
  r = synth("--preset smollm2-135m -o /nonexistent-dir/x.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent-dir"), std::string::npos) << r.out;
  r = synth("--preset smollm2-135m --vocab 10 -o " + dir + "/x.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--vocab"), std::string::npos) << r.out;
  r = synth("-o " + dir + "/x.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--preset"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// A vocabulary past 131,072 tokens (Qwen3 has 151,936): every token and
// merge is written (the builder once read a string of a vector it was growing,
// which moves when the vector passes a power of two).
TEST(Synth, LargeVocabularyIsComplete) {
  const std::string out = opal::test::temp_dir() + "/synth-large-vocab.gguf";
  const SynthRun r = synth("--preset smollm2-135m --type q4_0 --layers 1 --vocab 140000 -o " + out + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto f = opal::gguf::File::open(out);
  const auto* tokens = f.find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array.size(), 140000u);
  const auto* merges = f.find("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_GT(merges->array.size(), 139000u);
  std::remove(out.c_str());
}

}  // namespace

namespace {

// The rwkv7-0.1b preset (issue 17): the metadata and tensor types llama.cpp's
// converter and llama-quantize write, and a file `opal run` generates from.
TEST(Synth, Rwkv7PresetLoadsAndRuns) {
  const std::string out = opal::test::temp_dir() + "/synth-rwkv7.gguf";
  const SynthRun r = synth("--preset rwkv7-0.1b --type q4_0 --layers 2 --vocab 1000 -o " + out + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto f = opal::gguf::File::open(out);
  EXPECT_EQ(f.get_string("general.architecture", ""), "rwkv7");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model", ""), "rwkv");
  EXPECT_EQ(f.get_int("rwkv7.embedding_length", 0), 768);
  EXPECT_EQ(f.get_int("rwkv7.wkv.head_size", 0), 64);
  EXPECT_EQ(f.get_int("rwkv7.attention.gate_lora_rank", 0), 128);
  EXPECT_EQ(f.get_int("rwkv7.attention.head_count", -1), 0);
  EXPECT_EQ(f.get_int("rwkv7.context_length", 0), 1048576);
  auto type_of = [&](const std::string& n) {
    const auto* t = f.find_tensor(n);
    return t ? opal::dtype_name(t->type) : std::string("missing");
  };
  EXPECT_EQ(type_of("blk.1.time_mix_key.weight"), "q4_0");
  EXPECT_EQ(type_of("blk.1.time_mix_w1.weight"), "f32") << "RWKV's LoRA weights stay f32, as llama-quantize";
  EXPECT_EQ(type_of("blk.1.time_mix_lerp_fused.weight"), "f32");
  EXPECT_EQ(type_of("output.weight"), "q6_K");
  std::string run_out;
  const int st = opal::test::run_command(
      opal::test::opal_binary() + " run -m " + out + " -p 'Hello world' -n 8 --temp 0 2>&1", &run_out);
  EXPECT_EQ(st, 0) << run_out;
  EXPECT_NE(run_out.find("generation: 8 tokens"), std::string::npos) << run_out;
  std::remove(out.c_str());
}

}  // namespace
