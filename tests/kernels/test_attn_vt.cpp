// A transposed V cache (KvCache::v_trans, the -fa 0 layout): attend_vt_f16 under every host ISA has the bits of
// its scalar form, and the whole ATTENTION node (decode, prompt blocks, the decode's split, the scalar path) gives
// over the transposed cache exactly the bits it gives over the row-major one: GQA 1 / 2 / 3, a sliding window,
// cells of another sequence, cells out of position order, 1 and 2 threads. KV_STORE into a transposed cache
// writes the row-major store's values, column by column.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace vt_test {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<Isa> isas_with_scalar() {
  std::vector<Isa> v = {Isa::scalar};
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) v.push_back(isa);
  return v;
}

TEST(AttnVt, KernelEqualsTheScalarForm) {
  std::mt19937 rng(31);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const Isa before = selected_isa();
  int checked = 0;
  for (Isa isa : isas_with_scalar()) {
    set_isa(isa);
    const AttnKernels* k = attn_kernels();
    if (!k) continue;
    ASSERT_NE(k->attend_vt_f16, nullptr) << isa_name(isa);
    for (int64_t lanes : {16, 64})
      for (int64_t m : {1, 2, 3, 5, 9})
        for (int64_t cols : {1, 4, 7, 16}) {
          const int64_t ldp = 400, ldv = 413;
          std::vector<float> p(size_t(m * ldp));
          for (auto& x : p) x = f16_to_f32(f32_to_f16(std::abs(val(rng)) * 0.01f));
          std::vector<uint16_t> vt(size_t(cols * ldv));
          for (auto& h : vt) h = f32_to_f16(val(rng));
          std::vector<int64_t> n(static_cast<size_t>(m));
          const int64_t lens[] = {0, 1, 15, 17, 63, 64, 65, 130, 300, 391};
          for (int64_t j = 0; j < m; ++j) n[size_t(j)] = lens[(j * 3 + cols + lanes) % 10];
          std::vector<float> want(size_t(m * (cols + 2)), -7.0f), got = want;
          std::vector<float*> ow(static_cast<size_t>(m)), og(static_cast<size_t>(m));
          for (int64_t j = 0; j < m; ++j) {
            ow[size_t(j)] = want.data() + j * (cols + 2);
            og[size_t(j)] = got.data() + j * (cols + 2);
          }
          attend_vt_f16_ref(p.data(), ldp, n.data(), m, vt.data(), ldv, cols, lanes, ow.data(), 1);
          k->attend_vt_f16(p.data(), ldp, n.data(), m, vt.data(), ldv, cols, lanes, og.data(), 1);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << k->name << " lanes " << lanes << " m " << m << " cols " << cols
                                                    << " i " << i << ": " << got[i] << " vs " << want[i];
          ++checked;
        }
  }
  set_isa(before);
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0);
  }
}

Tensor tensor(DType t, void* data, int64_t ne0, int64_t ne1, int64_t ne2) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, ne2, 1};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

// One ATTENTION node over a cache of n_cells: `mixed` puts sequence 1 in every 7th cell, leaves one cell empty
// and swaps two runs of sequence 0's cells (its visible cells are neither consecutive nor in cell order);
// otherwise sequence 0 fills the cells in order. T tokens of sequence 0 at its last positions.
struct VtCase {
  int64_t hq, hkv, dk, dv, n_cells, T;
  int32_t window;
  bool mixed;
};

void check_layouts(const VtCase& c) {
  std::mt19937 rng(uint32_t(c.hq * 131 + c.T * 7 + c.n_cells + c.window + c.mixed));
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int64_t E = c.hkv * c.dv;
  std::vector<float> q(size_t(c.dk * c.hq * c.T));
  for (auto& x : q) x = val(rng);
  std::vector<uint16_t> kc(size_t(c.n_cells * c.hkv * c.dk)), vr(size_t(c.n_cells * E)), vt(vr.size());
  for (auto& h : kc) h = f32_to_f16(val(rng));
  for (auto& h : vr) h = f32_to_f16(val(rng));
  for (int64_t cell = 0; cell < c.n_cells; ++cell)
    for (int64_t i = 0; i < E; ++i) vt[size_t(i * c.n_cells + cell)] = vr[size_t(cell * E + i)];
  std::vector<int32_t> info(size_t(2 * c.n_cells));
  int32_t pos0 = 0, pos1 = 0;
  for (int64_t cell = 0; cell < c.n_cells; ++cell) {
    const bool other = c.mixed && cell % 7 == 3, empty = c.mixed && cell == 50;
    info[size_t(2 * cell)] = empty ? -1 : other ? pos1++ : pos0++;
    info[size_t(2 * cell + 1)] = empty ? -1 : other ? 1 : 0;
  }
  if (c.mixed)  // sequence 0's cells 20..39 and 60..79 swap positions: position order is not cell order
    for (int64_t i = 0; i < 20; ++i)
      if (info[size_t(2 * (20 + i) + 1)] == 0 && info[size_t(2 * (60 + i) + 1)] == 0)
        std::swap(info[size_t(2 * (20 + i))], info[size_t(2 * (60 + i))]);
  std::vector<int32_t> tok(size_t(2 * c.T));
  for (int64_t t = 0; t < c.T; ++t) {
    tok[size_t(2 * t)] = pos0 - int32_t(c.T) + int32_t(t);
    tok[size_t(2 * t + 1)] = 0;
  }
  Tensor tq = tensor(DType::F32, q.data(), c.dk, c.hq, c.T);
  Tensor tk = tensor(DType::F16, kc.data(), c.hkv * c.dk, c.n_cells, 1);
  Tensor tvr = tensor(DType::F16, vr.data(), E, c.n_cells, 1), tvt = tensor(DType::F16, vt.data(), c.n_cells, E, 1);
  Tensor tt = tensor(DType::I32, tok.data(), 2, c.T, 1), tc = tensor(DType::I32, info.data(), 2, c.n_cells, 1);
  auto run = [&](Isa isa, int threads, bool trans) {
    set_isa(isa);
    std::vector<float> out(size_t(c.dv * c.hq * c.T), -7.0f);
    Tensor node = tensor(DType::F32, out.data(), c.dv * c.hq, c.T, 1);
    node.op = Op::Attention;
    node.src[kAttnQ] = &tq;
    node.src[kAttnK] = &tk;
    node.src[kAttnV] = trans ? &tvt : &tvr;
    node.src[kAttnTokens] = &tt;
    node.src[kAttnCells] = &tc;
    node.iparams[0] = int32_t(c.hkv);
    node.iparams[1] = c.window;
    node.iparams[3] = trans ? 1 : 0;
    node.fparams[0] = 0.088f;
    ThreadPool pool(threads);
    std::vector<uint8_t> work(work_size(node, pool.size()) + 64);
    uint8_t* aligned = work.data() + (64 - reinterpret_cast<uintptr_t>(work.data()) % 64) % 64;
    compute(node, OpContext{pool, aligned});
    return out;
  };
  const Isa before = selected_isa();
  for (Isa isa : isas_with_scalar())
    for (int threads : {1, 2}) {
      const std::vector<float> want = run(isa, threads, false), got = run(isa, threads, true);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(same_bits(got[i], want[i]))
            << isa_name(isa) << " threads " << threads << " i " << i << ": " << got[i] << " vs " << want[i];
    }
  set_isa(before);
}

TEST(AttnVt, DecodeGivesTheRowMajorBits) {
  for (bool mixed : {false, true})
    for (int32_t window : {0, 90})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 2}, {9, 3}}) {
        SCOPED_TRACE(testing::Message() << "hq " << hq << " hkv " << hkv << " window " << window << " mixed " << mixed);
        check_layouts({hq, hkv, 128, 128, 300, 1, window, mixed});  // per-pair and staged (dk 128) paths
        check_layouts({hq, hkv, 64, 64, 700, 1, window, mixed});
        check_layouts({hq, hkv, 128, 128, 700, 3, window, mixed});  // a few tokens (the block path)
      }
}

TEST(AttnVt, SplitDecodeGivesTheRowMajorBits) {
  setenv("OPAL_ATTN_SPLIT_MIN_CELLS", "0", 1);  // the split at any depth (3 heads on 2 threads)
  for (bool mixed : {false, true})
    for (int32_t window : {0, 90}) {
      check_layouts({3, 1, 128, 128, 600, 1, window, mixed});
      check_layouts({9, 3, 64, 64, 600, 1, window, mixed});
    }
  unsetenv("OPAL_ATTN_SPLIT_MIN_CELLS");
}

TEST(AttnVt, PromptBlocksGiveTheRowMajorBits) {
  for (bool mixed : {false, true})
    for (int32_t window : {0, 100})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {6, 2}})
        for (int64_t T : {37, 80}) {
          SCOPED_TRACE(testing::Message()
                       << "hq " << hq << " hkv " << hkv << " T " << T << " window " << window << " mixed " << mixed);
          check_layouts({hq, hkv, 64, 64, 500, T, window, mixed});
          check_layouts({hq, hkv, 128, 40, 300, T, window, mixed});
        }
}

TEST(AttnVt, KvStoreWritesColumns) {
  const int64_t E = 72, n_cells = 40, T = 9;
  std::mt19937 rng(33);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> x(size_t(E * T));
  for (auto& v : x) v = val(rng);
  std::vector<int32_t> cells = {5, 6, 7, 8, 30, 31, 2, 39, 0};
  const Isa before = selected_isa();
  for (Isa isa : isas_with_scalar())
    for (DType type : {DType::F16, DType::BF16, DType::F32})
      for (int64_t t_used : {int64_t(1), T}) {
        set_isa(isa);
        const uint64_t es = uint64_t(type_size(type));
        std::vector<uint8_t> rows(size_t(E * n_cells) * es, 0x5A), cols = rows;
        Tensor tx = tensor(DType::F32, x.data(), E, t_used, 1), tcl = tensor(DType::I32, cells.data(), t_used, 1, 1);
        Tensor tr = tensor(type, rows.data(), E, n_cells, 1), tcol = tensor(type, cols.data(), n_cells, E, 1);
        ThreadPool pool(2);
        for (bool trans : {false, true}) {
          Tensor node = trans ? tcol : tr;
          node.op = Op::KvStore;
          node.src[0] = trans ? &tcol : &tr;
          node.src[1] = &tx;
          node.src[2] = &tcl;
          node.iparams[0] = trans ? 1 : 0;
          compute(node, OpContext{pool, nullptr});
        }
        for (int64_t c = 0; c < n_cells; ++c)
          for (int64_t i = 0; i < E; ++i)
            ASSERT_EQ(
                std::memcmp(rows.data() + uint64_t(c * E + i) * es, cols.data() + uint64_t(i * n_cells + c) * es, es),
                0)
                << isa_name(isa) << " " << dtype_name(type) << " cell " << c << " column " << i;
      }
  set_isa(before);
}

}  // namespace vt_test
}  // namespace opal::cpu
