// `opal inspect` on every shared GGUF (text and --json) and on every file of
// the corrupt corpus. Expected figures come from the shared data's own records
// (models/PROVENANCE.md, the MANIFEST.json files written by an independent
// inspector) and from llama-quantize's file types, never from Opal itself.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/gguf.h"
#include "support/test_support.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct CmdResult {
  int status = -1;
  std::string out;
};

CmdResult inspect(const std::string& args) {
  CmdResult r;
  r.status = opal::test::run_command(opal::test::opal_binary() + " inspect " + args, &r.out);
  return r;
}

std::string quoted(const std::string& p) { return "'" + p + "'"; }

std::vector<std::string> shared_ggufs() {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(opal::test::shared_dir()))
    if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}

// n_params per file from the table in models/PROVENANCE.md.
std::map<std::string, uint64_t> provenance_params() {
  std::ifstream in(opal::test::shared_path("models/PROVENANCE.md"));
  std::map<std::string, uint64_t> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '|')) cols.push_back(c);
    if (cols.size() < 7) continue;
    auto name = cols[1];
    name.erase(std::remove_if(name.begin(), name.end(), [](char x) { return x == '`' || x == ' '; }), name.end());
    auto n = cols[6];
    n.erase(std::remove_if(n.begin(), n.end(), [](char x) { return !std::isdigit((unsigned char)x); }), n.end());
    if (!n.empty()) out[name] = std::stoull(n);
  }
  return out;
}

json load_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

}  // namespace

TEST(Inspect, EverySharedGgufInTextAndJson) {
  const auto files = shared_ggufs();
  ASSERT_GE(files.size(), 40u);
  const size_t stride = opal::test::binary_sweep_stride();
  for (size_t i = 0; i < files.size(); i += stride) {
    const std::string& path = files[i];
    SCOPED_TRACE(path);
    CmdResult text = inspect(quoted(path));
    ASSERT_EQ(text.status, 0) << text.out;
    EXPECT_NE(text.out.find("\ntotals\n"), std::string::npos);
    EXPECT_NE(text.out.find("\ntokenizer\n"), std::string::npos);
    CmdResult js = inspect(quoted(path) + " --json");
    ASSERT_EQ(js.status, 0) << js.out.substr(0, 2000);
    const json j = json::parse(js.out);
    const json& tot = j["totals"];
    uint64_t params = 0, bytes = 0;
    for (const auto& t : j["tensors"]) {
      int64_t n = 1;
      for (const auto& d : t["shape"]) n *= d.get<int64_t>();
      EXPECT_EQ(t["elements"].get<int64_t>(), n);
      params += uint64_t(n);
      bytes += t["bytes"].get<uint64_t>();
      EXPECT_LE(t["offset"].get<uint64_t>() + t["bytes"].get<uint64_t>() + j["gguf"]["data_offset"].get<uint64_t>(),
                fs::file_size(path));
    }
    EXPECT_EQ(tot["parameters"].get<uint64_t>(), params);
    EXPECT_EQ(tot["bytes"].get<uint64_t>(), bytes);
    EXPECT_EQ(tot["tensors"].get<size_t>(), j["tensors"].size());
    if (params) {
      EXPECT_DOUBLE_EQ(tot["bits_per_weight"].get<double>(), 8.0 * double(bytes) / double(params));
      EXPECT_GT(tot["bits_per_weight"].get<double>(), 1.5);
      EXPECT_LE(tot["bits_per_weight"].get<double>(), 32.0);
    }
    EXPECT_EQ(j["gguf"]["metadata_keys"].get<size_t>(), j["metadata"].size());
    EXPECT_FALSE(j["general"]["architecture"].is_null());
    ASSERT_FALSE(j["tokenizer"].is_null());
    EXPECT_GT(j["tokenizer"]["vocab_size"].get<uint64_t>(), 0u);
  }
}

TEST(Inspect, ModelParameterCountsMatchProvenance) {
  const auto want = provenance_params();
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(want.at("stories260K.gguf"), 292800u);
  for (const auto& [name, n] : want) {
    SCOPED_TRACE(name);
    CmdResult js = inspect(quoted(opal::test::shared_path("models/" + name)) + " --json");
    ASSERT_EQ(js.status, 0) << js.out;
    EXPECT_EQ(json::parse(js.out)["totals"]["parameters"].get<uint64_t>(), n);
  }
}

// Both MANIFEST.json files hold an independent parse of each file's header.
TEST(Inspect, AgreesWithTheSharedManifests) {
  int checked = 0;
  for (const char* dir : {"models", "tokenizer-vectors"}) {
    const json manifest = load_json(opal::test::shared_path(std::string(dir) + "/MANIFEST.json"));
    for (const auto& [name, m] : manifest.items()) {
      if (fs::path(name).extension() != ".gguf" || !m.contains("n_params")) continue;
      SCOPED_TRACE(name);
      CmdResult js = inspect(quoted(opal::test::shared_path(std::string(dir) + "/" + name)) + " --json");
      ASSERT_EQ(js.status, 0) << js.out;
      const json j = json::parse(js.out);
      EXPECT_EQ(j["gguf"]["version"], m["version"]);
      EXPECT_EQ(j["gguf"]["alignment"], m["alignment"]);
      EXPECT_EQ(j["gguf"]["data_offset"], m["data_start"]);
      EXPECT_EQ(j["gguf"]["metadata_keys"], m["n_kv"]);
      EXPECT_EQ(j["general"]["architecture"], m["architecture"]);
      EXPECT_EQ(j["general"]["name"], m["name"]);
      EXPECT_EQ(j["general"]["file_type"], m["file_type"]);
      EXPECT_EQ(j["totals"]["parameters"], m["n_params"]);
      EXPECT_EQ(j["tokenizer"]["model"], m["tokenizer_model"]);
      EXPECT_EQ(j["tokenizer"]["pre"], m["tokenizer_pre"]);
      EXPECT_EQ(j["tokenizer"]["vocab_size"], m["vocab_size"]);
      EXPECT_EQ(j["tokenizer"]["merges"], m["n_merges"]);
      for (const auto& [key, id] : m["special_tokens"].items()) {
        const std::string role = key.substr(0, key.size() - 9);  // "bos_token_id" -> "bos"
        EXPECT_EQ(j["tokenizer"]["special"][role]["id"], id) << key;
      }
      for (const auto& [key, v] : m["hparams"].items()) {
        if (v.is_number_float())
          EXPECT_NEAR(j["hyperparameters"][key].get<double>(), v.get<double>(), 1e-12 * std::abs(v.get<double>()))
              << key;
        else EXPECT_EQ(j["hyperparameters"][key], v) << key;
      }
      std::map<std::string, uint64_t> types;
      for (const auto& [t, n] : j["totals"]["types"].items()) types[lower(t)] = n.get<uint64_t>();
      std::map<std::string, uint64_t> want;
      for (const auto& [t, n] : m["tensor_types"].items()) want[lower(t)] = n.get<uint64_t>();
      EXPECT_EQ(types, want);
      if (m.contains("tensors")) {
        ASSERT_EQ(j["tensors"].size(), m["tensors"].size());
        for (size_t k = 0; k < m["tensors"].size(); ++k) {
          const json& a = j["tensors"][k];
          const json& b = m["tensors"][k];
          EXPECT_EQ(a["name"], b["name"]);
          EXPECT_EQ(lower(a["type"].get<std::string>()), lower(b["type"].get<std::string>()));
          EXPECT_EQ(a["shape"], b["shape"]);
          EXPECT_EQ(a["offset"], b["offset"]);
          EXPECT_EQ(a["bytes"], b["nbytes"]);
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 16);
}

// The golden models were quantized by llama-quantize, whose file type matches the file name.
TEST(Inspect, FileTypeNamesAreLlamaCpps) {
  const std::map<std::string, std::string> want = {{"q8_0", "Q8_0"},
                                                   {"q4_0", "Q4_0"},
                                                   {"q4_1", "Q4_1"},
                                                   {"q5_0", "Q5_0"},
                                                   {"q5_1", "Q5_1"},
                                                   {"q2_k", "Q2_K - Medium"},
                                                   {"q3_k_m", "Q3_K - Medium"},
                                                   {"q4_k_m", "Q4_K - Medium"},
                                                   {"q5_k_m", "Q5_K - Medium"},
                                                   {"q6_k", "Q6_K"}};
  int checked = 0;
  for (const auto& path : shared_ggufs()) {
    if (path.find("/golden/models/") == std::string::npos) continue;
    const std::string stem = fs::path(path).stem().string();
    const std::string suffix = stem.substr(stem.rfind('-') + 1);
    auto it = want.find(suffix);
    if (it == want.end()) continue;
    SCOPED_TRACE(path);
    const json j = json::parse(inspect(quoted(path) + " --json").out);
    EXPECT_EQ(j["general"]["file_type_name"], it->second);
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(Inspect, TextShowsTokenizerTemplateAndFlatBlocks) {
  CmdResult r = inspect(quoted(opal::test::shared_path("models/stories260K.gguf")));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("bos token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 \"<s>\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4294967295 (no such token)"), std::string::npos) << r.out;  // padding: u32 -1
  EXPECT_NE(r.out.find("292,800"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("present                            no"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("note:"), std::string::npos);

  CmdResult q = inspect(quoted(opal::test::shared_path("models/tinyllamas-stories-260k-q8_0.gguf")) + " --json");
  ASSERT_EQ(q.status, 0) << q.out;
  const json j = json::parse(q.out);
  EXPECT_EQ(j["totals"]["flat_block_tensors"], 5);
  ASSERT_EQ(j["notes"].size(), 1u);
  EXPECT_NE(j["notes"][0].get<std::string>().find("flat block stream"), std::string::npos);
  EXPECT_EQ(j["general"]["file_type_name"], "Q8_0");
  EXPECT_EQ(j["general"]["quantization_version"], 2);
  CmdResult qt = inspect(quoted(opal::test::shared_path("models/tinyllamas-stories-260k-q8_0.gguf")));
  EXPECT_NE(qt.out.find("*flat blocks"), std::string::npos);
  EXPECT_NE(qt.out.find("note: 5 tensor(s)"), std::string::npos);
}

TEST(Inspect, ArraysAreSummarisedUnlessAll) {
  const std::string p = quoted(opal::test::shared_path("models/llama-2-tiny-random.gguf"));
  const json brief = json::parse(inspect(p + " --json").out);
  const json full = json::parse(inspect(p + " --json --all").out);
  auto tokens = [](const json& j) {
    for (const auto& e : j["metadata"])
      if (e["key"] == "tokenizer.ggml.tokens") return e;
    return json();
  };
  EXPECT_EQ(tokens(brief)["value"]["count"], 32000);
  EXPECT_EQ(tokens(brief)["value"]["head"].size(), 8u);
  ASSERT_TRUE(tokens(full)["value"].is_array());
  EXPECT_EQ(tokens(full)["value"].size(), 32000u);
  EXPECT_EQ(tokens(full)["value"][1], "<s>");
}

TEST(Inspect, CorruptFilesFailCleanly) {
  const std::string dir = opal::test::source_dir() + "/tests/data/corrupt";
  std::vector<fs::path> corrupt;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf" && e.path().filename() != "base.gguf") corrupt.push_back(e.path());
  std::sort(corrupt.begin(), corrupt.end());
  EXPECT_GE(corrupt.size(), 35u);
  const size_t stride = opal::test::binary_sweep_stride();
  for (size_t i = 0; i < corrupt.size(); i += stride) {
    const fs::path& path = corrupt[i];
    SCOPED_TRACE(path.string());
    CmdResult r = inspect(quoted(path.string()));
    EXPECT_GT(r.status, 0) << r.out;
    EXPECT_LT(r.status, 128) << "killed by a signal: " << r.out;
    EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("byte"), std::string::npos) << r.out;
    CmdResult j = inspect(quoted(path.string()) + " --json");
    EXPECT_GT(j.status, 0);
    EXPECT_LT(j.status, 128);
  }
  CmdResult ok = inspect(quoted(dir + "/base.gguf"));
  EXPECT_EQ(ok.status, 0) << ok.out;
  CmdResult missing = inspect("/nonexistent/model.gguf");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.out.rfind("error: /nonexistent/model.gguf: cannot open", 0), 0u) << missing.out;
}

// A file built here with a chat template, named templates and token types.
TEST(Inspect, ChatTemplateAndSpecialTokensFromABuiltFile) {
  using opal::gguf::Value;
  using opal::gguf::ValueType;
  opal::gguf::Writer w;
  w.set("general.architecture", Value::from_string("qwen3"));
  w.set("general.file_type", Value::from_u32(18));
  w.set("qwen3.block_count", Value::from_u32(3));
  w.set("qwen3.rope.freq_base", Value::from_f32(1e6f));
  w.set("tokenizer.ggml.model", Value::from_string("gpt2"));
  std::vector<Value> toks, types;
  for (const char* t : {"a", "b", "<|im_start|>", "<|im_end|>", "<tool>"}) toks.push_back(Value::from_string(t));
  for (int32_t t : {1, 1, 3, 3, 4}) types.push_back(Value::from_i32(t));
  w.set("tokenizer.ggml.tokens", Value::from_array(ValueType::STRING, toks));
  w.set("tokenizer.ggml.token_type", Value::from_array(ValueType::I32, types));
  w.set("tokenizer.ggml.merges", Value::from_array(ValueType::STRING, {Value::from_string("a b")}));
  w.set("tokenizer.ggml.eos_token_id", Value::from_u32(3));
  w.set("tokenizer.ggml.bos_token_id", Value::from_u32(7));  // out of range
  w.set("tokenizer.ggml.add_bos_token", Value::from_bool(false));
  const std::string tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  w.set("tokenizer.chat_template", Value::from_string(tmpl));
  w.set("tokenizer.chat_template.tool_use", Value::from_string("{{ tools }}"));
  const float data[4] = {1, 2, 3, 4};
  w.add_tensor("output_norm.weight", opal::DType::F32, {4}, data, sizeof data);
  const std::string path = opal::test::temp_dir() + "/chat.gguf";
  w.write(path);

  CmdResult js = inspect(quoted(path) + " --json");
  ASSERT_EQ(js.status, 0) << js.out;
  const json j = json::parse(js.out);
  EXPECT_EQ(j["general"]["file_type_name"], "Q6_K");
  EXPECT_EQ(j["hyperparameters"]["block_count"], 3);
  EXPECT_EQ(j["hyperparameters"]["rope.freq_base"], 1e6);
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 5);
  EXPECT_EQ(j["tokenizer"]["merges"], 1);
  EXPECT_EQ(j["tokenizer"]["special"]["eos"]["text"], "<|im_end|>");
  EXPECT_TRUE(j["tokenizer"]["special"]["bos"]["text"].is_null());
  EXPECT_EQ(j["tokenizer"]["flags"]["add_bos_token"], false);
  EXPECT_EQ(j["tokenizer"]["control_tokens"], 2);
  EXPECT_EQ(j["tokenizer"]["user_defined_tokens"], 1);
  EXPECT_EQ(j["chat_template"]["present"], true);
  EXPECT_EQ(j["chat_template"]["length"], tmpl.size());
  EXPECT_EQ(j["chat_template"]["first_line"], "{% for m in messages %}<|im_start|>{{ m.role }}");
  EXPECT_EQ(j["chat_template"]["named"], json::array({"tool_use"}));
  EXPECT_EQ(j["totals"]["parameters"], 4);
  EXPECT_EQ(j["totals"]["bits_per_weight"], 32.0);

  CmdResult text = inspect(quoted(path));
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("yes, " + std::to_string(tmpl.size()) + " bytes; first line: \"{% for m in messages %}"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("7 (no such token)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("eos token                          3 \"<|im_end|>\""), std::string::npos) << text.out;
}
