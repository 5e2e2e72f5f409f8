// The ET host glue (backends/et/host): one-op graphs scheduled onto an
// EtDevice, first over the fake driver (host models of the kernels read the
// argument blob and device memory the executor staged: argument layout,
// staging, address resolution, fault -> CPU fallback, stats, perf counters),
// then on the in-process emulator with the real kernel image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/fake/fake_driver.h"
#include "backends/et/host/et_device.h"
#include "backends/et/kernels/et_kernel_images.h"
#include "backends/et/lower/lower.h"
#include "backends/et/perf/et_cost_model.h"
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

// A node with few output lines launches only the harts that can get a line (lower.h fit_harts):
// 64 floats = 4 lines -> 2 minions x 2 threads, and the blob's masks say the same.
TEST(EtDevice, SmallOutputsLaunchOnlyTheHartsTheyCanUse) {
  if (!have_images()) GTEST_SKIP() << et::et_kernels_unavailable_reason();
  const OpCase c{Op::Add, DType::F32, 1, 1, 64};
  FakeEt f = fake_et();
  CountingHooks hooks;
  CaseRun r = run_case(c, std::move(f.reg), f.et, &hooks);
  EXPECT_EQ(r.result, cpu_result(c));
  ASSERT_EQ(f.fake->history().size(), 1u);
  EXPECT_EQ(f.fake->history()[0].harts.count(), 4u);
  EXPECT_EQ(f.fake->history()[0].harts.minion_mask, 0x3u);
  EtBinaryArgs a;
  std::memcpy(&a, f.fake->history()[0].args.data(), sizeof a);
  EXPECT_EQ(a.h.minion_mask, 0x3u);
  EXPECT_EQ(a.h.shire_mask, 0x1u);
  EXPECT_EQ(hooks.counters.at("et_harts"), 4);
  // More lines than harts: every hart, and two shires' worth picks whole shires.
  Graph g;
  BuiltCase big = build_case({Op::Add, DType::F32, 4, 1, 1024}, g, 1, false);
  EXPECT_EQ(et::fit_harts(*big.out, {0x1, 0xF, 2}).count(), 8u);
  const et::HartSet two = et::fit_harts(*big.out, {0x7, 0xFFFFFFFF, 2});  // 256 lines of 192 harts
  EXPECT_EQ(two.count(), 192u);
  BuiltCase mid = build_case({Op::Add, DType::F32, 1, 1, 1280}, g, 1, false);  // 80 lines: 40 minions
  const et::HartSet two_shires = et::fit_harts(*mid.out, {0xF, 0xFFFFFFFF, 2});
  EXPECT_EQ(two_shires.shire_mask, 0x3u);  // more than one shire: whole shires
  EXPECT_EQ(two_shires.count(), 128u);
  BuiltCase row = build_case({Op::Add, DType::F32, 1, 1, 1024}, g, 1, false);  // 64 lines of 3 x 32 harts
  const et::HartSet one = et::fit_harts(*row.out, {0x7, 0xFFFFFFFF, 1});
  EXPECT_EQ(one.shire_mask, 0x3u);
  EXPECT_EQ(one.count(), 64u);
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
  BuiltCase gelu = build_case({Op::Gelu, DType::F32, 2, 1, 64}, g, 1, false);
  EXPECT_NE(f.et->supports(*gelu.out).reason.find("no ET kernel for GELU"), std::string::npos);
  for (Op op : {Op::Div, Op::Scale, Op::Softmax, Op::SumRows, Op::TopK}) {
    BuiltCase b = build_case({op, DType::F32, 2, 1, 64}, g, 1, false);
    EXPECT_TRUE(f.et->supports(*b.out)) << op_name(op) << ": " << f.et->supports(*b.out).reason;
  }
  BuiltCase router = build_case({Op::MulMat, DType::Q8_0, 7, 8, 256}, g, 1, false);  // N 8, 7 rows: row split
  EXPECT_TRUE(f.et->supports(*router.out)) << f.et->supports(*router.out).reason;
  BuiltCase q41 = build_case({Op::MulMat, DType::Q4_1, 2, 8, 64}, g, 1, false);
  EXPECT_NE(f.et->supports(*q41.out).reason.find("weight type q4_1"), std::string::npos);
  BuiltCase add = build_case({Op::Add, DType::F32, 2, 1, 64}, g, 1, false);
  EXPECT_TRUE(f.et->supports(*add.out)) << f.et->supports(*add.out).reason;
  for (uint32_t id : f.et->kernels()) EXPECT_NE(et_kernel_name(id), nullptr) << id;
  EXPECT_TRUE(f.et->kernels().count(ET_K_ADD_F32));
}

// The lowering sends prompt-sized MUL_MATs (>= tensor_rows activation rows) of the three
// tensor-unit weight types to the tensor unit, and decode rows, tensor_rows = 0 and shapes the
// tile cannot take (F16 with K % 32 != 0, N % 16 != 0) to the SIMD kernels.
TEST(EtDevice, TensorUnitChosenFromTheRowThreshold) {
  Graph g;
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    BuiltCase prompt = build_case({Op::MulMat, t, 32, 64, 256}, g, 1, false);
    BuiltCase decode = build_case({Op::MulMat, t, 1, 64, 256}, g, 1, false);
    const auto tr = et::TensorRows::all;
    EXPECT_TRUE(et::uses_tensor_unit(et::choose_kernel(*prompt.out, tr(32)).kernel_id)) << dtype_name(t);
    EXPECT_FALSE(et::uses_tensor_unit(et::choose_kernel(*prompt.out, tr(33)).kernel_id)) << dtype_name(t);
    EXPECT_FALSE(et::uses_tensor_unit(et::choose_kernel(*prompt.out, tr(0)).kernel_id)) << dtype_name(t);
    EXPECT_FALSE(et::uses_tensor_unit(et::choose_kernel(*decode.out, tr(32)).kernel_id)) << dtype_name(t);
    BuiltCase odd_n = build_case({Op::MulMat, t, 32, 24, 256}, g, 1, false);
    EXPECT_FALSE(et::uses_tensor_unit(et::choose_kernel(*odd_n.out, tr(32)).kernel_id)) << dtype_name(t);
  }
  BuiltCase f16 = build_case({Op::MulMat, DType::F16, 32, 64, 256}, g, 1, false);
  EXPECT_EQ(et::choose_kernel(*f16.out, et::TensorRows::all(16)).kernel_id, uint32_t(ET_K_MUL_MAT_TU_F16));
  BuiltCase f16_k = build_case({Op::MulMat, DType::F16, 32, 64, 72}, g, 1, false);  // K % 32 != 0
  EXPECT_EQ(et::choose_kernel(*f16_k.out, et::TensorRows::all(16)).kernel_id, uint32_t(ET_K_MUL_MAT_F16));
  // the measured defaults: F16 from 1 row, Q8_0 / Q4_0 from 2 (decode stays SIMD)
  const et::TensorRows d;
  const std::tuple<DType, int64_t, bool> cases[] = {{DType::F16, 1, true},   {DType::Q8_0, 1, false},
                                                    {DType::Q8_0, 2, true},  {DType::Q8_0, 3, true},
                                                    {DType::Q4_0, 1, false}, {DType::Q4_0, 2, true}};
  for (const auto& [t, m, tu] : cases) {
    BuiltCase b = build_case({Op::MulMat, t, m, 64, 256}, g, 1, false);
    EXPECT_EQ(et::uses_tensor_unit(et::choose_kernel(*b.out, d).kernel_id), tu) << dtype_name(t) << " m=" << m;
  }
}

// The card model's split of a SIMD MUL_MAT: N/16 harts (16 weight rows each, matmul.c) whatever
// its activation rows, two harts per minion; elementwise nodes keep a hart per output line. The
// fp16 tiles run at half the int8 rate.
TEST(EtDevice, CardModelSplitsASimdMulMatByItsWeightRows) {
  Graph g;
  const et::CardModel& m = et::card_model();
  BuiltCase mm = build_case({Op::MulMat, DType::Q8_0, 32, 576, 576}, g, 1, false);
  const uint64_t insns = 18'000'000;  // 1 ms on the 18 minions 36 harts fill
  EXPECT_NEAR(et::predict_node_s(*mm.out, insns, ET_K_MUL_MAT_Q8_0), insns / (18 * m.clock_hz), 1e-9);
  BuiltCase add = build_case({Op::Add, DType::F32, 32, 1, 576}, g, 1, false);
  const double add_minions = double(add.out->nbytes() / 64 / 2);  // a hart per output line
  EXPECT_NEAR(et::predict_node_s(*add.out, insns, ET_K_ADD_F32), insns / (add_minions * m.clock_hz), 1e-9);
  BuiltCase f16 = build_case({Op::MulMat, DType::F16, 32, 576, 576}, g, 1, false);
  BuiltCase q8 = build_case({Op::MulMat, DType::Q8_0, 32, 576, 576}, g, 1, false);
  EXPECT_NEAR(et::tensor_unit_s(*f16.out), 2 * et::tensor_unit_s(*q8.out), 1e-12);
  // 72 items (36 x 2) on 72 minions, 18 tiles of 8,192 MACs each at 64 int8 MACs per cycle
  EXPECT_NEAR(et::tensor_unit_s(*q8.out), 18 * 8192.0 / 64 / m.clock_hz, 1e-12);
}

// The crossover of the tensor unit (docs/PERF.md "The tensor-unit crossover"): one MUL_MAT of
// SmolLM2's attention shape (K = N = 576) per weight type and activation rows M, on the emulator
// (1 shire, 64 harts, op by op) through the SIMD kernel (tensor_rows = 0) and the tensor unit
// (tensor_rows = 1): the emulated instructions (every hart's kernel cycles) and the card model's
// node time (the launch's fixed cost left out), as a markdown table. Minutes of emulation: with
// OPAL_ET_CROSSOVER=1 only; OPAL_ET_CROSSOVER_M (e.g. "2,3") and OPAL_ET_CROSSOVER_TYPES (e.g.
// "q8_0,q4_0") pick rows of the table.
std::vector<std::string> crossover_list(const char* env, const char* fallback) {
  const char* v = std::getenv(env);
  std::string s = v && *v ? v : fallback;
  std::vector<std::string> out;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

TEST(EtDevice, TensorUnitCrossoverTable) {
  if (!et_unavailable_reason().empty()) GTEST_SKIP() << et_unavailable_reason();
  const char* e = std::getenv("OPAL_ET_CROSSOVER");
  if (!e || std::string(e) != "1") GTEST_SKIP() << "set OPAL_ET_CROSSOVER=1 (minutes of emulation)";
  std::printf(
      "| type | M | SIMD instructions | tensor unit instructions | SIMD predicted us | tensor unit predicted us |"
      " tensor unit / SIMD |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& type : crossover_list("OPAL_ET_CROSSOVER_TYPES", "f16,q8_0,q4_0"))
    for (const std::string& rows : crossover_list("OPAL_ET_CROSSOVER_M", "1,2,3,4,8,16,32,64,128")) {
      const DType t = type == "f16" ? DType::F16 : type == "q8_0" ? DType::Q8_0 : DType::Q4_0;
      ASSERT_TRUE(type == "f16" || type == "q8_0" || type == "q4_0") << "OPAL_ET_CROSSOVER_TYPES: " << type;
      const int64_t m = std::stoll(rows);
      double insns[2], us[2];
      for (int tu = 0; tu < 2; ++tu) {
        auto reg = make_registry({}, 1);
        EtOptions o;
        o.fusion = false;
        o.tensor_rows = et::TensorRows::all(uint32_t(tu));
        auto dev = make_et_device(o);
        EtDevice* et = dev.get();
        reg->add(std::move(dev));
        CountingHooks hooks;
        run_case({Op::MulMat, t, m, 576, 576}, std::move(reg), et, &hooks);
        ASSERT_EQ(hooks.kernels.size(), 1u);
        EXPECT_EQ(hooks.kernels[0].find("mul_mat_tu_") == 0, tu == 1) << hooks.kernels[0];
        EXPECT_EQ(et->et_stats().nodes_fallback, 0u);
        insns[tu] = hooks.counters.at("et_insns");
        us[tu] = (et->et_stats().predicted_s - et::card_model().launch_s) * 1e6;
      }
      std::printf("| %s | %lld | %.0f | %.0f | %.2f | %.2f | %.2f |\n", dtype_name(t), (long long)m, insns[0], insns[1],
                  us[0], us[1], us[1] / us[0]);
      std::fflush(stdout);
    }
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
  EXPECT_LT(hooks.counters.at("et_kernel_cycles"), hooks.counters.at("et_cycles"));  // both count emulator cycles
  EXPECT_GT(et->stats().get("emulated_cycles"), 0);
}

}  // namespace opal
