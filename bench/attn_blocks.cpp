// A prompt's attention at depth with -fa 0 (ops/attention.cpp's block path) and -fa 1 (flash-*), one thread,
// CPU time:
//   prompt/<model>/d<depth>/<isa>: one layer's ATTENTION for 512 tokens of one sequence at positions
//     depth .. depth + 511 over an f16 K and V cache holding depth + 512 cells in position order (the
//     batch's own cells included, as after its KV_STORE). FLOPs = 2 (dk + dv) per (query head, visible
//     cell): the dots and the V accumulation, not the softmax.
//   dots/<model>/<isa>, attend_v/<model>/<isa>: the two block helpers alone on one chunk of 256
//     widened cells (kBlockCells) that every row of a block sees (m = 64 rows for qwen3, 63 for
//     smollm2: the block sizes of ops/attention.cpp up to stop 28, whose SmolLM2 blocks are 126 rows since), so
//     their inputs sit in L1/L2 as in the op.
//   attend_v_lanes/<model>/<isa>: the V accumulation of ops/attention.cpp since stop 19 on one chunk of 1024
//     cells (kBlockVCells) that every row sees: round_p_lanes (p scaled, rounded to f16 and stored lane-major)
//     and attend_v_lanes16_cells (lane by lane, the lane's rows in L1); GFLOP/s as attend_v's (the rounding's
//     time counted in, its FLOPs not).
//   softmax/<model>/d<depth>/<isa>: scale_max, softmax_exp (exp_sum_block where the ISA has it, as the op) and
//     scale_round_f16 over a block's score rows (m rows of depth + 512 cells), the op's passes between the dots
//     and V.
//   flash-prompt/<model>/d<depth>/<isa>: the same prompt with -fa 1 (ops/attention_flash.cpp: blocks of 64-256
//     query rows per kv head meet the cells kFlashTile at a time, K and V widened per tile), same cache, same
//     FLOPs (4 d per (query head, visible cell) at dk = dv = d), so it reads against prompt/ and peak/.
//   flash-dots/<model>/<isa>, flash-accum/<model>/<isa>: the tiled path's two FMA kernels alone on one
//     widened tile of kFlashTile cells for the 256 query rows of a block (FlashKernels::dots / accum).
//   peak/<isa>: a register-only FMA loop (16 independent accumulators), the one-core ceiling the
//     GFLOP/s above are read against (counter GFLOPs).
// Models: qwen3 (16 query heads, 8 kv heads, head size 128), smollm2 (9 / 3, 64); flash-* also llama32-1b
// (32 / 8, 64).
// Run: build/<dir>/bench_attn_blocks [--benchmark_filter=prompt/qwen3/d4096] [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "bench/attn_node.h"
#include "core/fp16.h"

namespace {

using namespace opal;
using namespace opal::cpu;

constexpr int64_t kTokens = 512;
constexpr int64_t kChunk = 256;  // ops/attention.cpp's kBlockCells

struct Shape {
  const char* name;
  int64_t hq, hkv, d;
};

int64_t block_rows(const Shape& sh) {
  const int64_t group = sh.hq / sh.hkv;
  return std::max<int64_t>(1, 64 / group) * group;  // ops/attention.cpp's kBlockQueries / group tokens
}

void set_flops(benchmark::State& state, double flops_per_call) {
  state.counters["GFLOPs"] =
      benchmark::Counter(double(state.iterations()) * flops_per_call * 1e-9, benchmark::Counter::kIsRate);
}

// An anonymous mapping of n uint16_t, on transparent huge pages when asked (advice before the first touch).
struct Halves {
  uint16_t* p = nullptr;
  size_t bytes = 0;
  Halves(size_t n, bool huge) : bytes((n * 2 + (2u << 20) - 1) / (2u << 20) * (2u << 20)) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    if (huge) ::madvise(m, bytes, MADV_HUGEPAGE);
    p = static_cast<uint16_t*>(m);
  }
  ~Halves() { ::munmap(p, bytes); }
  Halves(const Halves&) = delete;
  Halves& operator=(const Halves&) = delete;
};

void run_prompt(benchmark::State& state, const Shape& sh, int64_t depth, Isa isa, bool huge, bool flash = false) {
  set_isa(isa);
  const int64_t cells = depth + kTokens, e = sh.hkv * sh.d;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Halves kc(size_t(cells * e), huge), vc(size_t(cells * e), huge);
  for (int64_t i = 0; i < cells * e; ++i) kc.p[i] = f32_to_f16(nd(rng));
  for (int64_t i = 0; i < cells * e; ++i) vc.p[i] = f32_to_f16(nd(rng));
  std::vector<float> q(size_t(sh.d * sh.hq * kTokens)), out(q.size());
  for (auto& x : q) x = nd(rng);
  bench::AttentionCall call({sh.hq, sh.hkv, sh.d}, q.data(), out.data(), kTokens, depth, DType::F16, kc.p, DType::F16,
                            vc.p, cells, flash);
  if (const std::string why = call.unsupported(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : state) {
    call.run();
    benchmark::DoNotOptimize(out.data());
  }
  // token t sees depth + t + 1 cells
  const double seen = double(kTokens) * double(depth) + double(kTokens) * double(kTokens + 1) / 2.0;
  set_flops(state, 2.0 * double(2 * sh.d) * double(sh.hq) * seen);
}

struct BlockData {
  std::vector<float> k, q, p, acc;
  std::vector<int64_t> n;
};

BlockData block_data(const Shape& sh, int64_t m, int64_t cols) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  BlockData b;
  b.k.resize(size_t(kChunk * sh.d));
  b.q.resize(size_t(m * sh.d));
  b.p.resize(size_t(m * cols));
  b.acc.assign(size_t(m * 16 * sh.d), 0.0f);
  b.n.assign(size_t(m), kChunk);
  for (auto& x : b.k) x = f16_to_f32(f32_to_f16(nd(rng)));
  for (auto& x : b.q) x = f16_to_f32(f32_to_f16(nd(rng)));
  for (auto& x : b.p) x = f16_to_f32(f32_to_f16(std::fabs(nd(rng)) * 1e-3f));
  return b;
}

void run_dots(benchmark::State& state, const Shape& sh, Isa isa) {
  set_isa(isa);
  const AttnKernels* k = attn_kernels();
  const int64_t m = block_rows(sh);
  BlockData b = block_data(sh, m, kChunk);
  for (auto _ : state) {
    k->dots_f32_lanes16(b.k.data(), sh.d, b.n.data(), b.q.data(), sh.d, m, sh.d, b.p.data(), kChunk);
    benchmark::DoNotOptimize(b.p.data());
  }
  set_flops(state, 2.0 * double(m * kChunk * sh.d));
}

void run_attend_v(benchmark::State& state, const Shape& sh, Isa isa) {
  set_isa(isa);
  const AttnKernels* k = attn_kernels();
  const int64_t m = block_rows(sh);
  BlockData b = block_data(sh, m, kChunk);
  for (auto _ : state) {
    k->attend_v_lanes16_keep(b.p.data(), kChunk, b.n.data(), m, b.k.data(), sh.d, kChunk / 16, sh.d, b.acc.data());
    benchmark::DoNotOptimize(b.acc.data());
  }
  set_flops(state, 2.0 * double(m * kChunk * sh.d));
}

void run_attend_v_lanes(benchmark::State& state, const Shape& sh, Isa isa) {
  set_isa(isa);
  const AttnKernels* k = attn_kernels();
  if (!k->round_p_lanes || !k->attend_v_lanes16_cells) {
    state.SkipWithError("no attend_v_lanes16_cells");
    return;
  }
  constexpr int64_t kVChunk = 1024;  // ops/attention.cpp's kBlockVCells
  const int64_t m = block_rows(sh), ldt = (m + 15) / 16 * 16, lane_rows = kVChunk / 16;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(size_t(kVChunk * sh.d)), s(size_t(m * kVChunk)), pt(size_t(kVChunk * ldt));
  std::vector<float> acc(size_t(m * 16 * sh.d), 0.0f), inv(size_t(m), 1.0f / 300.0f);
  for (auto& x : v) x = f16_to_f32(f32_to_f16(nd(rng)));
  for (auto& x : s) x = std::exp(-std::fabs(nd(rng)));
  std::vector<int64_t> n(size_t(m), kVChunk);
  for (auto _ : state) {
    k->round_p_lanes(s.data(), kVChunk, n.data(), inv.data(), m, kVChunk, lane_rows, pt.data(), ldt);
    k->attend_v_lanes16_cells(pt.data(), ldt, n.data(), m, v.data(), sh.d, lane_rows, sh.d, acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  set_flops(state, 2.0 * double(m * kVChunk * sh.d));
}

void run_softmax(benchmark::State& state, const Shape& sh, int64_t depth, Isa isa) {
  set_isa(isa);
  const AttnKernels* k = attn_kernels();
  const int64_t m = block_rows(sh), n = depth + kTokens, ld = (n + 31) / 16 * 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> src(size_t(m * ld)), s(src.size());
  for (auto& x : src) x = nd(rng);
  for (auto _ : state) {
    state.PauseTiming();
    std::copy(src.begin(), src.end(), s.begin());
    state.ResumeTiming();
    for (int64_t j = 0; j < m; ++j) {
      float* row = s.data() + j * ld;
      const float mx = k->scale_max(row, n, 0.125f);
      const int64_t n16 = (n + 15) / 16 * 16;
      for (int64_t r = n; r < n16; ++r) row[r] = -INFINITY;
      const double sum = k->exp_sum_block ? k->exp_sum_block(row, n16, mx) : k->softmax_exp(row, n16, mx);
      k->scale_round_f16(row, n, float(1.0 / sum));
    }
    benchmark::DoNotOptimize(s.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * m * n);
}

// One widened tile (kFlashTile cells) against the 256 query rows of a prompt block (flash_rows' most).
constexpr int64_t kFlashBlockRows = 256;

void run_flash_kernel(benchmark::State& state, const Shape& sh, Isa isa, bool dots) {
  set_isa(isa);
  const FlashKernels& fk = flash_kernels();
  const int64_t m = kFlashBlockRows, n = kFlashTile, d = sh.d;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(m * d)), kv(size_t(n * d)), s(size_t(m * n)), acc(size_t(m * d), 0.0f);
  for (auto* a : {&q, &kv, &s})
    for (auto& x : *a) x = nd(rng);
  for (auto& x : s) x = std::exp(-std::fabs(x));
  for (auto _ : state) {
    if (dots) fk.dots(q.data(), d, m, kv.data(), d, n, d, 0.125f, s.data(), n);
    else fk.accum(s.data(), n, m, kv.data(), d, n, d, acc.data(), d);
    benchmark::DoNotOptimize(dots ? s.data() : acc.data());
  }
  set_flops(state, 2.0 * double(m * n * d));
}

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t n) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
  for (int64_t r = 0; r < n; ++r)
    for (auto& v : a) v = _mm512_fmadd_ps(v, x, y);
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  float r = 0.0f;
  for (float x : t) r += x;
  return r;
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t n) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-4f);
  for (int64_t r = 0; r < n; ++r)
    for (auto& v : a) v = _mm256_fmadd_ps(v, x, y);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  float r = 0.0f;
  for (float x : t) r += x;
  return r;
}

void run_peak(benchmark::State& state, Isa isa) {
  constexpr int64_t kReps = 1 << 20;
  const bool wide = isa == Isa::avx512;
  for (auto _ : state) {
    int64_t n = kReps;
    benchmark::DoNotOptimize(n);  // a fresh count each time: the call is not hoisted out of the loop
    benchmark::DoNotOptimize(wide ? fma_loop_avx512(n) : fma_loop_avx2(n));
  }
  set_flops(state, wide ? 2.0 * 16 * 16 * kReps : 2.0 * 8 * 12 * kReps);
}

const int kRegistered = [] {
  if (!host_supports(Isa::avx2)) return 0;
  const Shape shapes[] = {{"qwen3", 16, 8, 128}, {"smollm2", 9, 3, 64}};
  std::vector<Isa> isas;
  for (Isa isa : supported_isas())
    if (isa == Isa::avx512 || isa == Isa::avx2) isas.push_back(isa);
  for (Isa isa : isas)
    benchmark::RegisterBenchmark((std::string("peak/") + isa_name(isa)).c_str(),
                                 [=](benchmark::State& s) { run_peak(s, isa); });
  for (const Shape& sh : shapes)
    for (Isa isa : isas) {
      const std::string tail = std::string(sh.name) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(("dots/" + tail).c_str(), [=](benchmark::State& s) { run_dots(s, sh, isa); });
      benchmark::RegisterBenchmark(("attend_v/" + tail).c_str(),
                                   [=](benchmark::State& s) { run_attend_v(s, sh, isa); });
      benchmark::RegisterBenchmark(("attend_v_lanes/" + tail).c_str(),
                                   [=](benchmark::State& s) { run_attend_v_lanes(s, sh, isa); });
      benchmark::RegisterBenchmark(("softmax/" + std::string(sh.name) + "/d4096/" + isa_name(isa)).c_str(),
                                   [=](benchmark::State& s) { run_softmax(s, sh, 4096, isa); })
          ->Unit(benchmark::kMicrosecond);
    }
  const Shape flash_shapes[] = {{"qwen3", 16, 8, 128}, {"smollm2", 9, 3, 64}, {"llama32-1b", 32, 8, 64}};
  for (const Shape& sh : flash_shapes)
    for (Isa isa : isas) {
      const std::string tail = std::string(sh.name) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(("flash-dots/" + tail).c_str(),
                                   [=](benchmark::State& s) { run_flash_kernel(s, sh, isa, true); });
      benchmark::RegisterBenchmark(("flash-accum/" + tail).c_str(),
                                   [=](benchmark::State& s) { run_flash_kernel(s, sh, isa, false); });
    }
  for (const Shape& sh : flash_shapes)
    for (int64_t depth : {0, 4096, 16384})
      for (Isa isa : isas)
        benchmark::RegisterBenchmark(
            (std::string("flash-prompt/") + sh.name + "/d" + std::to_string(depth) + "/" + isa_name(isa)).c_str(),
            [=](benchmark::State& s) { run_prompt(s, sh, depth, isa, false, true); })
            ->Unit(benchmark::kMillisecond);
  for (const Shape& sh : shapes)
    for (int64_t depth : {0, 4096, 16384})
      for (Isa isa : isas)
        for (bool huge : {false, true}) {
          const std::string name = std::string("prompt/") + sh.name + "/d" + std::to_string(depth) + "/" +
                                   isa_name(isa) + (huge ? "/thp" : "/4k");
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
            run_prompt(s, sh, depth, isa, huge);
          })->Unit(benchmark::kMillisecond);
        }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
