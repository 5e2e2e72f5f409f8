// The ET host glue (backends/et/host): one-op graphs scheduled onto an
// EtDevice, first over the fake driver (host models of the kernels read the
// argument blob and device memory the executor staged: argument layout,
// staging, address resolution, fault -> CPU fallback, stats, perf counters),
// then on the in-process emulator with the real kernel image.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/fake/fake_driver.h"
#include "backends/et/host/et_device.h"
#include "backends/et/kernels/et_kernel_images.h"
#include "backends/factory/backend_factory.h"
#include "backends/factory/op_cases.h"
#include "graph/registry.h"
#include "graph/scheduler.h"
#include "support/test_support.h"

namespace opal {
namespace {

using et::FakeDriver;
using et::FakeLaunch;
using et::LaunchResult;

// ADD / MUL f32 on the host through the blob, as the ABI describes them.
LaunchResult fake_all(FakeLaunch& l) {
  auto h = l.arg<EtArgsHeader>(0);
  if (h.abi_version != ET_ABI_VERSION || h.blob_bytes != l.request.args.size()) {
    LaunchResult r;
    r.status = et::LaunchStatus::KernelFailed;
    r.device_status = ET_STATUS_BAD_ABI;
    return r;
  }
  if (h.kernel_id != ET_K_ADD_F32 && h.kernel_id != ET_K_MUL_F32) {
    LaunchResult r;
    r.status = et::LaunchStatus::KernelFailed;
    r.device_status = ET_STATUS_NO_KERNEL;
    return r;
  }
  auto a = l.arg<EtBinaryArgs>(0);
  auto elem = [&](const EtTensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) -> float* {
    uint64_t off = uint64_t(i0 % t.ne[0]) * t.nb[0] + uint64_t(i1 % t.ne[1]) * t.nb[1] +
                   uint64_t(i2 % t.ne[2]) * t.nb[2] + uint64_t(i3 % t.ne[3]) * t.nb[3];
    return reinterpret_cast<float*>(l.mem(t.addr + off, 4));
  };
  for (int64_t i3 = 0; i3 < a.dst.ne[3]; i3++)
    for (int64_t i2 = 0; i2 < a.dst.ne[2]; i2++)
      for (int64_t i1 = 0; i1 < a.dst.ne[1]; i1++)
        for (int64_t i0 = 0; i0 < a.dst.ne[0]; i0++) {
          float x = *elem(a.a, i0, i1, i2, i3), y = *elem(a.b, i0, i1, i2, i3);
          *elem(a.dst, i0, i1, i2, i3) = h.kernel_id == ET_K_ADD_F32 ? x + y : x * y;
        }
  return {};
}

struct CaseRun {
  std::unique_ptr<Registry> reg;
  std::unique_ptr<ScheduledGraph> sg;
  std::vector<std::unique_ptr<Buffer>> weights;
  Tensor* out = nullptr;
  std::vector<float> result;
};

// Builds case `c`, uploads its weights to `target` when it takes them, schedules and runs it.
CaseRun run_case(const OpCase& c, std::unique_ptr<Registry> reg, Device* target, RunHooks* hooks = nullptr,
                 int runs = 1) {
  CaseRun r;
  r.reg = std::move(reg);
  auto g = std::make_unique<Graph>();
  BuiltCase bc = build_case(c, *g, 77);
  for (BuiltCase::Weight& w : bc.weights) {
    Device* d = &r.reg->host();
    if (target && target->supports_weight(*w.tensor, {bc.out})) d = target;
    BufferType& bt = d->weight_buffer_type();
    auto buf = bt.allocate(std::max<uint64_t>(bt.weight_size(*w.tensor), 64));
    bt.upload_weight(*w.tensor, w.bytes.data(), *buf, 0);
    r.weights.push_back(std::move(buf));
  }
  r.out = bc.out;
  r.sg = Scheduler(*r.reg).schedule(std::move(g));
  bc.fill();
  for (int i = 0; i < runs; i++) r.sg->run(hooks);
  r.result.resize(size_t(r.out->n_elements()));
  std::memcpy(r.result.data(), r.out->data, r.result.size() * 4);
  return r;
}

std::vector<float> cpu_result(const OpCase& c) { return run_case(c, make_registry({}, 1), nullptr).result; }

struct FakeEt {
  std::unique_ptr<Registry> reg;
  EtDevice* et = nullptr;
  FakeDriver* fake = nullptr;
};

FakeEt fake_et() {
  FakeEt f;
  f.reg = make_registry({}, 1);
  auto drv = std::make_unique<FakeDriver>(et::HartSet{0x1, 0xF, 2});
  f.fake = drv.get();
  f.fake->add_kernel("all", fake_all);
  EtOptions o;
  o.driver = "fake";
  o.harts = et::HartSet{0x1, 0xF, 2};
  std::span<const uint8_t> img = et::et_kernel_image("all");
  auto dev = std::make_unique<EtDevice>(o, std::move(drv), std::vector<uint8_t>(img.begin(), img.end()));
  f.et = dev.get();
  f.reg->add(std::move(dev));
  return f;
}

class CountingHooks : public RunHooks {
 public:
  void after_node(const Device& dev, const Tensor&, const char* kernel) override {
    if (dev.name() == "et") kernels.push_back(kernel);
  }
  void node_phase(const Device& dev, const Tensor&, const char* phase, int64_t s, int64_t e) override {
    phases.push_back(phase);
    EXPECT_LE(s, e);
  }
  void node_counter(const Device&, const Tensor&, const char* name, double v) override { counters[name] = v; }
  std::vector<std::string> kernels, phases;
  std::map<std::string, double> counters;
};

bool have_images() { return !et::et_kernel_image("all").empty(); }

}  // namespace

TEST(EtDevice, FakeDriverRunsAddWithStagedOperands) {
  if (!have_images()) GTEST_SKIP() << et::et_kernels_unavailable_reason();
  const OpCase c{Op::Add, DType::F32, 7, 1, 1000};
  FakeEt f = fake_et();
  CountingHooks hooks;
  CaseRun r = run_case(c, std::move(f.reg), f.et, &hooks);
  EXPECT_EQ(r.sg->placement(r.out).device, f.et) << r.sg->placement(r.out).reason;
  EXPECT_EQ(r.result, cpu_result(c));  // a + b in f32: bit-exact
  ASSERT_EQ(f.fake->history().size(), 1u);
  EtBinaryArgs a;
  ASSERT_EQ(f.fake->history()[0].args.size(), sizeof a);
  std::memcpy(&a, f.fake->history()[0].args.data(), sizeof a);
  EXPECT_EQ(a.h.kernel_id, uint32_t(ET_K_ADD_F32));
  EXPECT_EQ(a.h.minion_mask, 0xFu);
  EXPECT_EQ(a.dst.ne[0], 1000);
  EXPECT_EQ(a.dst.ne[1], 7);
  EXPECT_EQ(a.dst.nb[1], 4000u);
  EXPECT_GE(a.a.addr, ET_HEAP_BASE);
  EXPECT_EQ(f.et->et_stats().nodes_run, 1u);
  EXPECT_EQ(f.et->et_stats().launches, 1u);
  EXPECT_GE(f.et->et_stats().bytes_staged_in, 7u * 1000 * 4);
  EXPECT_EQ(f.et->et_stats().bytes_staged_out, 7u * 1000 * 4);
  EXPECT_EQ(hooks.kernels, std::vector<std::string>{"add_f32"});
  EXPECT_EQ(hooks.phases, (std::vector<std::string>{"stage", "launch", "unstage"}));
  EXPECT_EQ(hooks.counters.at("et_harts"), 8);
  EXPECT_GT(hooks.counters.at("et_staged_bytes"), 0);
}

TEST(EtDevice, AFaultingLaunchFallsBackToTheCpu) {
  if (!have_images()) GTEST_SKIP() << et::et_kernels_unavailable_reason();
  const OpCase c{Op::Mul, DType::F32, 3, 1, 512};
  FakeEt f = fake_et();
  LaunchResult trap;
  trap.status = et::LaunchStatus::Trap;
  trap.hart = 5;
  trap.mcause = 30;
  f.fake->inject_fault("all", trap);
  CountingHooks hooks;
  testing::internal::CaptureStderr();
  CaseRun r = run_case(c, std::move(f.reg), f.et, &hooks, 2);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.result, cpu_result(c));
  EXPECT_NE(err.find("mul_f32"), std::string::npos) << err;
  EXPECT_NE(err.find("trap on hart 5"), std::string::npos) << err;
  EXPECT_EQ(f.et->et_stats().nodes_fallback, 2u);  // the node stays on the CPU after its fault
  EXPECT_EQ(f.fake->launches, 1u);
  EXPECT_EQ(hooks.kernels, (std::vector<std::string>{"et-cpu-fallback", "et-cpu-fallback"}));
  EXPECT_EQ(f.et->stats().get("nodes_fallback"), 2);
}

TEST(EtDevice, SupportReasons) {
  if (!have_images()) GTEST_SKIP() << et::et_kernels_unavailable_reason();
  FakeEt f = fake_et();
  Graph g;
  BuiltCase div = build_case({Op::Div, DType::F32, 2, 1, 64}, g, 1, false);
  EXPECT_NE(f.et->supports(*div.out).reason.find("no ET kernel for DIV"), std::string::npos);
  BuiltCase q41 = build_case({Op::MulMat, DType::Q4_1, 2, 8, 64}, g, 1, false);
  EXPECT_NE(f.et->supports(*q41.out).reason.find("weight type q4_1"), std::string::npos);
  BuiltCase add = build_case({Op::Add, DType::F32, 2, 1, 64}, g, 1, false);
  EXPECT_TRUE(f.et->supports(*add.out)) << f.et->supports(*add.out).reason;
  for (uint32_t id : f.et->kernels()) EXPECT_NE(et_kernel_name(id), nullptr) << id;
  EXPECT_TRUE(f.et->kernels().count(ET_K_ADD_F32));
}

TEST(EtDevice, UnavailableBackendSaysWhy) {
  EXPECT_NE(et_unavailable_reason("etrt").find("not built"), std::string::npos);
  test::expect_error([] { make_registry({"et:card"}, 1); }, {"ET backend is unavailable", "etrt"});
}

TEST(EtDevice, SysemuRunsAddAndReportsCycles) {
  if (!et_unavailable_reason().empty()) GTEST_SKIP() << et_unavailable_reason();
  const OpCase c{Op::Add, DType::F32, 5, 1, 1000};
  auto reg = make_registry({}, 1);
  EtOptions o;
  o.harts = et::HartSet{0x1, 0xF, 2};
  auto dev = make_et_device(o);
  EtDevice* et = dev.get();
  reg->add(std::move(dev));
  EXPECT_NE(et->description().find("sysemu"), std::string::npos);
  CountingHooks hooks;
  CaseRun r = run_case(c, std::move(reg), et, &hooks);
  EXPECT_EQ(r.sg->placement(r.out).device, et);
  EXPECT_EQ(r.result, cpu_result(c));
  EXPECT_EQ(et->et_stats().nodes_run, 1u);
  EXPECT_GT(hooks.counters.at("et_cycles"), 0);
  EXPECT_GT(hooks.counters.at("et_kernel_cycles"), 0);
  EXPECT_GT(et->stats().get("emulated_cycles"), 0);
}

}  // namespace opal
