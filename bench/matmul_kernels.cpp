// Matmul kernel throughput per ISA and weight type, one thread:
//   decode/<isa>/<type>:  n_act = 1 over 8192 x 4096 weights, cycling over
//                         copies totalling > 96 MB (so DRAM, not L3): GB/s of
//                         weight bytes streamed.
//   decode-576/<isa>/<type>: n_act = 1 over 576 x 576 weights (SmolLM2's
//                         attention shape), cycling over > 96 MB of copies.
//   decode-1024/<isa>/<type>: n_act = 1 over 3072 x 1024 weights (Qwen3-0.6B's
//                         FFN up/gate shape), cycling over > 96 MB of copies.
//   decode-2048/<isa>/<type>: n_act = 1 over 8192 x 2048 weights (Llama-3.2-1B's
//                         FFN up/gate shape), cycling over > 96 MB of copies.
//   decode-lora-up<R>, decode-lora-down<R> (F32): n_act = 1 over RWKV-7
//                         0.1B's LoRA shapes, 768 rows of k = R and R rows of
//                         k = 768 (R = 32, 64, 128), cycling over > 96 MB of
//                         copies; decode-lora-up<R>-l2: one copy (in L2).
//   decode-l2/<isa>/<type>: the same over 96 x 4096 weights that stay in L2:
//                         the kernel's own speed, without DRAM.
//   packed-decode[-576|-1024|-2048]/<isa>/<type>: the decode shapes on weights
//                         repacked into the entry's load-time layout (Q8_0 /
//                         Q4_0 / Q5_0 row groups on avx2, avx2-vnni, avx512; Q4_K / Q6_K
//                         K-quant row groups), read by gemm_packed (no -576 for
//                         the K-quants: 576 is not whole super-blocks);
//                         packed-decode-l2: decode-l2's shape, repacked.
//                         packed-decode-1152 / -6912 / -out1152 (row groups):
//                         Gemma-3-1B's FFN gate/up (6912 x 1152), down
//                         (1152 x 6912) and tied output (262144 x 1152, 320 MB
//                         in Q8_0: one copy, beyond any cache).
//                         packed-decode-out1024 (K-quant groups, stop 18):
//                         Qwen3-0.6B's tied output (151936 x 1024, 128 MB in
//                         Q6_K: one copy), the largest matmul of a Q4_K_M token.
//   ceiling-<k>/<isa>/<type>, ceiling2t-<k>/...: the repacked decode kernel's own
//                         rate (stop 23): one ~384 KiB matrix of rows of k = 1024
//                         or 2048 kept in L2, the activation converted once;
//                         2t: two threads at once, each its own matrix, real
//                         time, GB/s of both (SMT siblings: one core's units).
//   packed-decode-8192, packed-decode-out2048 (row groups, stop 26): Llama-3.2-1B's
//                         FFN down (2048 x 8192) and, Q8_0, tied output (128256 x
//                         2048, 279 MB: one copy). Since stop 30 (the k-split
//                         tried, cpu-round2d.md "Stop 30, ksplit") packed-decode-8192 on the
//                         K-quant groups too, and packed-decode-8192-l2: 48 of
//                         those rows, one copy (in L2): the kernel's own rate.
//   packed-decode-2048-1200mb, packed-decode-8192-1200mb (row and K-quant groups,
//                         stop 31): FFN up/gate and down over copies spanning
//                         1.2 GB, a token's weights: the rate a token's
//                         matmuls read (the L3 keeps part of the other rows'
//                         96 MB of copies; docs/perf/long-contexts3.md, "Stop 31, gap").
//                         $OPAL_BENCH_SPAN_MB sets the other DRAM rows' span.
//   packed-batch<M>/<isa>/<type>: batch<M> on the repacked layout (batches up
//                         to the entry's packed_max_act read the groups; not
//                         the K-quants, which have the kq- curve below).
//   kq-batch<M>, kq-packed-batch<M>/<isa>/<q4_K|q6_K>: M = 1-32 activation rows
//                         over the decode-1024 shape from DRAM, plain and on
//                         the K-quant row groups (GB/s of weight bytes);
//                         kq-unpacked-batch<M>: above packed_max_act through
//                         the unpack path (MUL_MAT's before stop 17).
//   batch<M>/<isa>/<type>: n_act = M (2, 4, 8, 16) over the decode-1024 shape
//                         from DRAM: GB/s of weight bytes, as decode (a small
//                         batch that streams the weights once runs near
//                         decode's GB/s; one that streams them M times at 1/M).
//   prompt/<isa>/<type>:  n_act = 64 over 512 x 4096 weights: GOP/s (2 ops per
//                         multiply-add), activation conversion included.
//   prompt-576/<isa>/<type>: the same over 1536 x 576 weights (SmolLM2's FFN
//                         up/gate shape: short rows, 18 blocks of 32).
//   mid<M>-<k>/<isa>/<type> (stop 17, Q8_0 / Q4_0 / Q5_0 on the row groups):
//                         a batch of M rows (1 .. 128) as MUL_MAT runs it
//                         (packed_reads: the group kernels, else the batch
//                         path) over the model shapes k = 1024 (3072 x 1024,
//                         Qwen3-0.6B's FFN up), 3072 (1024 x 3072, its FFN
//                         down) and 2048 (8192 x 2048, Llama-3.2-1B's FFN up),
//                         from DRAM: GOP/s, so a flat per-row cost is a flat
//                         GOP/s. mid-groups<M>-<k> and mid-batch<M>-<k> force
//                         either path (M above packed_max_act) for the curve.
//   pp128-2048/<isa>/<type>, pp512-2048/<isa>/<type> (stop 33): 128 and 512
//                         activation rows over 8192 x 2048 on the load-time
//                         layout, as MUL_MAT dispatches them: GOP/s.
//   packed-prompt[-576]/<isa>/<type>: the prompt shapes on the load-time
//                         layout, as MUL_MAT runs them (gemm_packed_batch, or
//                         unpacked 32 rows at a time for the plain gemm);
//                         unpacked-prompt (K-quants): always the unpack path.
// Run: build/<dir>/bench_matmul_kernels [--benchmark_filter=decode/avx512]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "core/quant.h"

namespace {

using namespace opal;
using namespace opal::cpu;

// Quantized types: random bytes (speed does not depend on the values; the
// scalar K-quant quantizers would take minutes for these sizes). Float types:
// random normal values.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t kK) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> w(row_bytes(t, kK) * uint64_t(rows));
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(kK));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : f) v = n(rng);
      quantize_rows(t, f.data(), w.data() + uint64_t(r) * row_bytes(t, kK), 1, kK);
    }
    return w;
  }
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t v = rng() & 0x3bff3bff3bff3bffull;  // keeps f16 scale fields finite
    std::memcpy(w.data() + i, &v, 8);
  }
  return w;
}

// A prompt batch on repacked weights that the entry does not read in place:
// 32 rows at a time unpacked and given to the plain gemm (ops/matmul.cpp).
void unpacked_gemm(const MatmulKernels& k, DType t, const GemmArgs& g, std::vector<uint8_t>& rows) {
  for (int64_t r = g.row_begin; r < g.row_end; r += 32) {
    const int64_t n = std::min<int64_t>(32, g.row_end - r);
    unpack_rows(g.layout, t, g.w, g.k, g.n_rows, r, r + n, rows.data());
    GemmArgs s = g;
    s.w = rows.data();
    s.row_begin = 0;
    s.row_end = n;
    s.out = g.out + r;
    s.layout = 0;
    s.n_rows = n;
    k.gemm(s);
  }
}

// The bytes the DRAM rows' copies exceed: 96 MB, or $OPAL_BENCH_SPAN_MB (stop 31: the L3 keeps part of a span a
// few times its size, so 96 MB reads faster than a model's 1.2 GB; the -1200mb rows span a token's weights).
double span_bytes() {
  const char* e = std::getenv("OPAL_BENCH_SPAN_MB");
  return e ? std::atof(e) * 1e6 : 96e6;
}

// How a batch on repacked weights runs: as MUL_MAT does (packed_reads), or forced to either path.
enum class Path { dispatch, groups, batch, unpack };

// copies = 0: enough copies of the weights to exceed 96 MB (beyond any L3), cycled.
// packed: the weights repacked into the entry's load-time layout (kernels/repack.h), read by gemm_packed.
// Path::unpack: batches above packed_max_act take the unpack path even where the entry reads them in place
// (MUL_MAT's path before gemm_packed_batch: the unpacked-prompt and kq-unpacked-batch curves).
// convert_each = false: the activation converted once before the loop (the ceiling benchmarks: the kernel alone).
// span: the bytes the copies exceed with copies = 0 (0: span_bytes()).
void run(benchmark::State& state, Isa isa, DType t, int64_t rows, int64_t n_act, int copies, int64_t kK = 4096,
         bool bytes_rate = false, bool packed = false, Path path = Path::dispatch, bool convert_each = true,
         double span = 0) {
  const MatmulKernels* k = matmul_kernels(t, isa);
  if (copies == 0) copies = int((span > 0 ? span : span_bytes()) / double(row_bytes(t, kK) * uint64_t(rows))) + 1;
  std::vector<std::vector<uint8_t>> w;
  for (int c = 0; c < copies; ++c) w.push_back(random_weights(t, rows, kK));
  if (packed)
    for (auto& m : w) repack_matrix(k->packed_layout, t, m.data(), kK, rows);
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(size_t(n_act * kK));
  for (auto& v : x) v = n(rng);
  const uint64_t arb = k->act_row_bytes(kK);
  std::vector<uint8_t> act(arb * uint64_t(n_act));
  std::vector<float> out(size_t(rows * n_act)), scratch(size_t(k->scratch_floats(kK) + 1));
  std::vector<uint8_t> unpacked(packed ? size_t(32 * row_bytes(t, kK)) : 0);
  GemmArgs g;
  g.w_row_bytes = row_bytes(t, kK);
  g.k = kK;
  g.row_begin = 0;
  g.row_end = rows;
  g.act = act.data();
  g.act_row_bytes = arb;
  g.n_act = n_act;
  g.out = out.data();
  g.out_stride = rows;
  g.scratch = scratch.data();
  if (packed) {
    g.layout = k->packed_layout;
    g.n_rows = rows;
  }
  int c = 0;
  if (!convert_each)
    for (int64_t a = 0; a < n_act; ++a) k->convert_act(k->act_type, x.data() + a * kK, act.data() + a * arb, kK);
  for (auto _ : state) {
    if (convert_each)
      for (int64_t a = 0; a < n_act; ++a) k->convert_act(k->act_type, x.data() + a * kK, act.data() + a * arb, kK);
    g.w = w[size_t(c)].data();
    c = (c + 1) % copies;
    if (!packed) k->gemm(g);
    else if (path == Path::groups || (path == Path::dispatch && packed_reads(*k, n_act))) k->gemm_packed(g);
    else if (path == Path::unpack || !(k->gemm_packed_batch && k->gemm_packed_batch(g)))
      unpacked_gemm(*k, t, g, unpacked);
    benchmark::DoNotOptimize(out.data());
  }
  // Per thread: Google Benchmark sums a counter over the threads and multiplies a rate by the iterations of
  // all of them, so the ceiling2t figure is both threads' bytes over the wall time only this way.
  const double bytes = double(g.w_row_bytes) * double(rows) / double(state.threads());
  if (n_act == 1 || bytes_rate)
    state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  else
    state.counters["GOP/s"] = benchmark::Counter(2.0 * double(rows) * double(kK) * double(n_act) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(k->name);
}

const int kRegistered = [] {
  const DType types[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K,
                         DType::Q6_K, DType::F16,  DType::BF16, DType::F32};
  for (Isa isa : supported_isas())
    for (DType t : types) {
      const std::string suffix = std::string(isa_name(isa)) + "/" + dtype_name(t);
      benchmark::RegisterBenchmark(("decode/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 8192, 1, 0);
      })->Unit(benchmark::kMillisecond);
      if (t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0)  // SmolLM2's shape: many small matrices
        benchmark::RegisterBenchmark(("decode-576/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 576, 1, 0, 576);
        })->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("decode-1024/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 3072, 1, 0, 1024);
      })->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("decode-2048/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 8192, 1, 0, 2048);
      })->Unit(benchmark::kMicrosecond);
      if (t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q4_K || t == DType::Q6_K ||
          t == DType::F16 || t == DType::F32)
        for (int m : {2, 4, 8, 16})
          benchmark::RegisterBenchmark(("batch" + std::to_string(m) + "/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 3072, m, 0, 1024, true);
          })->Unit(benchmark::kMicrosecond);
      if (t == DType::F32)  // RWKV-7 0.1B's LoRAs: 768 -> rank (32, 64, 128) and back
        for (int64_t r : {32, 64, 128}) {
          benchmark::RegisterBenchmark(("decode-lora-up" + std::to_string(r) + "/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, 768, 1, 0, r); })
              ->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("decode-lora-up" + std::to_string(r) + "-l2/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, 768, 1, 1, r); })
              ->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("decode-lora-down" + std::to_string(r) + "/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, r, 1, 0, 768); })
              ->Unit(benchmark::kMicrosecond);
        }
      // The ISA's own entry (constant tables: safe during static initialization, unlike the fallback chain).
      const MatmulKernels* entry = isa_matmul_kernels(t, isa);
      if (entry && entry->packed_layout != 0) {  // the same shapes on the load-time repacked layout
        benchmark::RegisterBenchmark(("packed-decode/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 8192, 1, 0, 4096, false, true);
        })->Unit(benchmark::kMillisecond);
        const bool kquant = t == DType::Q4_K || t == DType::Q6_K;
        for (int64_t kk : {576, 1024, 2048}) {
          if (kquant && kk == 576) continue;
          benchmark::RegisterBenchmark(
              ("packed-decode-" + std::to_string(kk) + "/" + suffix).c_str(),
              [=](benchmark::State& s) {
                run(s, isa, t, kk == 576 ? 576 : kk == 1024 ? 3072 : 8192, 1, 0, kk, false, true);
              })
              ->Unit(benchmark::kMicrosecond);
        }
        if (!kquant) {  // Gemma-3-1B's shapes: gate / up (6912 x 1152), down (1152 x 6912), the tied output
          benchmark::RegisterBenchmark(("packed-decode-1152/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 6912, 1, 0, 1152, false, true);
          })->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("packed-decode-6912/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 1152, 1, 0, 6912, false, true);
          })->Unit(benchmark::kMicrosecond);
          if (t == DType::Q8_0 || t == DType::Q4_0)
            benchmark::RegisterBenchmark(("packed-decode-out1152/" + suffix).c_str(), [=](benchmark::State& s) {
              run(s, isa, t, 262144, 1, 1, 1152, false, true);
            })->Unit(benchmark::kMillisecond);
        }
        if (kquant)
          benchmark::RegisterBenchmark(("packed-decode-out1024/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 151936, 1, 1, 1024, false, true);
          })->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("packed-decode-l2/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 96, 1, 1, 4096, false, true);
        })->Unit(benchmark::kMicrosecond);
        // The decode kernel's compute ceiling (stop 23): one repacked matrix of ~384 KiB kept in L2, rows of
        // k = 1024 (Qwen3-0.6B) and 2048 (Llama-3.2-1B), the activation converted once. ceiling2t: two threads,
        // each its own matrix (on this host the two vCPUs are SMT siblings: one core's execution units and
        // L2 for both), real time, GB/s of both threads' weights.
        for (int64_t kk : {1024, 2048}) {
          const int64_t rows = std::max<int64_t>(8, int64_t(384 * 1024 / row_bytes(t, kk)) / 8 * 8);
          const std::string shape = std::to_string(kk) + "/" + suffix;
          benchmark::RegisterBenchmark(("ceiling-" + shape).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, rows, 1, 1, kk, false, true, Path::dispatch, false);
          })->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(
              ("ceiling2t-" + shape).c_str(),
              [=](benchmark::State& s) { run(s, isa, t, rows, 1, 1, kk, false, true, Path::dispatch, false); })
              ->Unit(benchmark::kMicrosecond)
              ->Threads(2)
              ->UseRealTime();
        }
        // Prompts on the repacked layout: read in place (gemm_packed_batch) or unpacked 32 rows at a time.
        if (!kquant)
          benchmark::RegisterBenchmark(("packed-prompt-576/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 1536, 64, 1, 576, false, true);
          })->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("packed-prompt/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 512, 64, 1, 4096, false, true);
        })->Unit(benchmark::kMillisecond);
        // Prompts at a model's scale (stop 33): 128 and 512 activation rows (the latter 2.2-4.4 MiB converted, past
        // the L2) over Llama-3.2-1B's FFN up (8192 x 2048), as MUL_MAT dispatches them.
        for (int m : {128, 512})
          benchmark::RegisterBenchmark(("pp" + std::to_string(m) + "-2048/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, 8192, m, 1, 2048, false, true); })
              ->Unit(benchmark::kMillisecond);
        if (kquant)  // the unpack path MUL_MAT took for them before stop 17
          benchmark::RegisterBenchmark(("unpacked-prompt/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 512, 64, 1, 4096, false, true, Path::unpack);
          })->Unit(benchmark::kMillisecond);
      }
      if (entry && (entry->packed_layout == kLayoutRowGroups8 ||
                    entry->packed_layout == kLayoutQ5Groups8))  // the per-row cost curve of batches of 1 .. 64 rows
        for (int64_t kk : {1024, 3072, 2048})
          for (int m : {1, 2, 4, 8, 12, 16, 17, 20, 24, 32, 48, 64, 96, 128}) {
            const int64_t rows = kk == 1024 ? 3072 : kk == 3072 ? 1024 : 8192;
            const std::string shape = std::to_string(m) + "-" + std::to_string(kk) + "/" + suffix;
            benchmark::RegisterBenchmark(("mid" + shape).c_str(), [=](benchmark::State& s) {
              run(s, isa, t, rows, m, 0, kk, false, true);
            })->Unit(benchmark::kMicrosecond);
            if (m <= entry->packed_max_act) continue;
            benchmark::RegisterBenchmark(("mid-groups" + shape).c_str(), [=](benchmark::State& s) {
              run(s, isa, t, rows, m, 0, kk, false, true, Path::groups);
            })->Unit(benchmark::kMicrosecond);
            benchmark::RegisterBenchmark(("mid-batch" + shape).c_str(), [=](benchmark::State& s) {
              run(s, isa, t, rows, m, 0, kk, false, true, Path::batch);
            })->Unit(benchmark::kMicrosecond);
          }
      if (entry && entry->packed_layout != 0)
        for (int m : {2, 4, 8, 16})
          if (m <= entry->packed_max_act && !is_k_groups_layout(entry->packed_layout))
            benchmark::RegisterBenchmark(("packed-batch" + std::to_string(m) + "/" + suffix).c_str(),
                                         [=](benchmark::State& s) { run(s, isa, t, 3072, m, 0, 1024, true, true); })
                ->Unit(benchmark::kMicrosecond);
      // The K-quants' per-row curve (stop 17): every batch size a server step of 1-32 slots runs, plain
      // (kq-batch<M>) and on the K-quant row groups (kq-packed-batch<M>: up to packed_max_act in the decode
      // order, above it in place in the lanes order), Qwen3's FFN gate/up shape from DRAM, GB/s of weights.
      if (entry && is_k_groups_layout(entry->packed_layout))
        for (int m : {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32}) {
          benchmark::RegisterBenchmark(("kq-batch" + std::to_string(m) + "/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, 3072, m, 0, 1024, true); })
              ->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("kq-packed-batch" + std::to_string(m) + "/" + suffix).c_str(),
                                       [=](benchmark::State& s) { run(s, isa, t, 3072, m, 0, 1024, true, true); })
              ->Unit(benchmark::kMicrosecond);
          if (m > entry->packed_max_act)
            benchmark::RegisterBenchmark(
                ("kq-unpacked-batch" + std::to_string(m) + "/" + suffix).c_str(),
                [=](benchmark::State& s) { run(s, isa, t, 3072, m, 0, 1024, true, true, Path::unpack); })
                ->Unit(benchmark::kMicrosecond);
        }
      benchmark::RegisterBenchmark(("decode-l2/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 96, 1, 1);
      })->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("prompt-576/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 1536, 64, 1, 576);
      })->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("prompt/" + suffix).c_str(), [=](benchmark::State& s) {
        run(s, isa, t, 512, 64, 1);
      })->Unit(benchmark::kMillisecond);
      // Llama-3.2-1B's other decode shapes on the row groups (stop 26): the FFN down (2048 x 8192, its slowest
      // matmul per byte in a token) and, Q8_0 only, the tied output (128256 x 2048, 279 MB: one copy).
      // Since stop 30 also on the K-quant groups (docs/perf/cpu-round2d.md, "Stop 30, ksplit").
      if (entry && (entry->packed_layout == kLayoutRowGroups8 || is_k_groups_layout(entry->packed_layout))) {
        benchmark::RegisterBenchmark(("packed-decode-8192/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 2048, 1, 0, 8192, false, true);
        })->Unit(benchmark::kMicrosecond);
        // Llama-3.2-1B's FFN up/gate and down over copies spanning 1.2 GB (a token's weights), stop 31: 96 MB of
        // copies is three times the L3, and the L3 still holds part of them when they come round again (the
        // rows above read ~1.3x what a token's matmuls read; docs/perf/long-contexts3.md, "Stop 31, gap").
        for (int64_t kk : {2048, 8192})
          benchmark::RegisterBenchmark(("packed-decode-" + std::to_string(kk) + "-1200mb/" + suffix).c_str(),
                                       [=](benchmark::State& s) {
                                         run(s, isa, t, kk == 2048 ? 8192 : 2048, 1, 0, kk, false, true, Path::dispatch,
                                             true, 1200e6);
                                       })
              ->Unit(benchmark::kMicrosecond);
        // The same rows, 48 of them (one copy, in L2): the kernel's rate at k = 8192 without DRAM.
        benchmark::RegisterBenchmark(("packed-decode-8192-l2/" + suffix).c_str(), [=](benchmark::State& s) {
          run(s, isa, t, 48, 1, 1, 8192, false, true);
        })->Unit(benchmark::kMicrosecond);
        if (t == DType::Q8_0)
          benchmark::RegisterBenchmark(("packed-decode-out2048/" + suffix).c_str(), [=](benchmark::State& s) {
            run(s, isa, t, 128256, 1, 1, 2048, false, true);
          })->Unit(benchmark::kMillisecond);
      }
    }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
