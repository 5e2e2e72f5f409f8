// `opal inspect FILE [--json]`: what a GGUF file holds, without reading tensor data.
#include <nlohmann/json.hpp>

#include <map>

#include "core/error.h"
#include "core/gguf.h"
#include "tools/commands.h"

namespace opal::tools {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  bool all_keys = false;
};

int run_inspect(const InspectOptions& o) {
  gguf::File f = gguf::File::open(o.path);
  const std::string arch = f.get_string("general.architecture", "");
  uint64_t n_params = 0, n_bytes = 0;
  std::map<std::string, int> type_counts;
  for (const auto& t : f.tensors()) {
    n_params += uint64_t(t.n_elements());
    n_bytes += t.nbytes;
    type_counts[dtype_name(t.type)]++;
  }
  const double bpw = n_params ? 8.0 * double(n_bytes) / double(n_params) : 0.0;

  if (o.json) {
    nlohmann::json j;
    j["file"] = o.path;
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["architecture"] = arch;
    nlohmann::json kv = nlohmann::json::object();
    for (const auto& e : f.kvs()) kv[e.key] = e.value.to_display(o.all_keys ? 1000000 : 8);
    j["metadata"] = kv;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : f.tensors())
      ts.push_back({{"name", t.name}, {"type", dtype_name(t.type)}, {"shape", t.ne}, {"bytes", t.nbytes},
                    {"offset", t.offset}, {"flat_blocks", t.flat_blocks}});
    j["tensors"] = ts;
    j["totals"] = {{"tensors", f.tensors().size()}, {"parameters", n_params}, {"bytes", n_bytes},
                   {"bits_per_weight", bpw}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("file:          {}\n", o.path);
  fmt::print("gguf version:  {}   alignment: {}   data offset: {}\n", f.version(), f.alignment(), f.data_offset());
  fmt::print("architecture:  {}\n", arch.empty() ? "(none)" : arch);
  fmt::print("\nmetadata ({} keys):\n", f.kvs().size());
  for (const auto& e : f.kvs()) fmt::print("  {:<44} {}\n", e.key, e.value.to_display(o.all_keys ? 1000000 : 8));
  fmt::print("\ntensors ({}):\n", f.tensors().size());
  fmt::print("  {:<40} {:<8} {:<24} {:>12}\n", "name", "type", "shape", "bytes");
  for (const auto& t : f.tensors())
    fmt::print("  {:<40} {:<8} {:<24} {:>12}{}\n", t.name, dtype_name(t.type), t.shape_string(), t.nbytes,
               t.flat_blocks ? "  (rows are not whole blocks: read as one flat block stream)" : "");
  fmt::print("\ntotals: {} parameters, {} bytes ({:.2f} MiB), {:.2f} bits per weight\n", n_params, n_bytes,
             double(n_bytes) / (1024.0 * 1024.0), bpw);
  std::string types;
  for (const auto& [name, n] : type_counts) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, n);
  fmt::print("tensor types: {}\n", types);
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Show a GGUF file's metadata, tensors and totals");
  sub->add_option("file", o->path, "GGUF file")->required();
  sub->add_flag("--json", o->json, "Print JSON");
  sub->add_flag("--all", o->all_keys, "Show arrays in full");
  set_action(sub, [o] { return run_inspect(*o); });
}

}  // namespace opal::tools
