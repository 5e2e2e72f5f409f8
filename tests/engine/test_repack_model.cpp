// Load-time repacking of CPU weights on whole models (models/model.cpp,
// backends/cpu/weight_repack.cpp; docs/cpu-decode.md "Decode at the wall"):
// under every ISA the host runs, a model loaded with repacking gives the
// logits of the same model loaded with --no-repack bit for bit (a prompt
// batch of 20 tokens, which reads repacked weights through the unpack, and decode steps,
// which read the row groups), including a tied embedding (token_embd read by
// GET_ROWS and as the output matrix) and under --lm mmap (the mapping made
// writable for the rewrite). With an accelerator that can run a weight's
// matmul, that weight keeps the GGUF's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/isa_coverage.h"
#include "support/test_support.h"

namespace opal {
namespace {

struct RepackLogits {
  std::vector<float> all;  // the prompt's last row, then each decode step's
  int n_repacked = 0;
  bool tied_repacked = false;
};

RepackLogits run_repack_model(const std::string& path, bool repack, LoadMode mode,
                              const std::vector<std::string>& backends = {}) {
  auto reg = make_registry(backends, 2);
  LoadOptions lo;
  lo.load_mode = mode;
  lo.repack = repack;
  auto model = Model::load(path, *reg, lo);
  RepackLogits r;
  r.n_repacked = model->n_repacked();
  const Tensor* emb = model->weight("token_embd.weight");
  r.tied_repacked = !model->weight("output.weight") && emb && emb->layout != 0;
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  const int64_t nv = ctx.n_vocab();
  Batch b;
  // 20 tokens: more than any gemm_packed takes (Q8_0 16, Q4_0 8), so the prompt reads the weights unpacked.
  const std::vector<int32_t> prompt = {1, 5, 9, 17, 33, 2, 7, 11, 3, 8, 21, 4, 6, 13, 29, 10, 12, 14, 19, 23};
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), 0, i + 1 == prompt.size());
  ctx.decode(b);
  r.all.insert(r.all.end(), ctx.logits(0), ctx.logits(0) + nv);
  for (int32_t i = 0; i < 3; ++i) {
    b.clear();
    b.add(int32_t(4 + 3 * i), int32_t(prompt.size()) + i, 0, true);
    ctx.decode(b);
    r.all.insert(r.all.end(), ctx.logits(0), ctx.logits(0) + nv);
  }
  return r;
}

TEST(RepackModel, LogitsEqualTheGgufLayoutsOnEveryIsa) {
  const cpu::Isa before = cpu::selected_isa();
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
    for (const char* stem :
         {"tiny-llama-q8_0", "tiny-llama-q4_0", "tiny-llama-q5_0", "tiny-qwen3-q8_0", "tiny-gemma3-q4_0"}) {
      cpu::set_isa(isa);
      const std::string path = test::golden_model(stem);
      const RepackLogits plain = run_repack_model(path, false, LoadMode::Huge);
      EXPECT_EQ(plain.n_repacked, 0) << "--no-repack repacked weights";
      const cpu::MatmulKernels* k = cpu::matmul_kernels(DType::Q8_0);
      const bool packs = k && k->packed_layout != 0;
      if (isa == cpu::Isa::avx2 || isa == cpu::Isa::avx2_vnni || isa == cpu::Isa::avx512) {
        EXPECT_TRUE(packs) << cpu::isa_name(isa) << ": Q8_0 has no load-time layout";
        EXPECT_NE(cpu::matmul_kernels(DType::Q5_0)->packed_layout, 0) << cpu::isa_name(isa) << ": Q5_0 is not repacked";
      }
      for (LoadMode mode : {LoadMode::Huge, LoadMode::Mmap}) {
        const RepackLogits packed = run_repack_model(path, true, mode);
        if (packs) {
          EXPECT_GT(packed.n_repacked, 0) << stem << " under " << cpu::isa_name(isa);
        } else if (cpu::matmul_kernels(DType::Q6_K)->packed_layout == 0) {  // Q4_0 files' Q6_K output: K-quant groups
          EXPECT_EQ(packed.n_repacked, 0) << stem << " under " << cpu::isa_name(isa) << ": no packed layout";
        }
        if (packs && std::string(stem) == "tiny-qwen3-q8_0") {
          EXPECT_TRUE(packed.tied_repacked) << "the tied embedding (GET_ROWS + output) was not repacked";
        }
        ASSERT_EQ(plain.all.size(), packed.all.size());
        EXPECT_EQ(0, std::memcmp(plain.all.data(), packed.all.data(), plain.all.size() * sizeof(float)))
            << stem << " under " << cpu::isa_name(isa) << ", load mode " << load_mode_name(mode);
      }
    }
  cpu::set_isa(before);
}

// Q4_K_M files under the K-quant row groups (kLayoutKGroups8: Q4_K and Q6_K
// on avx2 / avx2-vnni): the same logits as --no-repack bit for bit (each
// row keeps the plain decode kernels' order), including Qwen3's tied Q6_K
// embedding (GET_ROWS unpacks its rows; decode reads the groups).
TEST(RepackModel, KQuantGroupsGiveTheGgufLayoutsLogitsOnEveryIsa) {
  const cpu::Isa before = cpu::selected_isa();
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
    for (const char* stem : {"tiny-llama-q4_k_m", "tiny-qwen3-q4_k_m"}) {
      cpu::set_isa(isa);
      const std::string path = test::golden_model(stem);
      const RepackLogits plain = run_repack_model(path, false, LoadMode::Huge);
      const cpu::MatmulKernels* k = cpu::matmul_kernels(DType::Q4_K);
      const cpu::MatmulKernels* k6 = cpu::matmul_kernels(DType::Q6_K);
      const bool packs = k && k->packed_layout != 0 && k6 && k6->packed_layout != 0;
      const RepackLogits packed = run_repack_model(path, true, LoadMode::Huge);
      if (packs) {
        EXPECT_GT(packed.n_repacked, 0) << stem << " under " << cpu::isa_name(isa);
        if (std::string(stem) == "tiny-qwen3-q4_k_m") {
          EXPECT_TRUE(packed.tied_repacked) << "the tied Q6_K embedding (GET_ROWS + output) was not repacked";
        }
      }
      ASSERT_EQ(plain.all.size(), packed.all.size());
      EXPECT_EQ(0, std::memcmp(plain.all.data(), packed.all.data(), plain.all.size() * sizeof(float)))
          << stem << " under " << cpu::isa_name(isa);
    }
  cpu::set_isa(before);
}

// test-accel runs MUL_MAT on Q8_0 weights: a host weight whose matmul it
// could take (the tied embedding, on the host for its GET_ROWS) keeps the
// GGUF's bytes, so neither the accelerator nor a copy to it reads row groups.
TEST(RepackModel, WeightsAnAcceleratorCouldReadAreNotRepacked) {
  const cpu::Isa before = cpu::selected_isa();
  if (cpu::host_supports(cpu::Isa::avx2)) cpu::set_isa(cpu::Isa::avx2);
  auto reg = make_registry({"test-accel"}, 2);
  auto model = Model::load(test::golden_model("tiny-qwen3-q8_0"), *reg, LoadOptions{});
  for (const auto& [name, t] : model->weights()) EXPECT_EQ(t->layout, 0) << name << " was repacked";
  cpu::set_isa(before);
}

// A graph that reads a repacked weight other than as MUL_MAT's weight or
// GET_ROWS's table (here: MUL_MAT through a view of it, and as MUL_MAT's
// activations) is refused when the CPU compiles it, naming the weight.
TEST(RepackModel, OtherReadersOfARepackedWeightAreRefused) {
  Graph g;
  Tensor* w = g.new_leaf("blk.0.w", DType::Q8_0, {64, 16, 1, 1}, TensorRole::Weight);
  w->layout = 1;  // as the load-time repack leaves it
  Tensor* x = g.new_leaf("x", DType::F32, {64, 2, 1, 1}, TensorRole::Input);
  CpuDevice cpu(1);
  auto compile = [&](std::vector<Tensor*> nodes) {
    Segment seg;
    seg.device = &cpu;
    seg.nodes = std::move(nodes);
    return cpu.executor().compile(seg);
  };
  EXPECT_NO_THROW(compile({g.mul_mat(w, x)}));
  Tensor* v = g.view(w, {64, 8, 1, 1}, w->nb, 0);
  try {
    compile({v, g.mul_mat(v, x)});
    ADD_FAILURE() << "a view of a repacked weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--no-repack"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace opal
