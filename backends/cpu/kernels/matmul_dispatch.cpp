// matmul_kernels(): the selected ISA's entry for a weight type, falling back
// per type to the next lower ISA (avx512 -> avx2 -> scalar, avx2-vnni -> avx2,
// neon -> scalar);
// round_activations(): the selected ISA's f16 rounding, else the reference's;
// the process-wide batch order of Q8_0 / Q5_0 prompts; packed_reads().
#include <atomic>
#include <cstdlib>

#include "backends/cpu/kernels/kernel_tables.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/error.h"

namespace opal::cpu {

const MatmulKernels* isa_matmul_kernels(DType weight_type, Isa isa) {
  switch (isa) {
    case Isa::scalar: return ref_matmul_kernels(weight_type);
    case Isa::avx2: return avx2_matmul_kernels(weight_type);
    case Isa::avx2_vnni: return avx2vnni_matmul_kernels(weight_type);
    case Isa::avx512: return avx512_matmul_kernels(weight_type);
    case Isa::neon: return neon_matmul_kernels(weight_type);
  }
  return nullptr;
}

const MatmulKernels* matmul_kernels(DType weight_type, Isa isa) {
  const MatmulKernels* ref = ref_matmul_kernels(weight_type);
  if (!ref) return nullptr;  // no reference dequantizer: no kernel at all
  for (Isa i = isa;; i = (i == Isa::avx512 || i == Isa::avx2_vnni ? Isa::avx2 : Isa::scalar)) {
    if (const MatmulKernels* k = isa_matmul_kernels(weight_type, i)) return k;
    if (i == Isa::scalar) return nullptr;
  }
}

const MatmulKernels* matmul_kernels(DType weight_type) { return matmul_kernels(weight_type, selected_isa()); }

BatchOrder parse_batch_order(std::string_view name) {
  if (name == "auto") return BatchOrder::by_type;
  if (name == "llama") return BatchOrder::llama;
  if (name == "lanes") return BatchOrder::lanes;
  fail("unknown batch order '{}' (choose auto, llama or lanes; $OPAL_BATCH_ORDER or --batch-order)", name);
}

namespace {
std::atomic<int>& batch_order_selection() {
  static std::atomic<int> s{[] {
    const char* env = std::getenv("OPAL_BATCH_ORDER");
    if (!env || !*env) env = std::getenv("OPAL_Q8_0_ORDER");  // the older name
    return int(env && *env ? parse_batch_order(env) : BatchOrder::by_type);
  }()};
  return s;
}
}  // namespace

BatchOrder batch_order() { return BatchOrder(batch_order_selection().load(std::memory_order_relaxed)); }
void set_batch_order(BatchOrder order) { batch_order_selection().store(int(order), std::memory_order_relaxed); }
bool lanes_order(DType weight_type) {
  const BatchOrder order = batch_order();
  return order == BatchOrder::lanes ||
         (order == BatchOrder::by_type && (weight_type == DType::Q5_0 || weight_type == DType::Q4_K));
}

DecodePrefetch parse_decode_prefetch(std::string_view name) {
  if (name == "auto") return DecodePrefetch::by_host;
  if (name == "on") return DecodePrefetch::on;
  if (name == "off") return DecodePrefetch::off;
  fail("unknown decode prefetch '{}' (choose auto, on or off; $OPAL_DECODE_PREFETCH or --decode-prefetch)", name);
}

namespace {
std::atomic<int>& decode_prefetch_selection() {
  static std::atomic<int> s{[] {
    const char* env = std::getenv("OPAL_DECODE_PREFETCH");
    return int(env && *env ? parse_decode_prefetch(env) : DecodePrefetch::by_host);
  }()};
  return s;
}
}  // namespace

DecodePrefetch decode_prefetch_choice() {
  return DecodePrefetch(decode_prefetch_selection().load(std::memory_order_relaxed));
}
void set_decode_prefetch(DecodePrefetch choice) {
  decode_prefetch_selection().store(int(choice), std::memory_order_relaxed);
}
bool decode_prefetch() {
  switch (decode_prefetch_choice()) {
    case DecodePrefetch::on: return true;
    case DecodePrefetch::off: return false;
    case DecodePrefetch::by_host: break;
  }
  static const bool by_host = decode_prefetch_by_host(host_is_amd(), host_has_avx512());
  return by_host;
}
bool decode_prefetch_by_host(bool amd, bool avx512) { return !(amd && avx512); }

bool packed_reads(const MatmulKernels& k, int64_t n_act) {
  if (!k.gemm_packed || n_act < 1) return false;
  if (n_act <= k.packed_max_act) return true;
  if (n_act > k.packed_mid_act) return false;
  return k.weight_type == DType::Q4_0 || !lanes_order(k.weight_type);
}

void round_activations(DType act_type, const float* x, float* out, int64_t k) {
#if defined(__x86_64__) || defined(__i386__)
  // The same round-to-nearest-even in hardware (F16C) when a SIMD ISA is selected.
  if (act_type == DType::F16) {
    if (selected_isa() == Isa::avx512) return avx512::round_f16(x, out, k);
    if (selected_isa() == Isa::avx2 || selected_isa() == Isa::avx2_vnni) return avx2::round_f16(x, out, k);
  }
#endif
  ref_round_activations(act_type, x, out, k);
}

}  // namespace opal::cpu
