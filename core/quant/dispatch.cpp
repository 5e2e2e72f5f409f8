// core/quant.h: picks the reference kernel for a type (tables below) and checks
// the arguments. Every kernel works block by block, so quantizing a range of
// rows gives the same bytes as quantizing them one by one (threads may split
// a tensor anywhere on a row boundary).
#include "core/quant.h"

#include "core/error.h"
#include "core/quant/internal.h"

namespace opal {
namespace {

using DequantizeFn = void (*)(const void*, float*, int64_t);
using QuantizeFn = void (*)(const float*, void*, int64_t);

struct Kernels {
  DType type;
  DequantizeFn dequantize;
  QuantizeFn quantize;  // nullptr: dequantize only
};

constexpr Kernels kKernels[] = {
    {DType::F32, quant::dequantize_f32, quant::quantize_f32},
    {DType::F16, quant::dequantize_f16, quant::quantize_f16},
    {DType::BF16, quant::dequantize_bf16, quant::quantize_bf16},
    {DType::Q4_0, quant::dequantize_q4_0, quant::quantize_q4_0},
    {DType::Q4_1, quant::dequantize_q4_1, quant::quantize_q4_1},
    {DType::Q5_0, quant::dequantize_q5_0, quant::quantize_q5_0},
    {DType::Q5_1, quant::dequantize_q5_1, quant::quantize_q5_1},
    {DType::Q8_0, quant::dequantize_q8_0, quant::quantize_q8_0},
    {DType::Q2_K, quant::dequantize_q2_K, quant::quantize_q2_K},
    {DType::Q3_K, quant::dequantize_q3_K, quant::quantize_q3_K},
    {DType::Q4_K, quant::dequantize_q4_K, quant::quantize_q4_K},
    {DType::Q5_K, quant::dequantize_q5_K, quant::quantize_q5_K},
    {DType::Q6_K, quant::dequantize_q6_K, quant::quantize_q6_K},
    {DType::Q8_K, quant::dequantize_q8_K, quant::quantize_q8_K},
    {DType::IQ4_NL, quant::dequantize_iq4_nl, quant::quantize_iq4_nl},
    {DType::IQ4_XS, quant::dequantize_iq4_xs, nullptr},
};

const Kernels* find_kernels(DType t) {
  for (const auto& k : kKernels)
    if (k.type == t) return &k;
  return nullptr;
}

void check_whole_blocks(DType t, int64_t n, const char* what) {
  const DTypeTraits* tr = dtype_traits_or_null(uint32_t(t));
  if (!tr) fail("{}: unknown tensor type {}", what, uint32_t(t));
  if (n < 0 || n % tr->block_size != 0)
    fail("{}: {} elements is not a whole number of {} blocks of {}", what, n, tr->name, tr->block_size);
}

}  // namespace

bool can_dequantize(DType t) { return find_kernels(t) != nullptr; }
bool can_quantize(DType t) {
  const Kernels* k = find_kernels(t);
  return k && k->quantize;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const Kernels* k = find_kernels(t);
  if (!k)
    fail("dequantize: no reference dequantizer for type {}", dtype_traits_or_null(uint32_t(t)) ? dtype_name(t) : "?");
  check_whole_blocks(t, n, "dequantize");
  k->dequantize(src, dst, n);
}

size_t quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const Kernels* k = find_kernels(t);
  if (!k || !k->quantize)
    fail("quantize: no reference quantizer for type {}", dtype_traits_or_null(uint32_t(t)) ? dtype_name(t) : "?");
  check_whole_blocks(t, n_per_row, "quantize");
  if (nrows < 0) fail("quantize: negative row count {}", nrows);
  if (imatrix) fail("quantize: importance-matrix quantization is not implemented yet (type {})", dtype_name(t));
  const size_t row_size = row_bytes(t, n_per_row);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < nrows; ++r) k->quantize(src + r * n_per_row, out + size_t(r) * row_size, n_per_row);
  return size_t(nrows) * row_size;
}

}  // namespace opal
