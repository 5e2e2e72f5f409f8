// The CPU's repacked weight layouts (repack.h): the in-place repack at load
// and the unpack that every reader not taught a layout goes through (GET_ROWS
// of a tied embedding, batches an entry does not read in place, kernels of
// another ISA). Scalar code:
// the unpack copies whole blocks or pieces (memcpy; Q5_0's 5-bit quants back to
// nibbles and qh by shifts and masks), so its cost is one pass over the rows it returns.
#include "backends/cpu/kernels/repack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace opal::cpu {
namespace {

constexpr int64_t kGroup = 8;

struct BlockShape {
  int64_t bytes;   // a block: f16 scale + quants
  int64_t quants;  // quant bytes per block
};

BlockShape block_shape(DType type) {
  if (type == DType::Q8_0) return {34, 32};
  return {18, 16};  // Q4_0
}

// Slot of row i (0..7) among the group's quants.
int64_t quant_slot(DType type, int64_t i) {
  if (type == DType::Q4_0) return i < 4 ? 2 * i : 2 * (i - 4) + 1;
  return i;
}

// kLayoutKGroups8 (repack.h): a K-quant super-block of a row cut in pieces;
// piece p of row i lies at dst + i * stride in the group's super-block (stride
// = len but for the quants of kLayoutQ4KGroups8Wide and kLayoutQ6KGroups8Wide,
// whose lanes 2u and 2u + 1 share a row's 8 bytes).
struct KPiece {
  int64_t src;     // offset in the row's super-block
  int64_t len;     // bytes
  int64_t dst;     // offset of row 0's piece in the group's super-block
  int64_t stride;  // bytes from row i's piece to row i + 1's
};

std::vector<KPiece> make_k_pieces(DType type, bool wide = false) {
  std::vector<KPiece> p;
  int64_t at = 0;
  auto add = [&](int64_t src, int64_t len) {
    p.push_back({src, len, at, len});
    at += kGroup * len;
  };
  if (type == DType::Q4_K) {  // d, dmin | scales[12] | qs[128]
    add(0, 2);
    add(2, 2);
    for (int w = 0; w < 3; ++w) add(4 + 4 * w, 4);
    for (int t = 0; t < 8; ++t)  // lane t's pieces together: the decode kernel reads them in this order
      for (int j = 0; j < 4; ++j) {
        if (wide) p.push_back({16 + 32 * j + 4 * t, 4, q4_K_wide_piece(t, j), 8});
        else add(16 + 32 * j + 4 * t, 4);
      }
  } else {  // Q6_K: ql[128] | qh[64] | scales[16] | d
    add(208, 2);
    for (int q = 0; q < 4; ++q) add(192 + 4 * q, 4);
    for (int t = 0; t < 8; ++t)
      for (int h = 0; h < 2; ++h) {
        const int64_t src[3] = {64 * h + 4 * t, 64 * h + 32 + 4 * t, 128 + 32 * h + 4 * t};
        for (int w = 0; w < 3; ++w) {
          if (wide) p.push_back({src[w], 4, q6_K_wide_piece(t, h, w), 8});
          else add(src[w], 4);
        }
      }
  }
  return p;
}

// The pieces of Q4_K or Q6_K in a K-quant group layout, made once (the unpack of a prompt's rows asks per call).
const std::vector<KPiece>& k_pieces(DType type, uint8_t layout) {
  static const std::vector<KPiece> q4_K = make_k_pieces(DType::Q4_K), q6_K = make_k_pieces(DType::Q6_K),
                                   q4_K_wide = make_k_pieces(DType::Q4_K, true),
                                   q6_K_wide = make_k_pieces(DType::Q6_K, true);
  if (layout == kLayoutQ4KGroups8Wide) return q4_K_wide;
  if (layout == kLayoutQ6KGroups8Wide) return q6_K_wide;
  return type == DType::Q4_K ? q4_K : q6_K;
}

// A piece's bytes: every piece is 2 or 4 bytes, copied as a constant size (a call to memcpy per piece made the
// unpack of a prompt's rows slower than the gemm on them).
inline void copy_piece(uint8_t* dst, const uint8_t* src, int64_t len) {
  if (len == 4) std::memcpy(dst, src, 4);
  else if (len == 2) std::memcpy(dst, src, 2);
  else std::memcpy(dst, src, size_t(len));
}

int64_t k_block_bytes(DType type) { return type == DType::Q4_K ? 144 : 210; }

// Q6_K's quants in the groups (stop 18, repack.h). Per half h and t = 0..7 the
// GGUF's bytes a_b = ql[64h + 4t + b], b_b = ql[64h + 32 + 4t + b] and
// c_b = qh[32h + 4t + b] (b = 0..3) hold the quants q[c][b] of elements
// 128h + 32c + 4t + b: q[0][b] = a_b & 15 | (c_b & 3) << 4, q[1][b] = b_b & 15 |
// (c_b >> 2 & 3) << 4, q[2][b] = a_b >> 4 | (c_b >> 4 & 3) << 4, q[3][b] = b_b >> 4 |
// (c_b >> 6) << 4. The groups keep four 6-bit vectors V0-V3 (kLayoutKGroups8:
// V_c = q[c]; kLayoutQ6KGroups8Pairs: q[c][b] in V_(2 (c / 2) + b / 2) at byte
// 2 (c % 2) + b % 2) as p = V0 | (V3 & 3) << 6, q = V1 | (V3 >> 2 & 3) << 6,
// r = V2 | (V3 >> 4) << 6 in the places of a, b, c; so V0-V2 are one mask each
// and V3 the top bits of the three. Both ways are bijections on the 12 bytes.
struct Q6Slot {
  int vec, byte;
};
Q6Slot q6_K_slot(bool paired, int c, int b) {
  return paired ? Q6Slot{2 * (c / 2) + b / 2, 2 * (c % 2) + b % 2} : Q6Slot{c, b};
}

void q6_K_encode(uint8_t* a, uint8_t* b, uint8_t* c, bool paired) {
  int v[4][4];
  for (int e = 0; e < 4; ++e) {
    const int q[4] = {(a[e] & 15) | (c[e] & 3) << 4, (b[e] & 15) | (c[e] >> 2 & 3) << 4,
                      a[e] >> 4 | (c[e] >> 4 & 3) << 4, b[e] >> 4 | (c[e] >> 6) << 4};
    for (int ch = 0; ch < 4; ++ch) {
      const Q6Slot s = q6_K_slot(paired, ch, e);
      v[s.vec][s.byte] = q[ch];
    }
  }
  for (int m = 0; m < 4; ++m) {
    a[m] = uint8_t(v[0][m] | (v[3][m] & 3) << 6);
    b[m] = uint8_t(v[1][m] | (v[3][m] >> 2 & 3) << 6);
    c[m] = uint8_t(v[2][m] | (v[3][m] >> 4) << 6);
  }
}

// q6_K_decode for kLayoutKGroups8 (V_c = q[c]) on the 4 bytes of each piece at once: every mask and shift stays
// within its byte. The unpack of a prompt's Q6_K rows took longer than the gemm on them byte by byte.
void q6_K_decode_words(uint32_t& A, uint32_t& B, uint32_t& C) {
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t v0 = A & k6, v1 = B & k6, v2 = C & k6;
  const uint32_t v3 = (A >> 6 & k2) | (B >> 6 & k2) << 2 | (C >> 6 & k2) << 4;
  A = (v0 & k4) | (v2 & k4) << 4;
  B = (v1 & k4) | (v3 & k4) << 4;
  C = (v0 >> 4 & k2) | (v1 >> 4 & k2) << 2 | (v2 >> 4 & k2) << 4 | (v3 >> 4 & k2) << 6;
}

void q6_K_decode_words(uint8_t* a, uint8_t* b, uint8_t* c) {
  uint32_t A, B, C;
  std::memcpy(&A, a, 4);
  std::memcpy(&B, b, 4);
  std::memcpy(&C, c, 4);
  q6_K_decode_words(A, B, C);
  std::memcpy(a, &A, 4);
  std::memcpy(b, &B, 4);
  std::memcpy(c, &C, 4);
}

void q6_K_decode(uint8_t* a, uint8_t* b, uint8_t* c, bool paired) {
  if (!paired) return q6_K_decode_words(a, b, c);
  int v[4][4];
  for (int m = 0; m < 4; ++m) {
    v[0][m] = a[m] & 63;
    v[1][m] = b[m] & 63;
    v[2][m] = c[m] & 63;
    v[3][m] = a[m] >> 6 | (b[m] >> 6) << 2 | (c[m] >> 6) << 4;
  }
  for (int e = 0; e < 4; ++e) {
    int q[4];
    for (int ch = 0; ch < 4; ++ch) {
      const Q6Slot s = q6_K_slot(paired, ch, e);
      q[ch] = v[s.vec][s.byte];
    }
    a[e] = uint8_t((q[0] & 15) | (q[2] & 15) << 4);
    b[e] = uint8_t((q[1] & 15) | (q[3] & 15) << 4);
    c[e] = uint8_t(q[0] >> 4 | (q[1] >> 4) << 2 | (q[2] >> 4) << 4 | (q[3] >> 4) << 6);
  }
}

// Every (ql low, ql high, qh) triple of 4-byte pieces of a Q6_K row's
// super-block sb (210 bytes, the GGUF's order) through f.
template <class F>
void q6_K_triples(uint8_t* sb, F f) {
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 8; ++t) f(sb + 64 * h + 4 * t, sb + 64 * h + 32 + 4 * t, sb + 128 + 32 * h + 4 * t);
}

constexpr int64_t kQ5_0Bytes = 22;  // d f16 | qh[4] | qs[16]

// kLayoutQ5Groups8's walk (per block of a group the 8 scales [8][2], a word per row [8][4], then four
// pieces [8][4]): each whole group's rows copied out, then block(src, gb, i)
// writes row i's block src into the group's block gb.
template <class Block>
void repack_q5_0_rows(uint8_t* rows, int64_t k, int64_t n_rows, Block block) {
  const int64_t nb = k / 32, rb = nb * kQ5_0Bytes;
  std::vector<uint8_t> plain(size_t(kGroup * rb));
  for (int64_t g = 0; g + kGroup <= n_rows; g += kGroup) {
    uint8_t* grp = rows + g * rb;
    std::memcpy(plain.data(), grp, plain.size());
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* gb = grp + b * kGroup * kQ5_0Bytes;
      for (int64_t i = 0; i < kGroup; ++i) {
        const uint8_t* src = plain.data() + i * rb + b * kQ5_0Bytes;
        std::memcpy(gb + 2 * i, src, 2);
        block(src, gb, i);
      }
    }
  }
}

// The walk every unpack shares, for rows [row_begin, row_end) of rows of rb
// bytes into dst: rows past the last whole group copied as they are, the
// others by row(grp, i, out) from the group grp that holds them as its row i.
template <class Row>
void unpack_group_rows(const uint8_t* base, int64_t rb, int64_t n_rows, int64_t row_begin, int64_t row_end,
                       uint8_t* dst, Row row) {
  const int64_t full = n_rows / kGroup * kGroup;
  for (int64_t r = row_begin; r < row_end; ++r) {
    uint8_t* out = dst + (r - row_begin) * rb;
    if (r >= full) std::memcpy(out, base + r * rb, size_t(rb));
    else row(base + r / kGroup * kGroup * rb, r % kGroup, out);
  }
}

// repack_q5_0_rows' inverse: block(gb, i, ob) writes row i's qh and qs of the
// group's block gb into the GGUF block ob (the scale copied here).
template <class Block>
void unpack_q5_0_rows(const uint8_t* base, int64_t k, int64_t n_rows, int64_t row_begin, int64_t row_end, uint8_t* dst,
                      Block block) {
  const int64_t nb = k / 32, rb = nb * kQ5_0Bytes;
  unpack_group_rows(base, rb, n_rows, row_begin, row_end, dst, [&](const uint8_t* grp, int64_t i, uint8_t* out) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* gb = grp + b * kGroup * kQ5_0Bytes;
      uint8_t* ob = out + b * kQ5_0Bytes;
      std::memcpy(ob, gb + 2 * i, 2);
      block(gb, i, ob);
    }
  });
}

// kLayoutQ5Groups8 (repack.h): a Q5_0 block's quants (qh word h, qs[16]) as
// the four pieces' bytes p[t][b] = q_(4t+b) | (q_(16+4t+b) & 7) << 5 and the
// word w holding bits 3 and 4 of q_(16+4t+b) at 8b + 2t and 8b + 2t + 1.
void q5_0_whole_quants(uint32_t h, const uint8_t* qs, uint8_t* pieces, uint32_t* w) {
  *w = 0;
  for (int t = 0; t < 4; ++t)
    for (int b = 0; b < 4; ++b) {
      const int e = 4 * t + b;  // element e (low nibble of qs[e]) and e + 16 (its high nibble)
      const uint32_t lo = (qs[e] & 15u) | (h >> e & 1u) << 4, hi = (qs[e] >> 4) | (h >> (e + 16) & 1u) << 4;
      pieces[4 * t + b] = uint8_t(lo | (hi & 7u) << 5);
      *w |= (hi >> 3) << (8 * b + 2 * t);
    }
}

void q5_0_gguf_quants(const uint8_t* pieces, uint32_t w, uint32_t* h, uint8_t* qs) {
  *h = 0;
  for (int t = 0; t < 4; ++t)
    for (int b = 0; b < 4; ++b) {
      const int e = 4 * t + b;
      const uint32_t lo = pieces[4 * t + b] & 31u, top2 = w >> (8 * b + 2 * t) & 3u;
      const uint32_t hi = uint32_t(pieces[4 * t + b] >> 5) | top2 << 3;
      qs[e] = uint8_t((lo & 15u) | (hi & 15u) << 4);
      *h |= (lo >> 4) << e | (hi >> 4) << (e + 16);
    }
}

void repack_q5_0_whole(uint8_t* rows, int64_t k, int64_t n_rows) {
  repack_q5_0_rows(rows, k, n_rows, [](const uint8_t* src, uint8_t* gb, int64_t i) {
    uint32_t h, w;
    std::memcpy(&h, src + 2, 4);
    uint8_t pieces[16];
    q5_0_whole_quants(h, src + 6, pieces, &w);
    std::memcpy(gb + 16 + 4 * i, &w, 4);
    for (int64_t t = 0; t < 4; ++t) std::memcpy(gb + 48 + 32 * t + 4 * i, pieces + 4 * t, 4);
  });
}

void unpack_q5_0_whole(const uint8_t* base, int64_t k, int64_t n_rows, int64_t row_begin, int64_t row_end,
                       uint8_t* dst) {
  unpack_q5_0_rows(base, k, n_rows, row_begin, row_end, dst, [](const uint8_t* gb, int64_t i, uint8_t* ob) {
    uint32_t w, h;
    std::memcpy(&w, gb + 16 + 4 * i, 4);
    uint8_t pieces[16];
    for (int64_t t = 0; t < 4; ++t) std::memcpy(pieces + 4 * t, gb + 48 + 32 * t + 4 * i, 4);
    q5_0_gguf_quants(pieces, w, &h, ob + 6);
    std::memcpy(ob + 2, &h, 4);
  });
}

// kLayoutKGroups8Pairs (repack.h): every 4-byte piece b0..b3 of a Q4_K row's
// quants (qs, 128 bytes a super-block) as n0 = lo0 | lo2 << 4, n1 = lo1 | lo3 << 4,
// n2 = hi0 | hi2 << 4, n3 = hi1 | hi3 << 4. The nibble transpose of (b0, b2) and
// (b1, b3): its own inverse, so the same function repacks and unpacks.
constexpr int64_t kQ4KQuants = 16;  // qs in a Q4_K super-block (d, dmin, scales[12] first)
void q4_K_pair_nibbles(uint8_t* qs) {
  for (int m = 0; m < 128; m += 4) {
    uint8_t* b = qs + m;
    const uint8_t n0 = uint8_t((b[0] & 15) | (b[2] & 15) << 4), n1 = uint8_t((b[1] & 15) | (b[3] & 15) << 4);
    const uint8_t n2 = uint8_t(b[0] >> 4 | (b[2] >> 4) << 4), n3 = uint8_t(b[1] >> 4 | (b[3] >> 4) << 4);
    b[0] = n0;
    b[1] = n1;
    b[2] = n2;
    b[3] = n3;
  }
}

void repack_k_groups(uint8_t layout, DType type, uint8_t* rows, int64_t k, int64_t n_rows) {
  if (k % 256 != 0) fail("cannot repack {} rows of {} elements (not whole super-blocks)", dtype_name(type), k);
  const std::vector<KPiece>& pieces = k_pieces(type, layout);
  const int64_t bb = k_block_bytes(type), nb = k / 256, rb = nb * bb;
  std::vector<uint8_t> plain(size_t(kGroup * rb));
  for (int64_t g = 0; g + kGroup <= n_rows; g += kGroup) {
    uint8_t* grp = rows + g * rb;
    std::memcpy(plain.data(), grp, plain.size());
    if (type == DType::Q6_K)
      for (int64_t i = 0; i < kGroup * nb; ++i)
        q6_K_triples(plain.data() + i * bb, [&](uint8_t* a, uint8_t* b, uint8_t* c) {
          q6_K_encode(a, b, c, layout == kLayoutQ6KGroups8Pairs);
        });
    if (layout == kLayoutKGroups8Pairs)
      for (int64_t i = 0; i < kGroup * nb; ++i) q4_K_pair_nibbles(plain.data() + i * bb + kQ4KQuants);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* gb = grp + b * kGroup * bb;
      for (int64_t i = 0; i < kGroup; ++i) {
        const uint8_t* src = plain.data() + i * rb + b * bb;
        for (const KPiece& p : pieces) std::memcpy(gb + p.dst + i * p.stride, src + p.src, size_t(p.len));
      }
    }
  }
}

// One group super-block gb of kLayoutKGroups8 (or kLayoutKGroups8Pairs, whose nibbles the caller transposes back,
// or kLayoutQ4KGroups8Wide: `wide`) into its 8 rows' super-blocks out[0..7]: make_k_pieces' table written out,
// every piece a constant offset, a piece of all 8 rows at a time. Q4_K: d, dmin, the three scale words, then qs
// piece 4t + j at 16 + 32j + 4t.
void q4_K_group_rows(const uint8_t* gb, uint8_t* const* out, bool wide) {
  for (int i = 0; i < kGroup; ++i) {
    std::memcpy(out[i], gb + 2 * i, 2);
    std::memcpy(out[i] + 2, gb + 16 + 2 * i, 2);
  }
  for (int w = 0; w < 3; ++w)
    for (int i = 0; i < kGroup; ++i) std::memcpy(out[i] + 4 + 4 * w, gb + 32 + 32 * w + 4 * i, 4);
  for (int t = 0; t < 8; ++t)
    for (int j = 0; j < 4; ++j) {
      const uint8_t* piece = gb + (wide ? q4_K_wide_piece(t, j) : 128 + 32 * (4 * t + j));
      const int stride = wide ? 8 : 4;
      for (int i = 0; i < kGroup; ++i) std::memcpy(out[i] + 16 + 32 * j + 4 * t, piece + stride * i, 4);
    }
}

// Q6_K in kLayoutKGroups8 (or kLayoutQ6KGroups8Wide: `wide`): d, the four scale words, then per (t, h) the triple
// (ql low, ql high, qh) decoded back to the GGUF's bits in registers (q6_K_decode_words).
void q6_K_group_rows(const uint8_t* gb, uint8_t* const* out, bool wide) {
  for (int i = 0; i < kGroup; ++i) std::memcpy(out[i] + 208, gb + 2 * i, 2);
  for (int q = 0; q < 4; ++q)
    for (int i = 0; i < kGroup; ++i) std::memcpy(out[i] + 192 + 4 * q, gb + 16 + 32 * q + 4 * i, 4);
  for (int t = 0; t < 8; ++t)
    for (int h = 0; h < 2; ++h) {
      const uint8_t* triple = gb + (wide ? q6_K_wide_piece(t, h, 0) : 144 + 96 * (2 * t + h));
      const int stride = wide ? 8 : 4, next = wide ? 64 : 32;  // row to row, p to q to r
      for (int i = 0; i < kGroup; ++i) {
        uint32_t a, b, c;
        std::memcpy(&a, triple + stride * i, 4);
        std::memcpy(&b, triple + next + stride * i, 4);
        std::memcpy(&c, triple + 2 * next + stride * i, 4);
        q6_K_decode_words(a, b, c);
        std::memcpy(out[i] + 64 * h + 4 * t, &a, 4);
        std::memcpy(out[i] + 64 * h + 32 + 4 * t, &b, 4);
        std::memcpy(out[i] + 128 + 32 * h + 4 * t, &c, 4);
      }
    }
}

void unpack_k_groups(uint8_t layout, DType type, const uint8_t* base, int64_t k, int64_t n_rows, int64_t row_begin,
                     int64_t row_end, uint8_t* dst) {
  const std::vector<KPiece>& pieces = k_pieces(type, layout);
  const int64_t bb = k_block_bytes(type), nb = k / 256, rb = nb * bb;
  // Whole groups inside the range (a prompt's unpack asks for 32 rows at a time): all 8 rows of a super-block at
  // once, by q4_K_group_rows / q6_K_group_rows (stop 34: bench_matmul_kernels unpacked-prompt/avx512 q4_K 299 -> 345,
  // q6_K 196 -> 249 GOP/s against the per-row piece walk below, which takes the rest).
  const bool wide = layout == kLayoutQ4KGroups8Wide || layout == kLayoutQ6KGroups8Wide;
  const bool whole = layout == kLayoutKGroups8 || wide || (layout == kLayoutKGroups8Pairs && type == DType::Q4_K);
  const int64_t full = n_rows / kGroup * kGroup;
  while (whole && row_begin % kGroup == 0 && row_begin + kGroup <= std::min(row_end, full)) {
    const uint8_t* grp = base + row_begin * rb;
    uint8_t* rows = dst;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out[kGroup];
      for (int i = 0; i < kGroup; ++i) out[i] = rows + i * rb + b * bb;
      if (type == DType::Q4_K) q4_K_group_rows(grp + b * kGroup * bb, out, wide);
      else q6_K_group_rows(grp + b * kGroup * bb, out, wide);
      if (layout == kLayoutKGroups8Pairs)
        for (int i = 0; i < kGroup; ++i) q4_K_pair_nibbles(out[i] + kQ4KQuants);
    }
    row_begin += kGroup;
    dst += kGroup * rb;
  }
  unpack_group_rows(base, rb, n_rows, row_begin, row_end, dst, [&](const uint8_t* grp, int64_t i, uint8_t* out) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* gb = grp + b * kGroup * bb;
      for (const KPiece& p : pieces) copy_piece(out + b * bb + p.src, gb + p.dst + i * p.stride, p.len);
      if (type == DType::Q6_K)
        q6_K_triples(out + b * bb, [&](uint8_t* pa, uint8_t* pb, uint8_t* pc) {
          q6_K_decode(pa, pb, pc, layout == kLayoutQ6KGroups8Pairs);
        });
      if (layout == kLayoutKGroups8Pairs) q4_K_pair_nibbles(out + b * bb + kQ4KQuants);
    }
  });
}

}  // namespace

const char* layout_name(uint8_t layout) {
  if (layout == kLayoutPlain) return "plain";
  if (layout == kLayoutRowGroups8) return "rowgroups8";
  if (layout == kLayoutKGroups8) return "kgroups8";
  if (layout == kLayoutKGroups8Pairs) return "kgroups8p";
  if (layout == kLayoutQ5Groups8) return "q5groups8";
  if (layout == kLayoutQ6KGroups8Pairs) return "q6kgroups8p";
  if (layout == kLayoutQ4KGroups8Wide) return "q4kgroups8w";
  if (layout == kLayoutQ6KGroups8Wide) return "q6kgroups8w";
  return "unknown";
}

bool layout_supports(uint8_t layout, DType type) {
  if (layout == kLayoutPlain) return true;
  if (layout == kLayoutRowGroups8) return type == DType::Q8_0 || type == DType::Q4_0;
  if (layout == kLayoutKGroups8) return type == DType::Q4_K || type == DType::Q6_K;
  if (layout == kLayoutKGroups8Pairs) return type == DType::Q4_K;
  if (layout == kLayoutQ5Groups8) return type == DType::Q5_0;
  if (layout == kLayoutQ6KGroups8Pairs) return type == DType::Q6_K;
  if (layout == kLayoutQ4KGroups8Wide) return type == DType::Q4_K;
  if (layout == kLayoutQ6KGroups8Wide) return type == DType::Q6_K;
  return false;
}

int64_t layout_group_rows(uint8_t layout) {
  if (is_k_groups_layout(layout)) return kGroup;
  return layout == kLayoutRowGroups8 || layout == kLayoutQ5Groups8 ? kGroup : 1;
}

void repack_matrix(uint8_t layout, DType type, uint8_t* rows, int64_t k, int64_t n_rows) {
  if (layout == kLayoutPlain) return;
  if (!layout_supports(layout, type))
    fail("cannot repack {} weights into layout '{}'", dtype_name(type), layout_name(layout));
  if (is_k_groups_layout(layout)) return repack_k_groups(layout, type, rows, k, n_rows);
  if (k % 32 != 0) fail("cannot repack {} rows of {} elements (not whole blocks)", dtype_name(type), k);
  if (layout == kLayoutQ5Groups8) return repack_q5_0_whole(rows, k, n_rows);
  const BlockShape s = block_shape(type);
  const int64_t nb = k / 32, rb = nb * s.bytes;
  std::vector<uint8_t> plain(size_t(kGroup * rb));
  for (int64_t g = 0; g + kGroup <= n_rows; g += kGroup) {
    uint8_t* grp = rows + g * rb;
    std::memcpy(plain.data(), grp, plain.size());
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* gb = grp + b * kGroup * s.bytes;
      for (int64_t i = 0; i < kGroup; ++i) {
        const uint8_t* src = plain.data() + i * rb + b * s.bytes;
        std::memcpy(gb + 2 * i, src, 2);
        std::memcpy(gb + 2 * kGroup + quant_slot(type, i) * s.quants, src + 2, size_t(s.quants));
      }
    }
  }
}

void unpack_rows(uint8_t layout, DType type, const uint8_t* base, int64_t k, int64_t n_rows, int64_t row_begin,
                 int64_t row_end, uint8_t* dst) {
  if (row_begin < 0 || row_end > n_rows || row_begin > row_end)
    fail("unpack of rows [{}, {}) of a {}-row weight", row_begin, row_end, n_rows);
  if (layout == kLayoutPlain || !layout_supports(layout, type)) {
    if (layout != kLayoutPlain) fail("{} weights have no layout '{}'", dtype_name(type), layout_name(layout));
    const uint64_t rb = row_bytes(type, k);
    std::memcpy(dst, base + uint64_t(row_begin) * rb, uint64_t(row_end - row_begin) * rb);
    return;
  }
  if (is_k_groups_layout(layout)) return unpack_k_groups(layout, type, base, k, n_rows, row_begin, row_end, dst);
  if (layout == kLayoutQ5Groups8) return unpack_q5_0_whole(base, k, n_rows, row_begin, row_end, dst);
  const BlockShape s = block_shape(type);
  const int64_t nb = k / 32, rb = nb * s.bytes;
  unpack_group_rows(base, rb, n_rows, row_begin, row_end, dst, [&](const uint8_t* grp, int64_t i, uint8_t* out) {
    const int64_t slot = quant_slot(type, i);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* gb = grp + b * kGroup * s.bytes;
      std::memcpy(out + b * s.bytes, gb + 2 * i, 2);
      std::memcpy(out + b * s.bytes + 2, gb + 2 * kGroup + slot * s.quants, size_t(s.quants));
    }
  });
}

}  // namespace opal::cpu
