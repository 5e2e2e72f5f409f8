#include "backends/factory/backend_factory.h"

#include <fmt/format.h>

#include <cstdlib>

#include "backends/cpu/cpu_device.h"
#include "backends/et/host/et_device.h"
#include "backends/rocket/host/rocket_device.h"
#include "backends/test_accel/test_accel.h"
#include "core/error.h"

namespace opal {

namespace {
// OPAL_ET_TENSOR_ROWS=N (a measurement knob, docs/backends/et.md): the activation rows from which
// a Q8_0 / Q4_0 / F16 MUL_MAT runs through the ET tensor unit (every type; 0 = never); unset: the
// measured per-type defaults (EtOptions::tensor_rows).
et::TensorRows et_tensor_rows() {
  const char* v = std::getenv("OPAL_ET_TENSOR_ROWS");
  if (!v || !*v) return EtOptions{}.tensor_rows;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n > 1000000)
    fail("OPAL_ET_TENSOR_ROWS='{}': expected a row count (0 = never use the ET tensor unit)", v);
  return et::TensorRows::all(uint32_t(n));
}
// OPAL_ET_PREDICT=shapes: prediction by shape (EtOptions::predict_by_shape),
// with the coherence checker off (the instruction counts do not depend on it).
void et_predict_mode(EtOptions& o) {
  const char* v = std::getenv("OPAL_ET_PREDICT");
  if (!v || !*v) return;
  if (std::string_view(v) != "shapes")
    fail("OPAL_ET_PREDICT='{}': expected 'shapes' (emulate each distinct node shape once, docs/backends/et.md)", v);
  o.predict_by_shape = true;
  o.mem_check = false;
}
}  // namespace

const std::vector<BackendFactory>& backend_factories() {
  // One entry per backend. Keep "cpu" first: it is the host and the fallback.
  static const std::vector<BackendFactory> list = {
      {"cpu", "CPU, every op (reference kernels and the ISA kernels the host supports)",
       [](int n_threads, const BackendTuning&) -> std::unique_ptr<Device> {
         return std::make_unique<CpuDevice>(n_threads);
       }},
      {"test-accel", "test accelerator: MUL_MAT on q8_0/f16 weights in memory the CPU cannot read",
       [](int, const BackendTuning&) -> std::unique_ptr<Device> { return std::make_unique<TestAccelDevice>(); }},
      {"rocket", "RK3588 NPU, emulated (rocket register streams run in software): int8 MUL_MAT for M >= 32",
       [](int, const BackendTuning&) -> std::unique_ptr<Device> { return make_rocket_device(RocketOptions{}); }},
      {"rocket:drm", "RK3588 NPU through the mainline rocket driver (/dev/accel/accel0, one fd per core, 3 cores)",
       [](int, const BackendTuning&) -> std::unique_ptr<Device> {
         RocketOptions o;
         o.driver = "drm_accel";
         return make_rocket_device(o);
       }},
      {"et", "ET-SoC-1, emulated: kernels run on sw-sysemu in process (coherence checker on), 1 shire = 64 harts",
       [](int, const BackendTuning& t) -> std::unique_ptr<Device> {
         EtOptions o;
         o.fusion = t.et_fusion;
         o.tensor_rows = et_tensor_rows();
         et_predict_mode(o);
         return make_et_device(o);
       }},
      {"et:card", "ET-SoC-1 card through the et-platform runtime (rt::IRuntime, built only with /opt/et)",
       [](int, const BackendTuning& t) -> std::unique_ptr<Device> {
         EtOptions o;
         o.fusion = t.et_fusion;
         o.tensor_rows = et_tensor_rows();
         o.driver = "etrt";
         o.harts = et::HartSet{0xFFFFFFFF, 0xFFFFFFFF, 2};
         o.mem_check = false;
         return make_et_device(o);
       }},
  };
  return list;
}

const BackendFactory* find_backend_factory(std::string_view name) {
  for (const BackendFactory& f : backend_factories())
    if (f.name == name) return &f;
  return nullptr;
}

std::string backend_names() {
  std::string s;
  for (const BackendFactory& f : backend_factories()) s += (s.empty() ? "" : ", ") + f.name;
  return s;
}

std::vector<std::string> parse_backend_list(std::string_view list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string_view::npos) j = list.size();
    const std::string name(list.substr(i, j - i));
    if (name.empty()) {
      if (list.empty()) break;
      fail("--backend '{}': empty backend name (known: {})", list, backend_names());
    }
    if (!find_backend_factory(name)) fail("--backend: unknown backend '{}' (known: {})", name, backend_names());
    for (const std::string& n : out)
      if (n == name) fail("--backend: '{}' is named twice", name);
    out.push_back(name);
    i = j + 1;
  }
  return out;
}

std::unique_ptr<Registry> make_registry(const std::vector<std::string>& names, int n_threads,
                                        const BackendTuning& tuning) {
  auto reg = std::make_unique<Registry>();
  bool has_host = false;
  for (const std::string& n : names) {
    const BackendFactory* f = find_backend_factory(n);
    if (!f) fail("unknown backend '{}' (known: {})", n, backend_names());
    Device& d = reg->add(f->make(n_threads, tuning));
    has_host = has_host || d.role() == DeviceRole::Host;
  }
  if (!has_host) reg->add(find_backend_factory("cpu")->make(n_threads, tuning));
  return reg;
}

}  // namespace opal
