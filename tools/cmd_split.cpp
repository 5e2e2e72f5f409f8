// `opal split IN OUT_STEM (--parts N | --split-max-tensors N)`: writes a GGUF
// model as a split model in llama.cpp's gguf-split layout,
// OUT_STEM-00001-of-0000N.gguf ...: every part a GGUF file with split.no (u16,
// from 0), split.count (u16) and split.tensors.count (i32); the first part
// holds all metadata, the others only the split keys; tensors are dealt out
// in file order. Loading the first part (-m, or -hf for a split repository)
// loads every part (core/gguf.h File::open_model).
#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"
#include "core/gguf.h"
#include "tools/commands.h"

namespace opal::tools {
namespace {

struct SplitOptions {
  std::string input, stem;
  int parts = 0, max_tensors = 0;
};

gguf::Value u16(uint64_t v) {
  gguf::Value x;
  x.type = gguf::ValueType::U16;
  x.u = v;
  return x;
}

int run_split(const SplitOptions& o) {
  if ((o.parts > 0) == (o.max_tensors > 0)) fail("give one of --parts N and --split-max-tensors N (N >= 1)");
  const gguf::File f = gguf::File::open(o.input);
  if (f.has("split.count") && f.get_int("split.count", 1) > 1) fail("{} is already a part of a split model", o.input);
  const auto& ts = f.tensors();
  if (ts.empty()) fail("{} has no tensors to split", o.input);
  const size_t per = o.max_tensors > 0 ? size_t(o.max_tensors) : (ts.size() + size_t(o.parts) - 1) / size_t(o.parts);
  const size_t n = (ts.size() + per - 1) / per;
  if (n > 9999) fail("{} parts is more than llama.cpp's naming allows (9999)", n);
  for (size_t k = 0; k < n; ++k) {
    gguf::Writer w;
    if (k == 0) {
      w.copy_metadata(f);
      w.remove("split.no");
      w.remove("split.count");
      w.remove("split.tensors.count");
    }
    w.set("split.no", u16(k));
    w.set("split.count", u16(n));
    w.set("split.tensors.count", gguf::Value::from_i32(int32_t(ts.size())));
    for (size_t i = k * per; i < std::min(ts.size(), (k + 1) * per); ++i)
      w.add_tensor(ts[i].name, ts[i].type, ts[i].ne, ts[i].data, ts[i].nbytes);
    const std::string path = fmt::format("{}-{:05d}-of-{:05d}.gguf", o.stem, k + 1, n);
    w.write(path);
    std::printf("%s\n", path.c_str());
  }
  return 0;
}

}  // namespace

void add_split_command(CLI::App& app) {
  auto o = std::make_shared<SplitOptions>();
  CLI::App* sub = app.add_subcommand("split", "Write a GGUF model as a split model (llama.cpp's gguf-split layout)");
  sub->add_option("input", o->input, "Input GGUF file")->required();
  sub->add_option("stem", o->stem, "Output name without -0000k-of-0000N.gguf")->required();
  sub->add_option("--parts", o->parts, "Number of parts (tensors dealt out evenly, in order)");
  sub->add_option("--split-max-tensors", o->max_tensors, "Most tensors per part (llama-gguf-split's flag)");
  set_action(sub, [o] { return run_split(*o); });
}

}  // namespace opal::tools
