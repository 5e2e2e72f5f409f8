// Load-time repacking of CPU weights (issue 18 item 2, docs/cpu-kernels.md
// "Decode at the wall"): the layouts a weight's bytes may take after upload,
// named by Tensor::layout (graph/graph.h; 0 = the GGUF's bytes).
//
// kLayoutRowGroups8 (Q8_0, Q4_0): the rows in groups of 8, each group in the
// bytes its 8 rows had (so a tensor keeps its size and row r's group starts at
// (r / 8) * 8 * row_bytes). Per 32-element block b of a group, at
// b * 8 * block_bytes: the 8 rows' f16 scales (16 bytes, row order), then the
// 8 rows' quants (Q8_0: 8 x 32 bytes in row order; Q4_0: 8 x 16 nibble bytes
// in the order rows 0, 4, 1, 5, 2, 6, 3, 7, so that 32 bytes hold rows j and
// j + 4, the two 128-bit lanes of the AVX2 decode kernel's vector j). A last
// partial group (n_rows % 8 rows) stays as it was. The decode kernel then reads
// one sequential stream with one load per block for the 8 scales; the bytes
// of each block are unchanged, so the summation order (and the result) is
// the plain layout's.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace opal::cpu {

constexpr uint8_t kLayoutPlain = 0;
constexpr uint8_t kLayoutRowGroups8 = 1;

// "plain", "rowgroups8"; "unknown" for anything else.
const char* layout_name(uint8_t layout);
// Whether weights of `type` can take `layout` (kLayoutPlain: always).
bool layout_supports(uint8_t layout, DType type);
// Rows per group of a layout (1 for plain).
int64_t layout_group_rows(uint8_t layout);
// Rewrites a matrix of n_rows rows of k elements (contiguous, plain) in place
// into `layout`. Throws opal::Error if the layout does not apply to the type.
void repack_matrix(uint8_t layout, DType type, uint8_t* rows, int64_t k, int64_t n_rows);
// Writes the plain bytes of rows [row_begin, row_end) of a matrix held in
// `layout` (n_rows rows in all) contiguously to dst (row_end - row_begin rows).
void unpack_rows(uint8_t layout, DType type, const uint8_t* base, int64_t k, int64_t n_rows, int64_t row_begin,
                 int64_t row_end, uint8_t* dst);

}  // namespace opal::cpu
