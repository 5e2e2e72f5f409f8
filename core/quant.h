// Reference (scalar) quantization and dequantization for every GGUF block type.
// These are the oracle that every optimised kernel and backend is tested against.
// Implemented in core/quant/*.cpp; block structs in core/quant/blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace opal {

// True if Opal can dequantize / quantize this type with its reference code.
bool can_dequantize(DType t);
bool can_quantize(DType t);

// Converts n elements (a whole number of blocks) of type t at src to f32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Quantizes nrows rows of n_per_row f32 values (n_per_row a whole number of
// blocks) into dst, which must hold nrows * row_bytes(t, n_per_row) bytes.
// imatrix (optional, n_per_row values) weights the error of each column, as
// llama.cpp's importance matrix does. Returns the bytes written.
size_t quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix = nullptr);

}  // namespace opal
