// One layer's decode attention at depth, one thread (ops/attention.cpp with
// -fa 0, ops/attention_flash.cpp with -fa 1), from a KV cache beyond the L3:
//   decode/<model>/d<depth>/fa<0|1>/<K type>-<V type>/<isa>/<pages>
// runs ATTENTION for one token at position <depth> that sees <depth> + 1
// cells of one sequence, cycling over copies of the layer's K and V caches
// totalling > 96 MB (so every call reads them from DRAM, as a decode does
// after the other layers' weights went through the caches), and reports
// bytes_per_second = the K and V bytes of the visible cells read per second
// of CPU time. Models: qwen3 (16 query heads, 8 kv heads, head size 128),
// smollm2 (9 / 3, 64), llama32-1b (32 / 8, 64: four query heads per kv head), llama3-8b (32 / 8, 128: the layer
// of Llama-3-8B and Qwen3-8B). Types: f16-f16, q8_0-q8_0, q4_0-q4_0 with
// -fa 1; f16-f16, q8_0-f16, q4_0-f16 with -fa 0 (a quantized V needs the tiled path). Pages: 4k = the cache on 4 KiB
// pages (a plain anonymous mapping, as graph/host_buffer.cpp's), thp = madvise(MADV_HUGEPAGE) on it before the first
// touch; l3 = one copy on 4 KiB pages, read again by every call (from the L3
// where it fits: Qwen3 d4096 is 16.8 MB, SmolLM2 3.1 MB), so the time is the
// arithmetic and the cache reads without DRAM's.
//   vside/<model>/d<depth>/<isa>/<pages>/<pair|heads>: the -fa 0 decode's V side alone (every query head's
//   lanes over the depth + 1 cells from the same f16 V caches, fixed probabilities, then the lanes' reduction):
//   pair = accumulate_f16 head after head over all the cells (the op's pair_output), heads = accumulate_f16_heads
//   for the heads of each kv head (the staged decode's heads_output); bytes_per_second counts the V bytes only.
//   decode-t2/<model>/d<depth>/fa0/f16-f16/<isa>/<pages>/<split|pairs>: the -fa 0 decode on a pool of two threads
//   (wall time: the other thread's work counts), the split inside the pairs (attention_split_pairs) taken at any
//   depth (split) or never (pairs: whole (token, head) pairs per chunk); SmolLM2's 9 heads do not divide among the
//   pool's chunks, so its default takes the split from split_min_cells.
//   probe/<pages>: one core's streaming read of a 256 MiB buffer (16 MiB
//   slices, AVX2 loads), the ceiling the decode is measured against.
//   probe-span/4k/<MB>mb: the same over spans of 16 MB to 1.2 GB (2 MiB slices): the L3 keeps part of a cycled
//   span a few times its size, so the decode rows' > 96 MB of copies read faster than a model's token (stop 31).
//   cold/llama32-1b/d<depth>/fa0/f16-f16/<isa>: the -fa 0 node over copies spanning 1.2 GB ($OPAL_BENCH_SPAN_MB),
//   timed call by call: warm (after the previous call), again (the same copy, from the L3), cold (after 76 MB of
//   other memory streamed, as a token's weights do between layers) and idle (the same, then 2 ms without memory
//   traffic); medians in us (docs/perf/long-contexts3.md, "Stop 31, gap").
// $OPAL_BENCH_SPAN_MB sets the decode rows' span of copies (default 96 MiB).
// Run: build/<dir>/bench_attn_decode [--benchmark_filter=decode/qwen3/d4096]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "bench/attn_node.h"
#include "core/fp16.h"
#include "core/quant.h"

namespace {

using namespace opal;
using namespace opal::cpu;

// The bytes a row's copies of the cache span: $OPAL_BENCH_SPAN_MB (MB), else `fallback`.
uint64_t span_bytes(uint64_t fallback) {
  const char* e = std::getenv("OPAL_BENCH_SPAN_MB");
  return e ? uint64_t(std::atof(e) * 1e6) : fallback;
}

struct Shape {
  const char* name;
  int64_t hq, hkv, d;
};

// An anonymous mapping, on huge pages when asked (advice given before the first touch).
struct Mapping {
  void* p = nullptr;
  uint64_t n = 0;
  Mapping(uint64_t bytes, bool huge) : n((bytes + 4095) / 4096 * 4096) {
    p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (huge) ::madvise(p, n, MADV_HUGEPAGE);
  }
  ~Mapping() { ::munmap(p, n); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p); }
};

// One layer's K or V cache rows ([hkv * d, cells]) of a type, random normal values.
void fill_rows(DType t, int64_t e, int64_t cells, uint8_t* dst, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(size_t(e) * 64);
  const uint64_t rb = row_bytes(t, e);
  for (int64_t c = 0; c < cells; c += 64) {
    const int64_t n = std::min<int64_t>(64, cells - c);
    for (int64_t i = 0; i < n * e; ++i) row[size_t(i)] = nd(rng);
    quantize_rows(t, row.data(), dst + uint64_t(c) * rb, n, e);
  }
}

// The caches of the last configuration, kept for the next benchmarks of the same shape, depth, types and pages.
struct Caches {
  std::string key;
  std::unique_ptr<Mapping> k, v;
  int copies = 0;
  uint64_t k_bytes = 0, v_bytes = 0;  // one copy
};
Caches& caches() {
  static Caches c;
  return c;
}

enum class Pages { k4, thp, l3 };
const char* pages_name(Pages p) { return p == Pages::k4 ? "4k" : p == Pages::thp ? "thp" : "l3"; }

Caches& caches_for(const Shape& sh, int64_t cells, DType tk, DType tv, Pages pages) {
  Caches& c = caches();
  const bool huge = pages == Pages::thp;
  const std::string key = std::string(sh.name) + "/" + std::to_string(cells) + "/" + dtype_name(tk) + "/" +
                          dtype_name(tv) + "/" + pages_name(pages);
  if (c.key == key) return c;
  c.k.reset();
  c.v.reset();
  const int64_t e = sh.hkv * sh.d;
  c.k_bytes = row_bytes(tk, e) * uint64_t(cells);
  c.v_bytes = row_bytes(tv, e) * uint64_t(cells);
  c.copies =
      pages == Pages::l3
          ? 1
          : int(std::max<uint64_t>(1, (span_bytes(96ull << 20) + c.k_bytes + c.v_bytes - 1) / (c.k_bytes + c.v_bytes)));
  c.k = std::make_unique<Mapping>(c.k_bytes * uint64_t(c.copies), huge);
  c.v = std::make_unique<Mapping>(c.v_bytes * uint64_t(c.copies), huge);
  fill_rows(tk, e, cells, c.k->data(), 1);
  fill_rows(tv, e, cells, c.v->data(), 2);
  for (int i = 1; i < c.copies; ++i) {
    std::memcpy(c.k->data() + c.k_bytes * uint64_t(i), c.k->data(), c.k_bytes);
    std::memcpy(c.v->data() + c.v_bytes * uint64_t(i), c.v->data(), c.v_bytes);
  }
  c.key = key;
  return c;
}

__attribute__((target("avx2"))) uint64_t read_span(const uint8_t* p, uint64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return uint64_t(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                  _mm256_extract_epi64(s, 3));
}

void run_decode(benchmark::State& state, const Shape& sh, int64_t depth, bool flash, DType tk, DType tv, Isa isa,
                Pages pages, int n_threads = 1) {
  set_isa(isa);
  const int64_t cells = depth + 1;
  Caches& c = caches_for(sh, cells, tk, tv, pages);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(sh.d * sh.hq)), out(size_t(sh.d * sh.hq));
  for (auto& x : q) x = nd(rng);
  bench::AttentionCall call({sh.hq, sh.hkv, sh.d}, q.data(), out.data(), 1, depth, tk, c.k->data(), tv, c.v->data(),
                            cells, flash, n_threads);
  if (const std::string why = call.unsupported(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  int i = 0;
  for (auto _ : state) {
    call.set_cache(c.k->data() + c.k_bytes * uint64_t(i), c.v->data() + c.v_bytes * uint64_t(i));
    call.run();
    benchmark::DoNotOptimize(out.data());
    i = (i + 1) % c.copies;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(c.k_bytes + c.v_bytes));
  state.counters["us"] =
      benchmark::Counter(double(state.iterations()) * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The node as a decode token meets it (stop 31). The copies of the layer's K and V span $OPAL_BENCH_SPAN_MB (default
// 1200 MB, about a Llama-3.2-1B token's weights, so that no copy is left in the L3 when it comes round again). Each
// iteration times, on the next copies in turn:
//   warm: right after the previous call (the usual rows' state);
//   again: the same copy once more (its K and V partly in the L3: the cache-resident rate);
//   cold: after streaming `evict` bytes of other memory (a layer's weights, ~76 MB for Llama-3.2-1B Q8_0), untimed;
//   idle: the same flush, then 2 ms of arithmetic that touches no memory, then the call;
//   loop100: back-to-back calls cycling over the first copies (~100 MB, the decode rows' span), second round;
//   loop1200: back-to-back calls over the other copies, each back only after ~1.1 GB;
//   filled / layered: after the flush, one of 16 layers' caches whose pages were first touched as a model's fill
//   touches them (512 cells of every layer in turn) / layer after layer; layered_loop: the latter back to back.
// Counters: the medians in us. Manual time: the cold call's.
void run_cold(benchmark::State& state, const Shape& sh, int64_t depth, Isa isa, uint64_t evict_bytes) {
  set_isa(isa);
  const int64_t cells = depth + 1;
  const uint64_t span = span_bytes(1200000000ull);
  const int64_t e = sh.hkv * sh.d;
  const uint64_t kb = row_bytes(DType::F16, e) * uint64_t(cells), vb = kb;
  const int copies = int(std::max<uint64_t>(2, (span + kb + vb - 1) / (kb + vb)));
  Mapping km(kb * uint64_t(copies), false), vm(vb * uint64_t(copies), false);
  fill_rows(DType::F16, e, cells, km.data(), 1);
  fill_rows(DType::F16, e, cells, vm.data(), 2);
  for (int i = 1; i < copies; ++i) {
    std::memcpy(km.data() + kb * uint64_t(i), km.data(), kb);
    std::memcpy(vm.data() + vb * uint64_t(i), vm.data(), vb);
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(sh.d * sh.hq)), out(size_t(sh.d * sh.hq));
  for (auto& x : q) x = nd(rng);
  bench::AttentionCall call({sh.hq, sh.hkv, sh.d}, q.data(), out.data(), 1, depth, DType::F16, km.data(), DType::F16,
                            vm.data(), cells, false, 1);
  if (const char* ev = std::getenv("OPAL_BENCH_EVICT_MB")) evict_bytes = uint64_t(std::atof(ev) * 1e6) / 4096 * 4096;
  Mapping evict(std::max<uint64_t>(evict_bytes, 4096), false);
  std::memset(evict.data(), 1, evict.n);
  // 16 layers' caches first touched as a model's fill touches them (512 cells of every layer's K and V in turn,
  // a ubatch at a time: pages of one layer's cache scattered among the others'), and 16 touched layer by layer.
  constexpr int kLayers = 16;
  constexpr int64_t kUbatch = 512;
  const uint64_t row = row_bytes(DType::F16, e);
  std::vector<std::unique_ptr<Mapping>> fill_k, fill_v, seq_k, seq_v;
  for (int l = 0; l < kLayers; ++l) {
    fill_k.push_back(std::make_unique<Mapping>(kb, false));
    fill_v.push_back(std::make_unique<Mapping>(vb, false));
  }
  for (int64_t c0 = 0; c0 < cells; c0 += kUbatch) {
    const uint64_t off = uint64_t(c0) * row, n = uint64_t(std::min(kUbatch, cells - c0)) * row;
    for (int l = 0; l < kLayers; ++l) {
      std::memcpy(fill_k[size_t(l)]->data() + off, km.data() + off, n);
      std::memcpy(fill_v[size_t(l)]->data() + off, vm.data() + off, n);
    }
  }
  for (int l = 0; l < kLayers; ++l) {
    seq_k.push_back(std::make_unique<Mapping>(kb, false));
    std::memcpy(seq_k.back()->data(), km.data(), kb);
    seq_v.push_back(std::make_unique<Mapping>(vb, false));
    std::memcpy(seq_v.back()->data(), vm.data(), vb);
  }
  auto timed_on = [&](uint8_t* k, uint8_t* v) {
    call.set_cache(k, v);
    const auto t0 = std::chrono::steady_clock::now();
    call.run();
    benchmark::DoNotOptimize(out.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> filled, seq, seq_loop;
  int i = 0;
  auto timed = [&](bool next) {
    if (next) i = (i + 1) % copies;
    return timed_on(km.data() + kb * uint64_t(i), vm.data() + vb * uint64_t(i));
  };
  auto flush = [&] {
    if (evict_bytes) benchmark::DoNotOptimize(read_span(evict.data(), evict.n / 128 * 128));
  };
  std::vector<double> warm, again, cold, idle, loop_small, loop_big;
  int big = 0;
  call.run();
  for (auto _ : state) {
    warm.push_back(timed(true));
    again.push_back(timed(false));
    flush();
    const double t = timed(true);
    cold.push_back(t);
    flush();
    const auto t0 = std::chrono::steady_clock::now();
    double x = 1.0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2e-3)
      for (int r = 0; r < 1000; ++r) x = x * 1.0000001 + 1e-9;
    benchmark::DoNotOptimize(x);
    idle.push_back(timed(true));
    // Back-to-back calls as the decode rows make them: over the first copies spanning ~100 MB (one round untimed,
    // then one timed: the L3 keeps part of them between rounds), and over the rest (never back within 1 GB).
    const int small = std::min(copies / 2, int((100e6 + double(kb + vb) - 1) / double(kb + vb)));
    for (int round = 0; round < 2; ++round)
      for (int j = 0; j < small; ++j) {
        i = j;
        const double ts = timed(false);
        if (round == 1) loop_small.push_back(ts);
      }
    for (int j = 0; j < small; ++j) {
      big = small + (big + 1 - small) % (copies - small);
      i = big;
      loop_big.push_back(timed(false));
    }
    for (int l = 0; l < kLayers; ++l) {
      flush();
      filled.push_back(timed_on(fill_k[size_t(l)]->data(), fill_v[size_t(l)]->data()));
      flush();
      seq.push_back(timed_on(seq_k[size_t(l)]->data(), seq_v[size_t(l)]->data()));
    }
    for (int l = 0; l < kLayers; ++l) seq_loop.push_back(timed_on(seq_k[size_t(l)]->data(), seq_v[size_t(l)]->data()));
    state.SetIterationTime(t);
  }
  auto median_us = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2] * 1e6;
  };
  state.counters["warm_us"] = median_us(warm);
  state.counters["again_us"] = median_us(again);
  state.counters["cold_us"] = median_us(cold);
  state.counters["idle_us"] = median_us(idle);
  state.counters["loop100_us"] = median_us(loop_small);
  state.counters["filled_us"] = median_us(filled);
  state.counters["layered_us"] = median_us(seq);
  state.counters["layered_loop_us"] = median_us(seq_loop);
  state.counters["loop1200_us"] = median_us(loop_big);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kb + vb));
}

void run_vside(benchmark::State& state, const Shape& sh, int64_t depth, Isa isa, Pages pages, bool heads) {
  set_isa(isa);
  const AttnKernels* k = attn_kernels();
  if (!k || !k->accumulate_f16 || !k->reduce_lanes || (heads && !k->accumulate_f16_heads)) {
    state.SkipWithError("no SIMD V helpers");
    return;
  }
  const int64_t cells = depth + 1, lanes = 64, dv = sh.d, group = sh.hq / sh.hkv;
  Caches& c = caches_for(sh, cells, DType::F16, DType::F16, pages);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> ud(0.0f, 2.0f / float(cells));
  std::vector<float> p(size_t(sh.hq * cells)), acc(size_t(sh.hq * lanes * dv)), out(size_t(sh.hq * dv));
  for (auto& x : p) x = f16_to_f32(f32_to_f16(ud(rng)));
  std::vector<int32_t> vis(static_cast<size_t>(cells));
  for (int64_t i = 0; i < cells; ++i) vis[size_t(i)] = int32_t(i);
  const uint64_t stride = uint64_t(sh.hkv * dv) * 2;
  int it = 0;
  for (auto _ : state) {
    const uint8_t* v = c.v->data() + c.v_bytes * uint64_t(it);
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (!heads) {
      for (int64_t h = 0; h < sh.hq; ++h)
        k->accumulate_f16(p.data() + h * cells, v + uint64_t(h / group * dv) * 2, stride, vis.data(), cells, lanes, dv,
                          acc.data() + h * lanes * dv);
    } else {
      for (int64_t g = 0; g < sh.hkv; ++g)
        k->accumulate_f16_heads(p.data() + g * group * cells, cells, group, v + uint64_t(g * dv) * 2, stride,
                                vis.data(), cells, lanes, dv, acc.data() + g * group * lanes * dv);
    }
    for (int64_t h = 0; h < sh.hq; ++h)
      k->reduce_lanes(acc.data() + h * lanes * dv, lanes, lanes, dv, out.data() + h * dv);
    benchmark::DoNotOptimize(out.data());
    it = (it + 1) % c.copies;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(c.v_bytes));
  state.counters["us"] =
      benchmark::Counter(double(state.iterations()) * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Streams `bytes` (a multiple of `slice`) a slice per iteration, cycling.
void run_probe(benchmark::State& state, bool huge, uint64_t bytes, uint64_t slice) {
  Mapping m(bytes, huge);
  std::memset(m.data(), 1, bytes);
  uint64_t off = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(read_span(m.data() + off, slice));
    off = (off + slice) % bytes;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(slice));
}

const int kRegistered = [] {
  if (!host_supports(Isa::avx2)) return 0;
  for (bool huge : {false, true})
    benchmark::RegisterBenchmark(huge ? "probe/thp" : "probe/4k",
                                 [=](benchmark::State& s) { run_probe(s, huge, 256ull << 20, 16ull << 20); });
  // The probe over spans from inside the L3 to a Llama-3.2-1B token's weights (stop 31): the L3 keeps part of a
  // cycled span a few times its size (96 MB: ~1.3x the rate of 1.2 GB on this Zen 5 guest's 32 MB L3).
  for (int mb : {16, 48, 96, 192, 384, 1200})
    benchmark::RegisterBenchmark(("probe-span/4k/" + std::to_string(mb) + "mb").c_str(), [=](benchmark::State& s) {
      run_probe(s, false, uint64_t(mb) * 1000000 / (2ull << 20) * (2ull << 20), 2ull << 20);
    });
  const Shape shapes[] = {
      {"qwen3", 16, 8, 128}, {"smollm2", 9, 3, 64}, {"llama32-1b", 32, 8, 64}, {"llama3-8b", 32, 8, 128}};
  const DType types[] = {DType::F16, DType::Q8_0, DType::Q4_0};
  for (const Shape& sh : shapes)
    for (int64_t depth : {4096, 16384})
      for (Isa isa : supported_isas()) {
        if (isa != Isa::avx512 && isa != Isa::avx2) continue;
        for (Pages pages : {Pages::k4, Pages::l3})
          for (bool heads : {false, true}) {
            const std::string name = std::string("vside/") + sh.name + "/d" + std::to_string(depth) + "/" +
                                     isa_name(isa) + "/" + pages_name(pages) + (heads ? "/heads" : "/pair");
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
              run_vside(s, sh, depth, isa, pages, heads);
            })->Unit(benchmark::kMicrosecond);
          }
      }
  for (int64_t depth : {4096, 16384})
    for (Isa isa : supported_isas()) {
      if (isa != Isa::avx512 && isa != Isa::avx2) continue;
      const std::string name =
          std::string("cold/llama32-1b/d") + std::to_string(depth) + "/fa0/f16-f16/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& s) { run_cold(s, shapes[2], depth, isa, 76000000); })
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
    }
  for (const Shape& sh : shapes)
    for (int64_t depth : {4096, 16384})
      for (DType t : types)
        for (Pages pages : {Pages::k4, Pages::thp, Pages::l3})
          for (bool flash : {false, true}) {
            const DType tv = flash ? t : DType::F16;
            for (Isa isa : supported_isas()) {
              if (isa != Isa::avx512 && isa != Isa::avx2) continue;
              const std::string name = std::string("decode/") + sh.name + "/d" + std::to_string(depth) + "/fa" +
                                       (flash ? "1/" : "0/") + dtype_name(t) + "-" + dtype_name(tv) + "/" +
                                       isa_name(isa) + "/" + pages_name(pages);
              benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
                run_decode(s, sh, depth, flash, t, tv, isa, pages);
              })->Unit(benchmark::kMicrosecond);
            }
          }
  for (const char* model : {"smollm2", "qwen3"})
    for (int64_t depth : {2048, 4096, 8192, 16384})
      for (Isa isa : supported_isas()) {
        if (isa != Isa::avx512 && isa != Isa::avx2) continue;
        for (Pages pages : {Pages::k4, Pages::l3})
          for (bool split : {true, false}) {
            const Shape sh = std::string(model) == "qwen3" ? shapes[0] : shapes[1];
            const std::string name = std::string("decode-t2/") + model + "/d" + std::to_string(depth) +
                                     "/fa0/f16-f16/" + isa_name(isa) + "/" + pages_name(pages) +
                                     (split ? "/split" : "/pairs");
            benchmark::RegisterBenchmark(name.c_str(),
                                         [=](benchmark::State& s) {
                                           const char* before = std::getenv("OPAL_ATTN_SPLIT_MIN_CELLS");
                                           const std::string saved = before ? before : "";
                                           setenv("OPAL_ATTN_SPLIT_MIN_CELLS", split ? "0" : "1000000000", 1);
                                           run_decode(s, sh, depth, false, DType::F16, DType::F16, isa, pages, 2);
                                           if (before) setenv("OPAL_ATTN_SPLIT_MIN_CELLS", saved.c_str(), 1);
                                           else unsetenv("OPAL_ATTN_SPLIT_MIN_CELLS");
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
          }
      }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
