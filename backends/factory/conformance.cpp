#include "backends/factory/conformance.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "backends/factory/backend_factory.h"
#include "backends/shadow/tolerance.h"
#include "core/error.h"
#include "graph/op_info.h"
#include "graph/perf/node_cost.h"
#include "graph/scheduler.h"
#if __has_include("backends/cpu/kernels/isa.h")
#include "backends/cpu/kernels/isa.h"
#define OPAL_HAVE_CPU_ISA 1
#endif

namespace opal {
namespace {

// Selects the CPU kernels ("scalar" = the reference) for what follows.
void select_isa(const std::string& name) {
#ifdef OPAL_HAVE_CPU_ISA
  cpu::set_isa(cpu::parse_isa(name));
#else
  if (name != "scalar") fail("this build has no CPU ISA selection (asked for '{}')", name);
#endif
}

struct Bench {
  std::unique_ptr<Registry> reg;
  std::vector<std::unique_ptr<Buffer>> weight_buffers;
  std::unique_ptr<ScheduledGraph> sg;
  Tensor* out = nullptr;
  Device* target = nullptr;
};

// Builds the case on a registry, uploads its weights (to `target` when it
// takes them, else the host), schedules it and fills its inputs.
Bench prepare(const OpCase& c, std::unique_ptr<Registry> reg, Device* target, uint32_t seed) {
  Bench b;
  b.reg = std::move(reg);
  b.target = target;
  auto g = std::make_unique<Graph>();
  BuiltCase bc = build_case(c, *g, seed);
  for (BuiltCase::Weight& w : bc.weights) {
    Device* d = &b.reg->host();
    if (target && target->role() != DeviceRole::Host && target->supports_weight(*w.tensor, {bc.out})) d = target;
    BufferType& bt = d->weight_buffer_type();
    auto buf = bt.allocate(std::max<uint64_t>(bt.weight_size(*w.tensor), 64));
    bt.upload_weight(*w.tensor, w.bytes.data(), *buf, 0);
    b.weight_buffers.push_back(std::move(buf));
  }
  b.out = bc.out;
  b.sg = Scheduler(*b.reg).schedule(std::move(g));
  bc.fill();
  return b;
}

std::vector<float> output_f32(const Bench& b) {
  const Tensor* o = b.out;
  std::vector<uint8_t> bytes(o->nbytes());
  b.sg->read(o, bytes.data(), bytes.size());
  std::vector<float> f(size_t(o->n_elements()));
  tensor_to_f32(*o, bytes.data(), f.data());
  return f;
}

// A weight case's rows must be whole blocks of its dtype (graph/op_info.h, OpCaseType).
bool dtype_can_be_made(const OpCase& c) {
  return op_info(c.op).case_type != OpCaseType::Weight || c.k % block_size(c.dtype) == 0;
}

void add_matmul_cases(std::vector<OpCase>& v, Op op, const std::vector<int64_t>& ms, const std::vector<int64_t>& ns,
                      const std::vector<int64_t>& ks) {
  for (DType dt : matrix_dtypes(op))
    for (int64_t m : ms)
      for (int64_t n : ns)
        for (int64_t k : ks)
          if (k % block_size(dt) == 0) v.push_back({op, dt, m, n, k});  // (no such weight otherwise)
}

}  // namespace

std::vector<std::string> cpu_isas() {
#ifdef OPAL_HAVE_CPU_ISA
  std::vector<std::string> v;
  for (cpu::Isa i : cpu::supported_isas()) v.push_back(cpu::isa_name(i));
  return v;
#else
  return {"scalar"};
#endif
}

std::string ConformanceResult::line() const {
  const char* st[] = {"OK", "FAIL", "not supported", "skipped"};
  std::string s = fmt::format("{:<14} {:<48} {}", backend, c.label(), st[status]);
  if (status == Pass && seconds > 0)
    s += fmt::format("  {:9.1f} us {:8.2f} GFLOP/s {:7.2f} GB/s", seconds * 1e6, gflops, gbps);
  else if (status == Pass || status == Fail)
    s += fmt::format("  nmse {:.3g} (max {:.3g}), max |err| {:.3g}", nmse, tolerance, max_abs);
  if (!reason.empty()) s += ": " + reason;
  return s;
}

std::vector<OpCase> conformance_cases(const std::string& set) {
  std::vector<OpCase> v;
  if (set != "ci" && set != "full" && set != "rocket" && set != "et")
    fail("unknown case set '{}' (ci, full, rocket, et)", set);
  if (set == "et") {  // ET-SoC-1 on the emulator: its dtypes, M >= 32 and K up to 8192 in a CI-sized budget
    for (DType dt : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K})
      for (int64_t m : {1, 7, 32})
        for (int64_t k : {256, 8192}) v.push_back({Op::MulMat, dt, m, 48, k});
    for (DType dt : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
      v.push_back({Op::MulMatId, dt, 7, 48, 256});
      v.push_back({Op::GetRows, dt, 7, 50, 512});
    }
    for (DType dt : {DType::F32, DType::Q8_0, DType::Q4_K}) {  // N not a multiple of 16: split by output rows
      v.push_back({Op::MulMat, dt, 7, 8, 256});
      v.push_back({Op::MulMat, dt, 32, 24, 256});
    }
    v.push_back({Op::MulMatId, DType::Q8_0, 7, 8, 256});
    for (Op op : {Op::RmsNorm, Op::Silu, Op::Mul, Op::Add, Op::Swiglu, Op::Div, Op::Scale, Op::SumRows, Op::Softmax})
      for (int64_t m : {1, 32}) v.push_back({op, DType::F32, m, 1, m == 1 ? 8192 : 1024});
    for (int64_t m : {1, 7, 32}) v.push_back({Op::Softmax, DType::F32, m, 1, 8});  // a MoE router's rows
    for (int64_t m : {1, 32}) v.push_back({Op::TopK, DType::F32, m, 1, 64});
    for (DType dt : {DType::F32, DType::F16}) v.push_back({Op::Cpy, dt, 7, 1, 1000});
    for (int64_t m : {1, 32})
      for (int var : {0, 1}) v.push_back({Op::Rope, DType::F32, m, 6, 128, var});
    for (DType dt : {DType::F32, DType::F16})
      for (int64_t m : {1, 32}) {
        v.push_back({Op::Attention, dt, m, 8, 64});
        v.push_back({Op::KvStore, dt, m, 1, 512});
      }
    return v;
  }
  if (set == "rocket") {  // the NPU's realistic matmul shapes
    add_matmul_cases(v, Op::MulMat, {32, 64, 128, 512}, {1000, 8192}, {4096, 12288});
    return v;
  }
  const bool full = set == "full";
  // K: a multiple of every block (256) and, for f32/f16/bf16, one that is not
  // a multiple of 32 either; N: not a multiple of any tile.
  const std::vector<int64_t> ms = full ? std::vector<int64_t>{1, 7, 32, 128, 512} : std::vector<int64_t>{1, 7, 32};
  add_matmul_cases(v, Op::MulMat, ms, full ? std::vector<int64_t>{33, 4097} : std::vector<int64_t>{33},
                   full ? std::vector<int64_t>{1000, 4096, 8192} : std::vector<int64_t>{1000, 512});
  add_matmul_cases(v, Op::MulMatId, full ? ms : std::vector<int64_t>{1, 7}, {33},
                   full ? std::vector<int64_t>{4096} : std::vector<int64_t>{256});
  for (DType dt : matrix_dtypes(Op::GetRows)) v.push_back({Op::GetRows, dt, 7, 50, 512});
  const std::vector<int64_t> ks = full ? std::vector<int64_t>{1, 1000, 4096, 8192} : std::vector<int64_t>{1000, 4096};
  for (Op op : {Op::RmsNorm, Op::Softmax, Op::SumRows, Op::Scale, Op::Silu, Op::Mul, Op::Add, Op::Div, Op::Swiglu,
                Op::Gelu, Op::Geglu})
    for (int64_t m : ms)
      for (int64_t k : ks) v.push_back({op, DType::F32, m, 1, k});
  for (int64_t m : ms)
    for (int var : {0, 1}) v.push_back({Op::Rope, DType::F32, m, 6, 128, var});
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t m : ms) {
      v.push_back({Op::Attention, dt, m, 8, 64});
      if (m > 4) v.push_back({Op::Attention, dt, m, 8, 64, 4});  // a sliding window of 4 positions (Gemma)
      v.push_back({Op::KvStore, dt, m, 1, 512});
      v.push_back({Op::Cpy, dt, m, 1, 1000});
    }
  }
  for (int64_t m : ms) v.push_back({Op::TopK, DType::F32, m, 1, 64});
  // Gemma's soft-capped logits (UNARY softcap): long rows (test_ops_rwkv runs a vocabulary-sized one).
  for (int64_t m : {1, 7}) v.push_back({Op::Unary, DType::F32, m, 1, full ? 8192 : 4096, int(UnaryFn::SoftCap)});
  // RWKV-7 (issue 17): 0.1B's width 768, its heads of 64 (12 of them).
  for (int64_t m : ms) {
    for (Op op : {Op::Norm, Op::L2Norm, Op::TokenShift, Op::Lerp, Op::Wkv7ValueMix})
      v.push_back({op, DType::F32, m, 1, 768});
    for (int fn = 0; fn <= int(UnaryFn::ReluSqr); ++fn) v.push_back({Op::Unary, DType::F32, m, 1, 768, fn});
    v.push_back({Op::Wkv7, DType::F32, m, 12, 64});
    v.push_back({Op::Wkv7Inputs, DType::F32, m, 12, 64});
    v.push_back({Op::Wkv7Output, DType::F32, m, 12, 64});
    v.push_back({Op::Norm, DType::F32, m, 1, 768, 1});  // the fused LayerNorm (NORM, MUL, ADD)
    v.push_back({Op::Norm, DType::F32, m, 12, 64, 1});  // the fused GroupNorm: 12 heads of 64
  }
  return v;
}

std::vector<ConformanceResult> run_conformance(const ConformanceOptions& o,
                                               const std::function<void(const ConformanceResult&)>& on_result) {
  std::vector<std::string> names = o.backends;
  if (names.empty())
    for (const BackendFactory& f : backend_factories()) names.push_back(f.name);
  for (const std::string& n : names)
    if (!find_backend_factory(n)) fail("unknown backend '{}' (known: {})", n, backend_names());
  bool op_known = o.op.empty();
  for (Op op : computing_ops()) op_known = op_known || o.op == op_name(op);
  if (!op_known) fail("unknown op '{}'", o.op);
  std::vector<OpCase> cases;
  for (const OpCase& c : conformance_cases(o.cases))
    if ((o.op.empty() || o.op == op_name(c.op)) && (o.dtype.empty() || o.dtype == dtype_name(c.dtype)))
      cases.push_back(c);

  std::vector<ConformanceResult> results;
  auto report = [&](ConformanceResult r) {
    if (on_result) on_result(r);
    results.push_back(std::move(r));
  };
  for (const std::string& name : names) {
    // The CPU once per ISA; any other backend once.
    std::vector<std::string> variants = name == "cpu" ? cpu_isas() : std::vector<std::string>{""};
    for (const std::string& isa : variants) {
      const std::string label = isa.empty() ? name : name + "/" + isa;
      for (const OpCase& c : cases) {
        ConformanceResult r;
        r.backend = label;
        r.c = c;
        if (!dtype_can_be_made(c)) {
          r.status = ConformanceResult::Skipped;
          r.reason = "K is not a whole number of blocks";
          report(r);
          continue;
        }
        try {
          // the backend under test
          if (!isa.empty()) select_isa(isa);
          std::unique_ptr<Registry> reg = make_registry({name}, o.threads);
          Device* target = nullptr;
          for (Device* d : reg->devices())
            if (name == "cpu" ? d->role() == DeviceRole::Host : d->role() != DeviceRole::Host) target = d;
          if (o.mode == ConformanceMode::Support) {
            Graph g;
            BuiltCase bc = build_case(c, g, o.seed, false);
            const Support s = target->supports(*bc.out);
            r.status = s.ok ? ConformanceResult::Pass : ConformanceResult::Unsupported;
            r.reason = s.reason;
            report(r);
            continue;
          }
          Bench dut = prepare(c, std::move(reg), target, o.seed);
          const Placement& p = dut.sg->placement(dut.out);
          if (p.device != target) {
            r.status = ConformanceResult::Unsupported;
            const Support s = target->supports(*dut.out);
            r.reason = s.ok ? p.reason : s.reason;
            report(r);
            continue;
          }
          dut.sg->run();
          if (o.mode == ConformanceMode::Perf) {
            double best = 1e30;
            for (int i = 0; i < std::max(1, o.perf_reps); ++i) {
              const auto t0 = std::chrono::steady_clock::now();
              dut.sg->run();
              best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            const NodeCost cost = node_cost(*dut.out);
            r.seconds = best;
            r.gflops = best > 0 ? cost.flops / best * 1e-9 : 0;
            r.gbps = best > 0 ? double(cost.bytes) / best * 1e-9 : 0;
            report(r);
            continue;
          }
          const std::vector<float> got = output_f32(dut);
          // the scalar reference
          select_isa("scalar");
          Bench ref = prepare(c, make_registry({}, o.threads), nullptr, o.seed);
          ref.sg->run();
          const std::vector<float> want = output_f32(ref);
          const ErrorStats e = compare_outputs(got.data(), want.data(), int64_t(want.size()));
          r.nmse = e.nmse;
          r.max_abs = e.max_abs;
          r.tolerance = max_nmse(*dut.out);
          r.status = e.nmse <= r.tolerance ? ConformanceResult::Pass : ConformanceResult::Fail;
          if (c.op == Op::TopK && r.status == ConformanceResult::Fail) r.reason = "indices differ";
          // An accelerator that faulted and handed the node to the CPU did not compute it.
          if (target->role() != DeviceRole::Host && target->stats().get("nodes_fallback") > 0) {
            r.status = ConformanceResult::Fail;
            r.reason = "the device faulted and the CPU ran the node (the fault is on stderr)";
          }
        } catch (const Error& e) {
          r.status = ConformanceResult::Skipped;
          r.reason = e.what();
        }
        report(r);
      }
    }
  }
  select_isa(cpu_isas().back());  // leave the best kernels selected
  return results;
}

}  // namespace opal
