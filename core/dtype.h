// Tensor element types, numbered exactly as ggml/GGUF number them, with their
// block layouts (elements per block, bytes per block). The block structs
// themselves live in core/quant/blocks.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace opal {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct DTypeTraits {
  DType type;
  const char* name;    // ggml's name, e.g. "q4_K"
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
  bool quantized;
  bool has_reference;  // Opal has a scalar reference dequantizer for it
};

// nullptr for a number that is not a known ggml type.
const DTypeTraits* dtype_traits_or_null(uint32_t raw);
const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
inline int64_t block_size(DType t) { return dtype_traits(t).block_size; }
inline int64_t type_size(DType t) { return dtype_traits(t).type_size; }
// Bytes of a row of n elements; n must be a multiple of the block size.
inline uint64_t row_bytes(DType t, int64_t n) { return uint64_t(n / block_size(t)) * uint64_t(type_size(t)); }
// Case-insensitive lookup by ggml name ("q4_K", "Q4_K", "f16", "bf16").
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace opal
