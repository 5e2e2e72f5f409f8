// The Q5_0 row-group kernels (kernels/repack.h, kLayoutQ5Groups8), shared by
// row_groups_avx2.cpp (plain AVX2), row_groups_avx2vnni.cpp (AVX-VNNI) and
// row_groups_avx512.cpp (AVX-512 VL, since stop 40).
// Each includes this file inside its own unnamed namespace, after defining
// load32, bcast4, or_masked (a | (b & mask)), kGroup (8), kGroupPrefetch (0: none), group_stream_prefetch(g) (which
// calls prefetch kGroupPrefetch along the stream), kHeadBytes and kQ5MaxActs
// (the activation rows a group meets at once: 3 in 16 vector registers), having included <algorithm>, <array>,
// <cstring>, <utility> and <vector>, and instantiates
// the kernels with its `Dot`:
//   Dot::offsets(x, nb, c)  c[8b + L]: the -16 offset term of lane L of block b
//                           of the Q8_0 activation row x (computed once a call);
//   Dot::lane(q, x4, c)     the exact int32 sum over a lane's 4 elements of
//                           (q - 16) * x for the 8 rows (q: unsigned 5-bit
//                           quants, x4: the activation's 4 bytes broadcast);
//   Dot::Block              a block's exact sum in the block-exact order:
//                           start(offset), add<T>(q0, x0, q1, x1) per piece, sum().
// Plain AVX2 takes vpmaddubsw, vpmaddwd by ones and the subtraction (MaddQ5,
// row_groups_avx2.cpp); AVX-VNNI and AVX-512 VL one vpdpbusd started at the
// (negated) offset (VnniQ5 below, with the includer's Dpbusd). All are exact,
// so all give the same bits.
//
// Layout (kernels/repack.h, kLayoutQ5Groups8, stop 24) per group and 32-element
// block (176 bytes): the 8 rows' f16 scales, a word per row, then pieces
// t = 0..3 of 8 rows x 4 bytes: byte b of piece t holds the 5-bit quant of
// element 4t + b in its low 5 bits and the low 3 bits of element 16 + 4t + b's
// above; the word the top 2 bits of element 16 + 4t + b at bits 8b + 2t and
// 8b + 2t + 1. Piece t gives int32 lanes t and t + 4 of the 8 rows (a row per
// lane): lane t one mask, lane t + 4 a shift, two masks, a shift of the word
// and an or (kLayoutRowGroups8's nibbles and fifth bits, stop 15, took 8-9
// operations a piece where these take 5-6).
// Two orders (avx2::q5_0_block_exact picks, as the plain kernels do):
// * block-exact (stop 25; the default batch order's, lanes_order(Q5_0), at every
//   batch size): per row and block the exact int32 sum of (q - 16) * x, then one
//   FMA by d_w * d_x, as legacy_avx2.cpp's Q5_0Lanes (the plain path then) and
//   Q4_0 everywhere: q5_0_group_exact, Dot::Block.
// * llama.cpp's (--batch-order llama, expert rows): the plain decode kernel
//   (legacy_avx2.cpp LegacyDecode<Q5_0Weights>) keeps 8 int32 lanes per row and
//   block, lane L the exact sum over elements 4L .. 4L + 3 of (q - 16) * x,
//   converted and FMA-ed by d_w * d_x into float lane L, then hsum8. q5_0_group:
//   the same lanes, the same float steps and hsum8's tree per row.
// Either way each row's bits are the plain kernel's.
// Batches of up to 16 activation rows run kQ5MaxActs rows at a time against
// each group while it is in L1. Rows past the last whole group are plain.
// The activation rows are convert_q8_0_sums rows: block b's d_x is the f32 at
// nb * 34 + 4b (the f16's value, so the same product d_w * d_x), one broadcast
// load where the f16 took a scalar load, a convert and a broadcast (stop 24).
#pragma once

constexpr int64_t kQ5_0Group = kGroup * kQ5_0Bytes;  // 176

// The VNNI form of Dot (avx2-vnni's AVX-VNNI, avx512's AVX-512 VL): one vpdpbusd started at the offset per lane
// sum; Dpbusd::apply(acc, u8, s8) is the ISA's 256-bit vpdpbusd (VEX or EVEX: the same operation).
template <class Dpbusd>
struct VnniQ5 {
  // c[8b + L] = -16 * (x_4L + .. + x_4L+3) over block b of a Q8_0 activation row.
  static void offsets(const uint8_t* x, int64_t nb, int32_t* c) {
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i s = Dpbusd::apply(_mm256_setzero_si256(), _mm256_set1_epi8(16), load32(x + b * kQ8_0Bytes + 2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * b), _mm256_sub_epi32(_mm256_setzero_si256(), s));
    }
  }
  static __m256i lane(__m256i q, __m256i x4, int32_t c) { return Dpbusd::apply(_mm256_set1_epi32(c), q, x4); }
  // A block's exact sum in the block-exact order (q5_0_group_exact): two
  // vpdpbusd chains (lanes T and lanes T + 4), the first started at the offset.
  struct Block {
    __m256i s[2];
    void start(__m256i offset) {
      s[0] = offset;
      s[1] = _mm256_setzero_si256();
    }
    template <int T>
    void add(__m256i q0, __m256i x0, __m256i q1, __m256i x1) {
      s[0] = Dpbusd::apply(s[0], q0, x0);
      s[1] = Dpbusd::apply(s[1], q1, x1);
    }
    __m256i sum() const { return _mm256_add_epi32(s[0], s[1]); }
  };
};

// The top two bits of the quants 16 + 4T + b (at bits 8b + 2T, 8b + 2T + 1 of
// each row's word, kLayoutQ5Groups8) moved to bits 3 and 4 of byte b; other
// bits not cleared.
template <int T>
__m256i top_bits(__m256i w) {
  if constexpr (T < 2) return _mm256_slli_epi32(w, 3 - 2 * T);
  else return _mm256_srli_epi32(w, 2 * T - 3);
}

// Piece T of a group's block as the 5-bit quants of lanes T (q0) and T + 4 (q1)
// of 8 rows. Lane T's quants are the piece's low 5 bits; lane T + 4's its top 3
// bits (the low 5 cleared, then a 16-bit shift by 5: nothing comes in from the
// next byte) and the word's two bits at 3 and 4. Two mask registers: with a
// third GCC kept an accumulator on the stack.
template <int T>
void q5_0_unpack(const uint8_t* gb, __m256i w, __m256i& q0, __m256i& q1) {
  const __m256i low5 = _mm256_set1_epi8(0x1F), bits34 = _mm256_set1_epi8(0x18);
  const __m256i v = load32(gb + 48 + 32 * T);
  q0 = _mm256_and_si256(v, low5);
  q1 = or_masked(_mm256_srli_epi16(_mm256_andnot_si256(low5, v), 5), top_bits<T>(w), bits34);
}

// A group's block gb: its bytes kGroupPrefetch on requested (prefetch: the
// first activation rows of a call), its 8 scales as f32.
inline __m256 q5_0_block_scales(const uint8_t* gb, bool prefetch) {
  if (prefetch && kGroupPrefetch > 0)
    for (int o = 0; o < kQ5_0Group; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(gb + kGroupPrefetch + o), _MM_HINT_T0);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
}

// Piece T in llama.cpp's order: lanes T and T + 4 of 8 rows against RA activation rows.
template <class Dot, int RA, int T>
void q5_0_piece(const uint8_t* gb, __m256i w, const uint8_t* const* xb, const int32_t* const* cb, const __m256* dd,
                __m256 (*acc)[8]) {
  __m256i q0, q1;
  q5_0_unpack<T>(gb, w, q0, q1);
  for (int a = 0; a < RA; ++a) {
    const __m256i s0 = Dot::lane(q0, bcast4(xb[a] + 2 + 4 * T), cb[a][T]);
    const __m256i s1 = Dot::lane(q1, bcast4(xb[a] + 18 + 4 * T), cb[a][T + 4]);
    acc[a][T] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd[a], acc[a][T]);
    acc[a][T + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd[a], acc[a][T + 4]);
  }
}

// One group of 8 Q5_0 rows against RA activation rows (their offsets c): out[a][0..7].
template <class Dot, int RA>
void q5_0_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, const int32_t* const* c, float* const* out,
                bool prefetch) {
  __m256 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ5_0Group;
    const __m256 d = q5_0_block_scales(gb, prefetch);
    const uint8_t* xb[RA];
    const int32_t* cb[RA];
    __m256 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_0Bytes;
      cb[a] = c[a] + 8 * b;
      dd[a] = _mm256_mul_ps(d, _mm256_set1_ps(load_f32(x[a] + nb * kQ8_0Bytes + 4 * b)));
    }
    const __m256i w = load32(gb + 16);
    q5_0_piece<Dot, RA, 0>(gb, w, xb, cb, dd, acc);
    q5_0_piece<Dot, RA, 1>(gb, w, xb, cb, dd, acc);
    q5_0_piece<Dot, RA, 2>(gb, w, xb, cb, dd, acc);
    q5_0_piece<Dot, RA, 3>(gb, w, xb, cb, dd, acc);
  }
  for (int a = 0; a < RA; ++a) {  // hsum8's tree per row: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
    const __m256 s0 = _mm256_add_ps(acc[a][0], acc[a][4]), s1 = _mm256_add_ps(acc[a][1], acc[a][5]);
    const __m256 s2 = _mm256_add_ps(acc[a][2], acc[a][6]), s3 = _mm256_add_ps(acc[a][3], acc[a][7]);
    _mm256_storeu_ps(out[a], _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
  }
}

// Piece T in the block-exact order: lanes T and T + 4 into each activation
// row's block sum (xq: the row's block quants).
template <class Dot, int RA, int T>
void q5_0_piece_exact(const uint8_t* gb, __m256i w, const uint8_t* const* xq, typename Dot::Block* blk) {
  __m256i q0, q1;
  q5_0_unpack<T>(gb, w, q0, q1);
  for (int a = 0; a < RA; ++a) blk[a].template add<T>(q0, bcast4(xq[a] + 4 * T), q1, bcast4(xq[a] + 16 + 4 * T));
}

// One group of 8 Q5_0 rows against RA activation rows in the block-exact order
// (stop 25; the lanes order's, legacy_avx2.cpp Q5_0Lanes): per row and block
// one exact int32 sum, then acc = fma(float(isum), d_w * d_x, acc), acc the
// result (no horizontal sum). c[a][b] = -16 * (the block's sum of quants).
// Dot::Block sums a block's 8 pieces-lanes from that offset: exact, so every
// Dot gives the same bits. One convert and one FMA a block and row where
// llama.cpp's order takes 8 of each.
template <class Dot, int RA>
void q5_0_group_exact(const uint8_t* grp, int64_t nb, const uint8_t* const* x, const int32_t* const* c,
                      float* const* out, bool prefetch) {
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ5_0Group;
    const __m256 d = q5_0_block_scales(gb, prefetch);
    const uint8_t* xb[RA];
    typename Dot::Block blk[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_0Bytes + 2;
      blk[a].start(_mm256_set1_epi32(c[a][b]));
    }
    const __m256i w = load32(gb + 16);
    q5_0_piece_exact<Dot, RA, 0>(gb, w, xb, blk);
    q5_0_piece_exact<Dot, RA, 1>(gb, w, xb, blk);
    q5_0_piece_exact<Dot, RA, 2>(gb, w, xb, blk);
    q5_0_piece_exact<Dot, RA, 3>(gb, w, xb, blk);
    for (int a = 0; a < RA; ++a) {
      const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(load_f32(x[a] + nb * kQ8_0Bytes + 4 * b)));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[a].sum()), dd, acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// The block-exact order's offsets of a convert_q8_0_sums row: c[b] = -16 * the
// sum of block b's quants (the int32 after the row's blocks and scales).
inline void block_offsets(const uint8_t* x, int64_t nb, int32_t* c) {
  const uint8_t* sums = x + nb * kQ8_0Bytes + nb * 4;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t v;
    std::memcpy(&v, sums + 4 * b, 4);
    c[b] = -16 * v;
  }
}

// The thread's Q5_0 groups, each met by the activation rows kQ5MaxActs at a
// time while it is in L1 (a batch streams the weights once), the slice's first
// kHeadBytes requested up front where the stream is prefetched (batches where kGroupPrefetch > 0: the head is the
// part of the stream no step before prefetched); then the plain rows after the last whole
// group through the plain gemm.
template <class Dot>
void run_q5_0_groups(const GemmArgs& g, void (*plain)(const GemmArgs&)) {
  using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, const int32_t* const*, float* const*, bool);
  constexpr auto kLlama = []<int... RA>(std::integer_sequence<int, RA...>) {
    return std::array<GroupFn, kQ5MaxActs>{q5_0_group<Dot, RA + 1>...};
  }
  (std::make_integer_sequence<int, kQ5MaxActs>{});
  constexpr auto kExact = []<int... RA>(std::integer_sequence<int, RA...>) {
    return std::array<GroupFn, kQ5MaxActs>{q5_0_group_exact<Dot, RA + 1>...};
  }
  (std::make_integer_sequence<int, kQ5MaxActs>{});
  if (g.row_begin % kGroup != 0) fail("row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  const int64_t nb = g.k / 32;
  const int64_t full = g.n_rows / kGroup * kGroup;
  const int64_t end = g.row_end < full ? g.row_end : full;
  const bool exact = avx2::q5_0_block_exact(g);
  const GroupFn* kernels = exact ? kExact.data() : kLlama.data();
  const int64_t per_row = exact ? nb : nb * 8;  // offsets a row: one a block, or one a lane and block
  if (end > g.row_begin) {
    thread_local std::vector<int32_t> offsets;
    offsets.resize(size_t(g.n_act * per_row));
    for (int64_t a = 0; a < g.n_act; ++a) {
      const uint8_t* xa = g.act + uint64_t(a) * g.act_row_bytes;
      int32_t* ca = offsets.data() + a * per_row;
      if (exact) block_offsets(xa, nb, ca);
      else Dot::offsets(xa, nb, ca);
    }
    // Batches of 4+ rows, and decode where avx2::wants_stream_prefetch says so (Q5_0 decode without since stop 41
    // on Zen 4: alternated token by token, SmolLM2-135M Q4_K_M tg --isa avx2 at one thread 1.017-1.024x without,
    // two threads level); the head only with the batches (avx2::wants_head_request).
    const bool stream_prefetch = kGroupPrefetch > 0 && group_stream_prefetch(g);
    const uint8_t* first = g.w + uint64_t(g.row_begin) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(kHeadBytes), uint64_t(end - g.row_begin) * g.w_row_bytes);
    for (uint64_t o = 0; stream_prefetch && avx2::wants_head_request(g) && o < head; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    for (int64_t r = g.row_begin; r < end; r += kGroup) {
      const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
      for (int64_t a0 = 0; a0 < g.n_act; a0 += kQ5MaxActs) {
        const int ra = int(std::min<int64_t>(kQ5MaxActs, g.n_act - a0));
        const uint8_t* x[kQ5MaxActs];
        const int32_t* c[kQ5MaxActs];
        float* out[kQ5MaxActs];
        for (int a = 0; a < ra; ++a) {
          x[a] = g.act + uint64_t(a0 + a) * g.act_row_bytes;
          c[a] = offsets.data() + (a0 + a) * per_row;
          out[a] = g.out + (a0 + a) * g.out_stride + r;
        }
        kernels[ra - 1](grp, nb, x, c, out, a0 == 0 && stream_prefetch);
      }
    }
  }
  if (g.row_end > end) {
    GemmArgs rest = g;
    rest.row_begin = end > g.row_begin ? end : g.row_begin;
    rest.layout = 0;
    plain(rest);
  }
}
