// The decode split inside the (token, head) pairs (ops/attention.cpp, attention_split_pairs: a decode whose pairs
// do not divide among the pool's chunks, forced here at any depth with OPAL_ATTN_SPLIT_MIN_CELLS=0) gives every
// pair the bits of the one-thread per-pair path, on every SIMD ISA of the host, for each shape of its units:
// K by (kv head, cell range) through dots_f16_heads or by (pair, range), V by (kv head, column part) through
// accumulate_f16_heads or by (pair, column part), the parts chosen so that the units divide among the OS threads.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"
#include "support/isa_coverage.h"

namespace opal {
namespace {

using namespace opal::cpu;

// Sets OPAL_ATTN_SPLIT_MIN_CELLS for the test's life, restoring what was there.
struct SplitAtAnyDepth {
  const char* before = std::getenv("OPAL_ATTN_SPLIT_MIN_CELLS");
  std::string saved = before ? before : "";
  SplitAtAnyDepth() { setenv("OPAL_ATTN_SPLIT_MIN_CELLS", "0", 1); }
  ~SplitAtAnyDepth() {
    if (before) setenv("OPAL_ATTN_SPLIT_MIN_CELLS", saved.c_str(), 1);
    else unsetenv("OPAL_ATTN_SPLIT_MIN_CELLS");
  }
};

uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

Tensor host(DType t, void* data, int64_t ne0, int64_t ne1) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, 1, 1};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

struct SplitCase {
  int64_t hq, hkv, d, cells;
  int threads;  // the pool's OS threads (4 chunks each)
  DType k;
  int32_t window;
  const char* what;
};

// One decode token at position cells - 1 over a cache of `cells` cells of sequence 0, on `threads` threads.
std::vector<float> decode(const SplitCase& cs, int threads, const std::vector<float>& q, const std::vector<uint8_t>& kc,
                          const std::vector<uint16_t>& vc) {
  std::vector<int32_t> info(size_t(2 * cs.cells));
  for (int64_t c = 0; c < cs.cells; ++c) info[size_t(2 * c)] = int32_t(c), info[size_t(2 * c + 1)] = 0;
  std::vector<int32_t> tok = {int32_t(cs.cells - 1), 0};
  Tensor tq = host(DType::F32, const_cast<float*>(q.data()), cs.d, cs.hq);
  Tensor tk = host(cs.k, const_cast<uint8_t*>(kc.data()), cs.hkv * cs.d, cs.cells);
  Tensor tv = host(DType::F16, const_cast<uint16_t*>(vc.data()), cs.hkv * cs.d, cs.cells);
  Tensor tt = host(DType::I32, tok.data(), 2, 1), tc = host(DType::I32, info.data(), 2, cs.cells);
  std::vector<float> out(size_t(cs.d * cs.hq), -7.0f);
  Tensor node = host(DType::F32, out.data(), cs.d * cs.hq, 1);
  node.op = Op::Attention;
  node.src[kAttnQ] = &tq;
  node.src[kAttnK] = &tk;
  node.src[kAttnV] = &tv;
  node.src[kAttnTokens] = &tt;
  node.src[kAttnCells] = &tc;
  node.iparams[0] = int32_t(cs.hkv);
  node.iparams[1] = cs.window;
  node.fparams[0] = 1.0f / 8.0f;
  ThreadPool pool(threads);
  std::vector<uint8_t> work(work_size(node, pool.size()) + 64);
  uint8_t* aligned = work.data() + (64 - reinterpret_cast<uintptr_t>(work.data()) % 64) % 64;
  compute(node, OpContext{pool, aligned});
  return out;
}

TEST(AttentionSplit, EveryUnitShapeHasTheOneThreadBits) {
  const SplitAtAnyDepth split;
  const SplitCase cases[] = {
      // SmolLM2: K 3 kv heads x 4 ranges (1500 cells: 5 ranges of 256 at most, 4 divide), V 3 x 2 parts of 32
      {9, 3, 64, 1500, 2, DType::F16, 0, "smollm2 2 threads"},
      {9, 3, 64, 3000, 2, DType::F16, 0, "smollm2 2 threads, 8 ranges"},
      {9, 3, 128, 1500, 2, DType::F16, 0, "9 heads of 128: V 3 x 2 parts of 64"},
      {9, 3, 64, 1500, 3, DType::F16, 0, "3 threads: V 3 x 1 part (whole rows)"},
      {7, 7, 64, 1500, 2, DType::F16, 0, "7 heads, no GQA: (pair, range) and (pair, column part) units"},
      {5, 1, 64, 1500, 2, DType::F16, 0, "one kv head of 5: K 1 x 4 ranges, V 1 x 2 parts"},
      {6, 2, 80, 1500, 4, DType::F16, 0, "head size 80 on 4 threads: V parts of 32 and 48 columns"},
      {9, 3, 64, 1500, 2, DType::Q8_0, 0, "q8_0 K: (pair, range) units"},
      {9, 3, 64, 1500, 2, DType::F16, 300, "sliding window"},
  };
  std::mt19937 rng(29);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const Isa before = selected_isa();
  for (const SplitCase& cs : cases) {
    SCOPED_TRACE(cs.what);
    std::vector<float> q(size_t(cs.d * cs.hq)), krow(size_t(cs.hkv * cs.d));
    for (auto& x : q) x = val(rng);
    const uint64_t kb = row_bytes(cs.k, cs.hkv * cs.d);
    std::vector<uint8_t> kc(size_t(kb * uint64_t(cs.cells)));
    for (int64_t c = 0; c < cs.cells; ++c) {
      for (auto& x : krow) x = val(rng);
      quantize_rows(cs.k, krow.data(), kc.data() + uint64_t(c) * kb, 1, cs.hkv * cs.d);
    }
    std::vector<uint16_t> vc(size_t(cs.cells * cs.hkv * cs.d));
    for (auto& h : vc) h = f32_to_f16(val(rng));
    for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
      set_isa(isa);
      const std::vector<float> want = decode(cs, 1, q, kc, vc), got = decode(cs, cs.threads, q, kc, vc);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i]))
            << isa_name(isa) << " threads " << cs.threads << " i " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  set_isa(before);
}

}  // namespace
}  // namespace opal
