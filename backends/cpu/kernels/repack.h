// Load-time repacking of CPU weights (issue 18 item 2, docs/cpu-decode.md
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
// Q5_0 took a form of it from stop 15 (its qh bits moved so that one rotate
// per 8-row half found each fifth bit) until stop 40, when AVX-512 moved to
// kLayoutQ5Groups8 (below) as avx2 had at stop 24.
//
// kLayoutKGroups8 (Q4_K, Q6_K; x86_avx2/kquant_groups.h): the rows in groups of
// 8, each group in the bytes its 8 rows had, per 256-element super-block b
// at b * 8 * block_bytes the 8 rows' pieces of that super-block side by
// side, each piece of row i at piece_base + i * piece_len (so one 32-byte
// load is one piece of 4 bytes for all 8 rows, a row per int32 lane):
//   Q4_K (8 x 144 = 1152 bytes): d f16 [8], dmin f16 [8], then the 12 scale
//     bytes as three words (bytes 0-3, 4-7, 8-11) [3][8][4], then the quants
//     [32][8][4]: piece 8j + t is qs[32j + 4t .. +3] (low nibbles: elements
//     64j + 4t .. +3, high nibbles: the same 32 on).
//   Q6_K (8 x 210 = 1680 bytes): d f16 [8], the 16 int8 scales [4][8][4]
//     (piece q: scales 4q .. 4q+3), then per half h and t in 0..7 three
//     pieces [8][4] p, q, r made from ql[64h + 4t ..] (a), ql[64h + 32 + 4t ..]
//     (b) and qh[32h + 4t ..] (c) (stop 18): each byte position's four 6-bit
//     quants q0 = a & 15 | (c & 3) << 4, q1 = b & 15 | (c >> 2 & 3) << 4,
//     q2 = a >> 4 | (c >> 4 & 3) << 4, q3 = b >> 4 | (c >> 6) << 4 stored as
//     p = q0 | (q3 & 3) << 6, q = q1 | (q3 >> 2 & 3) << 6, r = q2 | (q3 >> 4) << 6.
// A last partial group stays plain, as for kLayoutRowGroups8. The bytes of a
// Q4_K row are only moved, never changed; Q6_K's quant bytes are re-encoded
// (a bijection: the unpack gives the GGUF's bytes back).
//
// kLayoutKGroups8Pairs (Q4_K on avx2 and avx2-vnni, stop 24): kLayoutKGroups8
// with the nibbles of each 4-byte piece re-paired, so that one mask gives 2
// quants of each of the piece's two sub-blocks (x86_avx2/kquant_groups.h,
// q4_K_group_pairs). A piece's bytes b0..b3 (b = lo | hi << 4, lo in sub-block
// 2j, hi in 2j + 1) become n0 = lo0 | lo2 << 4, n1 = lo1 | lo3 << 4,
// n2 = hi0 | hi2 << 4, n3 = hi1 | hi3 << 4: the nibble transpose of the byte
// pairs (b0, b2) and (b1, b3), its own inverse, so the unpack gives the GGUF's
// bytes back. The AVX-512 kernels read kLayoutQ4KGroups8Wide (below).
//
// kLayoutQ6KGroups8Pairs (Q6_K on avx2 and avx2-vnni, stop 27): kLayoutKGroups8's
// groups, pieces and 6-bit re-encoding, with the quants of each (half h, t)
// piece triple re-paired across chunks. Call q[c][b] the quant of element
// 128h + 32c + 4t + b (c, b = 0..3); kLayoutKGroups8's triple holds the four
// 6-bit vectors V_c = (q[c][0], q[c][1], q[c][2], q[c][3]), this one
// V0 = (q[0][0], q[0][1], q[1][0], q[1][1]), V1 = (q[0][2], q[0][3], q[1][2], q[1][3]),
// V2 and V3 the same for chunks 2 and 3 (q[c][b] lies in vector 2 (c / 2) + b / 2
// at byte 2 (c % 2) + b % 2), stored as p = V0 | (V3 & 3) << 6,
// q = V1 | (V3 >> 2 & 3) << 6, r = V2 | (V3 >> 4) << 6 as before. Against the
// activation in pair_q8_K_row's order a chunk pair's two vpmaddubsw add in
// int16 and take one vpmaddwd by the scale pair (s, s + 2) (x86_avx2/
// kquant_groups.h, q6_K_group_pairs). A bijection on each piece triple: the
// unpack gives the GGUF's bytes back. The AVX-512 kernels read kLayoutQ6KGroups8Wide (below).
//
// kLayoutQ4KGroups8Wide (Q4_K on avx512, stop 39): kLayoutKGroups8's groups,
// d, dmin and scale words, with the quants of lanes 2u and 2u + 1 side by side
// in each row: per super-block, for j = 0..3 and u = 0..3, 64 bytes at
// 128 + 64 (4j + u) hold [8 rows][piece (2u, j), piece (2u + 1, j)] (4 bytes
// each; piece (t, j) = qs[32j + 4t .. +3], kLayoutKGroups8's piece 4t + j), so
// row i's piece (t, j) is at q4_K_wide_piece(t, j) + 8i. One 64-byte load is
// two lanes of 8 rows, and one 8-byte broadcast of the activation
// (elements 64j + 8u .. +7, or the 32 after them for the high nibbles) meets
// all 16 dwords: no shuffle of the activation (x86_avx512/kquant_groups_avx512.cpp).
// The bytes are only moved: the unpack gives the GGUF's bytes back.
//
// kLayoutQ6KGroups8Wide (Q6_K on avx512, stop 39): kLayoutKGroups8's groups,
// d, scale words and re-encoded triples (p, q, r), with lanes 2u and 2u + 1 side
// by side as in kLayoutQ4KGroups8Wide: per super-block, for u = 0..3 and half
// h = 0..1, 192 bytes at 144 + 192 (2u + h) hold p, q, r (64 bytes each) as
// [8 rows][lane 2u, 2u + 1][4 bytes]; row i's piece `which` (0: p, 1: q, 2: r)
// of lane t and half h is at q6_K_wide_piece(t, h, which) + 8i. A bijection
// (the unpack gives the GGUF's bytes back).
//
// kLayoutQ5Groups8 (Q5_0 on avx2 and avx2-vnni since stop 24, avx512 since stop 40): kLayoutRowGroups8's
// groups and block shape (176 bytes: the 8 f16 scales [8][2], a word per row
// [8][4], four pieces [8][4]), with the 5-bit quants q_e (e = 0..31) stored
// whole: byte b of piece t of a row is q_(4t+b) | (q_(16+4t+b) & 7) << 5, and
// the row's word holds the top two bits of q_(16+4t+b) at bits 8b + 2t (bit 3)
// and 8b + 2t + 1 (bit 4). So lane t's quants are one mask (& 31) and lane
// t + 4's a shift and mask of the piece or-ed with one shift and mask of the
// word (x86_avx2/q5_0_groups.h), where kLayoutRowGroups8's nibbles and fifth
// bits took two masks, a shift and an or per lane. The unpack gives the GGUF's
// bytes back.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace opal::cpu {

constexpr uint8_t kLayoutPlain = 0;
constexpr uint8_t kLayoutRowGroups8 = 1;
constexpr uint8_t kLayoutKGroups8 = 5;         // Q4_K / Q6_K (2-4 left to the other row-group layouts)
constexpr uint8_t kLayoutKGroups8Pairs = 6;    // Q4_K, nibbles re-paired (AVX2)
constexpr uint8_t kLayoutQ5Groups8 = 7;        // Q5_0, 5-bit bytes (AVX2)
constexpr uint8_t kLayoutQ6KGroups8Pairs = 8;  // Q6_K, chunks re-paired (AVX2)
constexpr uint8_t kLayoutQ4KGroups8Wide = 9;   // Q4_K, lanes 2u and 2u + 1 side by side (AVX-512)
constexpr uint8_t kLayoutQ6KGroups8Wide = 10;  // Q6_K, the same (AVX-512)

// Whether a layout is one of the K-quant row-group layouts (kLayoutKGroups8, kLayoutKGroups8Pairs,
// kLayoutQ6KGroups8Pairs, kLayoutQ4KGroups8Wide, kLayoutQ6KGroups8Wide).
constexpr bool is_k_groups_layout(uint8_t layout) {
  return layout == kLayoutKGroups8 || layout == kLayoutKGroups8Pairs || layout == kLayoutQ6KGroups8Pairs ||
         layout == kLayoutQ4KGroups8Wide || layout == kLayoutQ6KGroups8Wide;
}

// kLayoutQ4KGroups8Wide: the offset of row 0's piece (t, j) (qs[32j + 4t .. +3]) in a group's super-block.
constexpr int64_t q4_K_wide_piece(int t, int j) { return 128 + 64 * (4 * (t / 2) + j) + 4 * (t % 2); }
// kLayoutQ6KGroups8Wide: the offset of row 0's piece `which` (0-2: p, q, r) of lane t, half h.
constexpr int64_t q6_K_wide_piece(int t, int h, int which) {
  return 144 + 192 * (2 * (t / 2) + h) + 64 * which + 4 * (t % 2);
}

// "plain", "rowgroups8", "kgroups8", "kgroups8p", "q5groups8", "q6kgroups8p", "q4kgroups8w", "q6kgroups8w";
// "unknown" for anything else.
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
