// How an LLM matmul becomes int8 NPU GEMMs (host/npu_gemm.h has the full
// scheme): operand precision and int8 planes, the plane products computed,
// K cut into segments, N cut over cores and into slices, the per-K
// quantization scheme (rotation block, group size). Shared by the host glue
// (host/) that runs the GEMMs and the performance model (perf/) that predicts
// them, so neither includes the other's folder.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace opal::rocket {

inline constexpr unsigned kMaxGemmRows = 2044;  // M' <= 2047 (11-bit DATAIN_HEIGHT), a multiple of 4
inline constexpr unsigned kMaxSliceN = 8192;    // output channels per convolution (13-bit DPU fields)

// The weight of a lo plane relative to its hi plane: x ~= s (hi + lo / kLoPlaneScale).
inline constexpr float kLoPlaneScale = 254.0f;

// Operand precision on the int8 NPU: "8" = one int8 plane, "16" = a hi and a lo
// int8 plane (~15 bits; see host/npu_gemm.h). w16a16 runs 3 int8 GEMMs per
// matmul, w8a16 / w16a8 2, w8a8 1. The backend default is w16a16: the only one
// that keeps tiny-qwen3 within the q8_0 logit bar (docs/backends/rocket.md).
enum class Precision { W8A8, W8A16, W16A8, W16A16 };
inline constexpr Precision kDefaultPrecision = Precision::W16A16;
const char* precision_name(Precision p);
Precision parse_precision(const std::string& s);  // "w8a8", "w8a16", "w16a8", "w16a16"
unsigned weight_planes(Precision p);
unsigned input_planes(Precision p);

// One int8 GEMM of a plane-split matmul: input plane x times weight plane w
// (0 = hi, 1 = lo); its int32 result weighs kLoPlaneScale^-(x + w).
struct PlaneTerm {
  unsigned x = 0, w = 0;
};
// The products computed for the given plane counts, hi x hi first (lo x lo is dropped).
std::vector<PlaneTerm> plane_terms(unsigned input_planes, unsigned weight_planes);

struct KSegment {
  unsigned k0 = 0, k = 0;  // channels [k0, k0 + k) of the padded K
};
// Cuts a padded K (a multiple of 32) into segments of at most max_k (a multiple of 32).
std::vector<KSegment> split_k(unsigned k_padded, unsigned max_k = 8192);
// Cuts N into `parts` ranges, each a multiple of 32 except the last; empty ranges are dropped.
std::vector<std::pair<unsigned, unsigned>> split_n(unsigned n, unsigned parts);

// How both operands are quantized (weights at load, activations per run).
struct QuantScheme {
  unsigned rotation_block = 0;  // 0: no rotation; else a power of two dividing the padded K
  unsigned group = 0;           // K channels per scale (a multiple of 32); 0: one scale per row
  unsigned weight_planes = 1;   // int8 planes per operand: 1 or 2 (hi + lo)
  unsigned input_planes = 1;
};
// The scheme for a K: rotation over the largest power-of-two block (if asked,
// scheme/hadamard.h), the group size rounded to a multiple of 32 (the last
// group may be shorter) and the planes of each operand.
QuantScheme make_scheme(unsigned k, bool rotate, unsigned group, Precision precision);

}  // namespace opal::rocket
