// `opal inspect FILE [--json] [--all]`: what a GGUF file holds, from its header
// alone (the file is mapped and no tensor data is read).
//
// The report is built once as JSON (the --json output) and the text form is
// printed from it, so both always carry the same facts: general info, the
// `<arch>.*` hyperparameters, a tokenizer summary read from raw metadata (no
// tokenizer library), the chat template, the tensor table and totals, and any
// other metadata. Without --all, arrays longer than 64 items are summarised.
#include <nlohmann/json.hpp>

#include <map>

#include "core/error.h"
#include "core/gguf.h"
#include "core/quant/recipe.h"
#include "tools/commands.h"

namespace opal::tools {
namespace {

using json = nlohmann::ordered_json;

struct InspectOptions {
  std::string path;
  bool json = false;
  bool all = false;
};

constexpr size_t kFullArrayMax = 64;  // longer arrays are summarised unless --all
constexpr size_t kArrayHead = 8;

json scalar_json(const gguf::Value& v) {
  switch (v.type) {
    case gguf::ValueType::U8:
    case gguf::ValueType::U16:
    case gguf::ValueType::U32:
    case gguf::ValueType::U64: return v.u;
    case gguf::ValueType::I8:
    case gguf::ValueType::I16:
    case gguf::ValueType::I32:
    case gguf::ValueType::I64: return v.i;
    case gguf::ValueType::F32:
    case gguf::ValueType::F64: return v.f;
    case gguf::ValueType::BOOL: return v.u != 0;
    case gguf::ValueType::STRING: return v.str;
    case gguf::ValueType::ARRAY: break;
  }
  return nullptr;
}

// A value as JSON: scalars as themselves, arrays in full when short (or with
// --all), else {"array": elem type, "count": n, "head": [first items]}.
json value_json(const gguf::Value& v, bool all) {
  if (v.type != gguf::ValueType::ARRAY) return scalar_json(v);
  if (all || v.array.size() <= kFullArrayMax) {
    json a = json::array();
    for (const auto& e : v.array) a.push_back(value_json(e, all));
    return a;
  }
  json head = json::array();
  for (size_t k = 0; k < kArrayHead; ++k) head.push_back(value_json(v.array[k], false));
  return {{"array", gguf::value_type_name(v.elem_type)}, {"count", v.array.size()}, {"head", head}};
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string first_line(const std::string& s, size_t max) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > max) line = line.substr(0, max) + "...";
  return line;
}

json general_json(const gguf::File& f, bool all) {
  json g = json::object();
  g["name"] = f.has("general.name") ? json(f.get_string("general.name")) : json(nullptr);
  g["architecture"] = f.has("general.architecture") ? json(f.get_string("general.architecture")) : json(nullptr);
  if (f.has("general.file_type")) {
    const int64_t ft = f.get_int("general.file_type", 0);
    g["file_type"] = ft;
    const char* ft_name = quant::file_type_display_name(ft);
    g["file_type_name"] = ft_name ? ft_name : "unknown, may not work";
  } else {
    g["file_type"] = nullptr;
    g["file_type_name"] = nullptr;
  }
  g["quantization_version"] =
      f.has("general.quantization_version") ? json(f.get_int("general.quantization_version", 0)) : json(nullptr);
  for (const auto& kv : f.kvs()) {
    if (!starts_with(kv.key, "general.")) continue;
    const std::string k = kv.key.substr(8);
    if (!g.contains(k)) g[k] = value_json(kv.value, all);
  }
  return g;
}

// Every `<arch>.*` key, named without the prefix, in file order.
json hparams_json(const gguf::File& f, const std::string& arch, bool all) {
  json h = json::object();
  if (arch.empty()) return h;
  for (const auto& kv : f.kvs())
    if (starts_with(kv.key, arch + ".")) h[kv.key.substr(arch.size() + 1)] = value_json(kv.value, all);
  return h;
}

// Token types as llama.cpp numbers them (llama_token_type).
const char* token_type_name(int64_t t) {
  switch (t) {
    case 0: return "undefined";
    case 1: return "normal";
    case 2: return "unknown";
    case 3: return "control";
    case 4: return "user_defined";
    case 5: return "unused";
    case 6: return "byte";
    default: return "other";
  }
}

json tokenizer_json(const gguf::File& f) {
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  if (!f.has("tokenizer.ggml.model") && !tokens) return nullptr;
  if (tokens && (tokens->type != gguf::ValueType::ARRAY || tokens->elem_type != gguf::ValueType::STRING))
    fail("{}: key 'tokenizer.ggml.tokens' must be an array of strings", f.path());
  json t = json::object();
  t["model"] = f.has("tokenizer.ggml.model") ? json(f.get_string("tokenizer.ggml.model")) : json(nullptr);
  t["pre"] = f.has("tokenizer.ggml.pre") ? json(f.get_string("tokenizer.ggml.pre")) : json(nullptr);
  const size_t n_vocab = tokens ? tokens->array.size() : 0;
  t["vocab_size"] = n_vocab;
  const gguf::Value* merges = f.find("tokenizer.ggml.merges");
  t["merges"] = merges && merges->type == gguf::ValueType::ARRAY ? json(merges->array.size()) : json(nullptr);
  t["has_scores"] = f.has("tokenizer.ggml.scores");
  json special = json::object();
  for (const auto& kv : f.kvs()) {
    if (!starts_with(kv.key, "tokenizer.ggml.") || !ends_with(kv.key, "_token_id")) continue;
    const std::string role = kv.key.substr(15, kv.key.size() - 15 - 9);
    if (!kv.value.is_integer()) {
      special[role] = {{"id", value_json(kv.value, false)}, {"text", nullptr}};
      continue;
    }
    const int64_t id = kv.value.as_int(kv.key);
    json e = {{"id", id}};
    if (id >= 0 && uint64_t(id) < n_vocab) e["text"] = tokens->array[size_t(id)].str;
    else e["text"] = nullptr;  // e.g. 4294967295 (u32 -1): "none"
    special[role] = e;
  }
  t["special"] = special;
  json flags = json::object();
  for (const auto& kv : f.kvs())
    if (starts_with(kv.key, "tokenizer.ggml.add_") || kv.key == "tokenizer.ggml.remove_extra_whitespaces")
      flags[kv.key.substr(15)] = value_json(kv.value, false);
  t["flags"] = flags;
  json types = json::object();
  const gguf::Value* tt = f.find("tokenizer.ggml.token_type");
  int64_t n_control = 0, n_user = 0;
  if (tt && tt->type == gguf::ValueType::ARRAY) {
    std::map<std::string, int64_t> counts;
    for (const auto& e : tt->array) {
      const int64_t x = e.is_integer() ? e.as_int() : -1;
      counts[token_type_name(x)]++;
      n_control += x == 3;
      n_user += x == 4;
    }
    for (const auto& [k, n] : counts) types[k] = n;
  }
  t["token_types"] = types;
  t["control_tokens"] = n_control;
  t["user_defined_tokens"] = n_user;
  return t;
}

json chat_template_json(const gguf::File& f) {
  json c = {{"present", false}};
  const gguf::Value* v = f.find("tokenizer.chat_template");
  if (v && v->type == gguf::ValueType::STRING) {
    c["present"] = true;
    c["length"] = v->str.size();
    c["first_line"] = first_line(v->str, 120);
  }
  json named = json::array();
  for (const auto& kv : f.kvs())
    if (starts_with(kv.key, "tokenizer.chat_template.")) named.push_back(kv.key.substr(24));
  c["named"] = named;
  return c;
}

json report_json(const gguf::File& f, const InspectOptions& o) {
  json j;
  j["file"] = o.path;
  j["file_size"] = f.file_size();
  j["gguf"] = {{"version", f.version()},
               {"alignment", f.alignment()},
               {"data_offset", f.data_offset()},
               {"metadata_keys", f.kvs().size()},
               {"tensors", f.tensors().size()}};
  j["general"] = general_json(f, o.all);
  const std::string arch = f.has("general.architecture") ? f.get_string("general.architecture") : "";
  j["hyperparameters"] = hparams_json(f, arch, o.all);
  j["tokenizer"] = tokenizer_json(f);
  j["chat_template"] = chat_template_json(f);

  uint64_t n_params = 0, n_bytes = 0, n_flat = 0;
  std::map<std::string, uint64_t> type_counts;
  json ts = json::array();
  for (const auto& t : f.tensors()) {
    n_params += uint64_t(t.n_elements());
    n_bytes += t.nbytes;
    n_flat += t.flat_blocks;
    type_counts[dtype_name(t.type)]++;
    ts.push_back({{"name", t.name},
                  {"type", dtype_name(t.type)},
                  {"shape", t.ne},
                  {"elements", t.n_elements()},
                  {"bytes", t.nbytes},
                  {"offset", t.offset},
                  {"flat_blocks", t.flat_blocks}});
  }
  j["tensors"] = ts;
  json types = json::object();
  for (const auto& [name, n] : type_counts) types[name] = n;
  j["totals"] = {{"tensors", f.tensors().size()},
                 {"parameters", n_params},
                 {"bytes", n_bytes},
                 {"mib", double(n_bytes) / (1024.0 * 1024.0)},
                 {"bits_per_weight", n_params ? 8.0 * double(n_bytes) / double(n_params) : 0.0},
                 {"types", types},
                 {"flat_block_tensors", n_flat}};
  json notes = json::array();
  if (n_flat)
    notes.push_back(fmt::format(
        "{} tensor(s) have rows that are not a whole number of blocks (ne0 is not a multiple of the block size) "
        "but a whole number of blocks in total: an old quantizer cut them as one flat block stream. They must be "
        "dequantized as one flat block stream, never row by row (see docs/gguf.md).",
        n_flat));
  j["notes"] = notes;

  json meta = json::array();
  for (const auto& kv : f.kvs()) {
    json e = {{"key", kv.key}, {"type", gguf::value_type_name(kv.value.type)}, {"value", value_json(kv.value, o.all)}};
    if (kv.value.type == gguf::ValueType::ARRAY) {
      e["elem_type"] = gguf::value_type_name(kv.value.elem_type);
      e["count"] = kv.value.array.size();
    }
    meta.push_back(e);
  }
  j["metadata"] = meta;
  return j;
}

// ------------------------------------------------------------------ text form

std::string grouped(uint64_t n) {
  std::string s = std::to_string(n);
  for (int k = int(s.size()) - 3; k > 0; k -= 3) s.insert(size_t(k), 1, ',');
  return s;
}

// Escapes control characters so that a token or template line stays on one line.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  return out;
}

std::string text_of(const json& v) {
  if (v.is_null()) return "(none)";
  if (v.is_string()) return "\"" + printable(v.get<std::string>()) + "\"";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  if (v.is_number()) return v.dump();
  if (v.is_object() && v.contains("count"))
    return fmt::format("[{} x {}] {}, ...", v["count"].get<uint64_t>(), v["array"].get<std::string>(),
                       v["head"].dump(-1, ' ', false, json::error_handler_t::replace));
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

void print_text(const json& j, bool all) {
  auto row = [](const std::string& k, const std::string& v) { fmt::print("  {:<34} {}\n", k, v); };
  fmt::print("file: {} ({} bytes)\n", j["file"].get<std::string>(), grouped(j["file_size"].get<uint64_t>()));
  const json& g = j["gguf"];
  fmt::print("gguf: version {}, alignment {}, data offset {}, {} metadata keys, {} tensors\n",
             g["version"].get<uint32_t>(), g["alignment"].get<uint64_t>(), g["data_offset"].get<uint64_t>(),
             g["metadata_keys"].get<uint64_t>(), g["tensors"].get<uint64_t>());

  fmt::print("\ngeneral\n");
  const json& gen = j["general"];
  row("name", text_of(gen["name"]));
  row("architecture", text_of(gen["architecture"]));
  row("file type", gen["file_type"].is_null()
                       ? "(none)"
                       : fmt::format("{} ({})", gen["file_type"].dump(), gen["file_type_name"].get<std::string>()));
  row("quantization version", text_of(gen["quantization_version"]));
  for (const auto& [k, v] : gen.items())
    if (k != "name" && k != "architecture" && k != "file_type" && k != "file_type_name" && k != "quantization_version")
      row(k, text_of(v));

  fmt::print("\nhyperparameters{}\n",
             gen["architecture"].is_null() ? "" : " (" + gen["architecture"].get<std::string>() + ".*)");
  if (j["hyperparameters"].empty()) fmt::print("  (none)\n");
  for (const auto& [k, v] : j["hyperparameters"].items()) row(k, text_of(v));

  fmt::print("\ntokenizer\n");
  const json& t = j["tokenizer"];
  if (t.is_null()) {
    fmt::print("  (none)\n");
  } else {
    row("model", text_of(t["model"]));
    row("pre", text_of(t["pre"]));
    row("vocab size", grouped(t["vocab_size"].get<uint64_t>()));
    row("merges", t["merges"].is_null() ? "(none)" : grouped(t["merges"].get<uint64_t>()));
    row("scores", t["has_scores"].get<bool>() ? "yes" : "no");
    for (const auto& [role, e] : t["special"].items())
      row(role + " token",
          fmt::format("{} {}", e["id"].dump(), e["text"].is_null() ? "(no such token)" : text_of(e["text"])));
    for (const auto& [k, v] : t["flags"].items()) row(k, text_of(v));
    row("control tokens", grouped(t["control_tokens"].get<uint64_t>()));
    row("user-defined tokens", grouped(t["user_defined_tokens"].get<uint64_t>()));
    std::string types;
    for (const auto& [k, n] : t["token_types"].items())
      types += fmt::format("{}{} {}", types.empty() ? "" : ", ", k, grouped(n.get<uint64_t>()));
    row("token types", types.empty() ? "(none)" : types);
  }

  const json& c = j["chat_template"];
  fmt::print("\nchat template\n");
  if (c["present"].get<bool>())
    row("present",
        fmt::format("yes, {} bytes; first line: {}", grouped(c["length"].get<uint64_t>()), text_of(c["first_line"])));
  else row("present", "no");
  if (!c["named"].empty()) row("named templates", text_of(c["named"]));

  fmt::print("\nother metadata{}\n", all ? "" : " (arrays shortened; --all shows them in full)");
  const std::string arch = gen["architecture"].is_null() ? "" : gen["architecture"].get<std::string>() + ".";
  int shown = 0;
  for (const auto& e : j["metadata"]) {
    const std::string key = e["key"].get<std::string>();
    const bool summarised = key == "tokenizer.ggml.model" || key == "tokenizer.ggml.pre" ||
                            starts_with(key, "tokenizer.ggml.add_") || ends_with(key, "_token_id") ||
                            key == "tokenizer.ggml.remove_extra_whitespaces" || key == "tokenizer.chat_template";
    if (starts_with(key, "general.") || (!arch.empty() && starts_with(key, arch)) || summarised) continue;
    row(key, text_of(e["value"]));
    ++shown;
  }
  if (!shown) fmt::print("  (none)\n");

  fmt::print("\ntensors ({})\n", j["tensors"].size());
  if (!j["tensors"].empty()) fmt::print("  {:<44} {:<8} {:<26} {:>14}\n", "name", "type", "shape", "bytes");
  for (const auto& tn : j["tensors"]) {
    std::string shape = "[";
    for (const auto& d : tn["shape"]) shape += (shape.size() > 1 ? ", " : "") + d.dump();
    shape += "]";
    fmt::print("  {:<44} {:<8} {:<26} {:>14}{}\n", tn["name"].get<std::string>(), tn["type"].get<std::string>(), shape,
               grouped(tn["bytes"].get<uint64_t>()), tn["flat_blocks"].get<bool>() ? "  *flat blocks" : "");
  }

  const json& tot = j["totals"];
  fmt::print("\ntotals\n");
  row("parameters", grouped(tot["parameters"].get<uint64_t>()));
  row("tensor bytes", fmt::format("{} ({:.2f} MiB)", grouped(tot["bytes"].get<uint64_t>()), tot["mib"].get<double>()));
  row("bits per weight", fmt::format("{:.2f}", tot["bits_per_weight"].get<double>()));
  std::string types;
  for (const auto& [k, n] : tot["types"].items())
    types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", k, n.get<uint64_t>());
  row("tensor types", types.empty() ? "(none)" : types);
  for (const auto& n : j["notes"]) fmt::print("\nnote: {}\n", n.get<std::string>());
}

int run_inspect(const InspectOptions& o) {
  const gguf::File f = gguf::File::open(o.path);
  const json j = report_json(f, o);
  if (o.json) fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace));
  else print_text(j, o.all);
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Show a GGUF file's metadata, tokenizer, tensors and totals");
  sub->add_option("file", o->path, "GGUF file")->required();
  sub->add_flag("--json", o->json, "Print the report as JSON");
  sub->add_flag("--all", o->all, "Show metadata arrays in full");
  set_action(sub, [o] { return run_inspect(*o); });
}

}  // namespace opal::tools
