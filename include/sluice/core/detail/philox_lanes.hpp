// Philox4x32-10 lanes: the words of a sluice::random_stream for many consecutive blocks at once
// (AVX-512, AVX2 or SSE2 lanes where the CPU has them, else scalar), equal to random_stream's
// word for word.
#pragma once

#include <cstddef>
#include <cstdint>

#include <sluice/config.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace sluice::detail {

/// Philox4x32-10 keyed like sluice::random_stream (key = seed, counter = (block, step, tensor,
/// rank)), evaluated for many consecutive blocks in one vectorizable loop.
struct philox_lanes {
  std::uint32_t k0 = 0, k1 = 0, step = 0, tensor = 0, rank = 0;

  static philox_lanes from(stream_key const& k) noexcept {
    return {static_cast<std::uint32_t>(k.seed), static_cast<std::uint32_t>(k.seed >> 32), k.step, k.tensor, k.rank};
  }

  /// Words 4*first .. 4*(first+blocks)-1 of the stream into out[0 .. 4*blocks).
  void words(std::uint64_t first, std::size_t blocks, std::uint32_t* SLUICE_RESTRICT out) const noexcept {
    std::size_t j = 0;
#if SLUICE_HAVE_AVX2_TARGET
    // Eight blocks per iteration where the CPU has AVX2 (checked at run time; the build may
    // target baseline x86-64), else four in SSE2 lanes. GCC vectorizes the plain loop with 64-bit
    // lanes only (2 blocks per vector), which made Philox the bottleneck of bf16 states.
    if (use_avx2()) {
      for (; j + 16 <= blocks; j += 16) words_avx2<2>(first + j, out + 4 * j);
      for (; j + 8 <= blocks; j += 8) words_avx2<1>(first + j, out + 4 * j);
    }
#endif
#if defined(__SSE2__)
    for (; j + 4 <= blocks; j += 4) words_sse2(first + j, out + 4 * j);
#endif
    words_scalar(first + j, blocks - j, out + 4 * j);
  }

  void words_scalar(std::uint64_t first, std::size_t blocks, std::uint32_t* SLUICE_RESTRICT out) const noexcept {
    std::uint32_t const s = step, t = tensor, r = rank, a = k0, b = k1;
    for (std::size_t j = 0; j < blocks; ++j) {
      std::uint32_t x0 = static_cast<std::uint32_t>(first + j), x1 = s, x2 = t, x3 = r, ka = a, kb = b;
      for (int round = 0; round < 10; ++round) {
        std::uint64_t const p0 = std::uint64_t{0xD2511F53u} * x0;
        std::uint64_t const p1 = std::uint64_t{0xCD9E8D57u} * x2;
        std::uint32_t const hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
        std::uint32_t const hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
        x0 = hi1 ^ x1 ^ ka;
        x1 = lo1;
        x2 = hi0 ^ x3 ^ kb;
        x3 = lo0;
        ka += 0x9E3779B9u;
        kb += 0xBB67AE85u;
      }
      out[4 * j] = x0;
      out[4 * j + 1] = x1;
      out[4 * j + 2] = x2;
      out[4 * j + 3] = x3;
    }
  }

#if SLUICE_HAVE_AVX2_TARGET
  // G groups of eight blocks per call, interleaved round by round: one group is a chain of ten
  // dependent multiply rounds (latency-bound, ~1 cycle per element); two keep the pipes busy.
  template <int G>
  __attribute__((target("avx2"))) void words_avx2(std::uint64_t first, std::uint32_t* out) const noexcept {
    auto const f = static_cast<int>(static_cast<std::uint32_t>(first));
    __m256i x0[G], x1[G], x2[G], x3[G];
    for (int q = 0; q < G; ++q) {
      x0[q] = _mm256_add_epi32(_mm256_set1_epi32(f + 8 * q), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
      x1[q] = _mm256_set1_epi32(static_cast<int>(step));
      x2[q] = _mm256_set1_epi32(static_cast<int>(tensor));
      x3[q] = _mm256_set1_epi32(static_cast<int>(rank));
    }
    __m256i const m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
    __m256i const m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
    std::uint32_t ka = k0, kb = k1;
    for (int round = 0; round < 10; ++round) {
      __m256i const va = _mm256_set1_epi32(static_cast<int>(ka)), vb = _mm256_set1_epi32(static_cast<int>(kb));
      for (int q = 0; q < G; ++q) {
        // 64-bit products of the even lanes and of the odd lanes; blends pick each lane's half.
        __m256i const e0 = _mm256_mul_epu32(x0[q], m0), o0 = _mm256_mul_epu32(_mm256_srli_epi64(x0[q], 32), m0);
        __m256i const e1 = _mm256_mul_epu32(x2[q], m1), o1 = _mm256_mul_epu32(_mm256_srli_epi64(x2[q], 32), m1);
        __m256i const lo0 = _mm256_blend_epi32(e0, _mm256_slli_epi64(o0, 32), 0xaa);
        __m256i const hi0 = _mm256_blend_epi32(_mm256_srli_epi64(e0, 32), o0, 0xaa);
        __m256i const lo1 = _mm256_blend_epi32(e1, _mm256_slli_epi64(o1, 32), 0xaa);
        __m256i const hi1 = _mm256_blend_epi32(_mm256_srli_epi64(e1, 32), o1, 0xaa);
        x0[q] = _mm256_xor_si256(_mm256_xor_si256(hi1, x1[q]), va);
        x1[q] = lo1;
        x2[q] = _mm256_xor_si256(_mm256_xor_si256(hi0, x3[q]), vb);
        x3[q] = lo0;
      }
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    for (int q = 0; q < G; ++q) {
      __m256i const t0 = _mm256_unpacklo_epi32(x0[q], x1[q]), t1 = _mm256_unpacklo_epi32(x2[q], x3[q]);
      __m256i const t2 = _mm256_unpackhi_epi32(x0[q], x1[q]), t3 = _mm256_unpackhi_epi32(x2[q], x3[q]);
      __m256i const r0 = _mm256_unpacklo_epi64(t0, t1), r1 = _mm256_unpackhi_epi64(t0, t1);  // blocks 0|4, 1|5
      __m256i const r2 = _mm256_unpacklo_epi64(t2, t3), r3 = _mm256_unpackhi_epi64(t2, t3);  // blocks 2|6, 3|7
      auto* o = reinterpret_cast<__m256i*>(out + 32 * q);
      _mm256_storeu_si256(o, _mm256_permute2x128_si256(r0, r1, 0x20));
      _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
      _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
      _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
    }
  }
#endif

#if SLUICE_HAVE_AVX2_TARGET
  /// Philox state of blocks first .. first+7 kept in registers for a fused consumer that runs the
  /// rounds a few at a time between its own work (see adam_kernel::core_bf16_stream_impl): one
  /// block's ten rounds are a chain of dependent multiplies (~50 cycles), which a loop that
  /// evaluates them in one piece waits for. Blocks first+4h .. first+4h+3 are in the 64-bit lanes
  /// of x*[h], each word in the low half (the high halves hold don't-care bits): mul_epu32 reads
  /// the low halves only, so a round is 2 multiplies, 2 shifts and 4 xors per 4 blocks.
  struct block8 {
    __m256i x0[2], x1[2], x2[2], x3[2];
  };

  /// The round keys, broadcast once per loop rather than once per round, and the constants of
  /// rounds 0-2: only word 0 of the counter varies between blocks, so half of the first rounds'
  /// products are the same for every block (computed here once in scalar).
  struct keys8 {
    __m256i a[10], b[10];
    __m256i r0, d0, d2, e2;
  };

  /// The scalar words behind keys8 / keys8z: the round keys and the folded constants of rounds
  /// 0-2, computed once per call and then broadcast at either width.
  struct key_words {
    std::uint32_t a[10], b[10];
    std::uint32_t r0, d0, d2, e2;
  };

  [[nodiscard]] key_words round_key_words() const noexcept {
    key_words w{};
    std::uint32_t ka = k0, kb = k1;
    for (int round = 0; round < 10; ++round) {
      w.a[round] = ka;
      w.b[round] = kb;
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    std::uint64_t const p1 = std::uint64_t{0xCD9E8D57u} * tensor;  // round 0, words 2 -> 0, 1
    auto const c0 = static_cast<std::uint32_t>(p1 >> 32) ^ step ^ w.a[0], c1 = static_cast<std::uint32_t>(p1);
    std::uint64_t const q0 = std::uint64_t{0xD2511F53u} * c0;  // round 1, words 0 -> 2, 3
    auto const d3 = static_cast<std::uint32_t>(q0);
    w.r0 = rank ^ w.b[0];
    w.d0 = c1 ^ w.a[1];
    w.d2 = static_cast<std::uint32_t>(q0 >> 32) ^ w.b[1];
    w.e2 = d3 ^ w.b[2];
    return w;
  }

  __attribute__((target("avx2"))) keys8 round_keys() const noexcept {
    key_words const w = round_key_words();
    keys8 k;
    for (int round = 0; round < 10; ++round)
      k.a[round] = _mm256_set1_epi32(static_cast<int>(w.a[round])),
      k.b[round] = _mm256_set1_epi32(static_cast<int>(w.b[round]));
    k.r0 = _mm256_set1_epi32(static_cast<int>(w.r0));
    k.d0 = _mm256_set1_epi32(static_cast<int>(w.d0));
    k.d2 = _mm256_set1_epi32(static_cast<int>(w.d2));
    k.e2 = _mm256_set1_epi32(static_cast<int>(w.e2));
    return k;
  }

  /// Blocks first .. first+7 after rounds 0-2 of Philox4x32-10 with counter (block, step, tensor,
  /// rank) and key (k0, k1), the block-independent products folded into k.
  __attribute__((target("avx2"), always_inline)) static inline block8 begin8(std::uint32_t first,
                                                                             keys8 const& k) noexcept {
    __m256i const m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u);
    __m256i const idx = _mm256_set_epi64x(3, 2, 1, 0);
    block8 s;
    for (int h = 0; h < 2; ++h) {
      __m256i const ctr =
          _mm256_add_epi64(_mm256_set1_epi64x(static_cast<std::uint32_t>(first + 4 * static_cast<unsigned>(h))), idx);
      __m256i const p0 = _mm256_mul_epu32(ctr, m0);                          // round 0
      __m256i const x2 = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), k.r0);  //   (x0, x1 constant)
      __m256i const p1 = _mm256_mul_epu32(x2, m1);                           // round 1
      __m256i const y0 = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), k.d0);  //   (x3 constant)
      __m256i const y2 = _mm256_xor_si256(p0, k.d2);
      __m256i const q0 = _mm256_mul_epu32(y0, m0), q1 = _mm256_mul_epu32(y2, m1);  // round 2
      s.x0[h] = _mm256_xor_si256(_mm256_srli_epi64(q1, 32), _mm256_xor_si256(p1, k.a[2]));
      s.x1[h] = q1;
      s.x2[h] = _mm256_xor_si256(_mm256_srli_epi64(q0, 32), k.e2);
      s.x3[h] = q0;
    }
    return s;
  }

  /// Rounds R0 .. R1-1 (of 10) on s.
  template <int R0, int R1>
  __attribute__((target("avx2"), always_inline)) static inline void rounds8(block8& s, keys8 const& k) noexcept {
    __m256i const m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u);
    for (int round = R0; round < R1; ++round) {
      for (int h = 0; h < 2; ++h) {
        __m256i const p0 = _mm256_mul_epu32(s.x0[h], m0), p1 = _mm256_mul_epu32(s.x2[h], m1);
        s.x0[h] = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), _mm256_xor_si256(s.x1[h], k.a[round]));
        s.x1[h] = p1;
        s.x2[h] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), _mm256_xor_si256(s.x3[h], k.b[round]));
        s.x3[h] = p0;
      }
    }
  }

  /// The 64 rounding halfwords of a finished block8, one per element of 64 consecutive elements:
  /// r[t] holds those of elements 16t .. 16t+15 in the order [0-3, 8-11 | 4-7, 12-15], i.e. the
  /// stream words of blocks first+2t and first+2t+1 with their 64-bit quarters permuted as
  /// _mm256_permute4x64_epi64(x, 0xd8) would.
  __attribute__((target("avx2"), always_inline)) static inline void halves8(block8 const& s, __m256i (&r)[4]) noexcept {
    for (int h = 0; h < 2; ++h) {
      // Per 64-bit lane (block): words 0, 1 and words 2, 3.
      __m256i const w01 = _mm256_blend_epi32(s.x0[h], _mm256_slli_epi64(s.x1[h], 32), 0xaa);
      __m256i const w23 = _mm256_blend_epi32(s.x2[h], _mm256_slli_epi64(s.x3[h], 32), 0xaa);
      r[2 * h] = _mm256_permute2x128_si256(w01, w23, 0x20);
      r[2 * h + 1] = _mm256_permute2x128_si256(w01, w23, 0x31);
    }
  }
#endif

#if SLUICE_HAVE_AVX512_TARGET
  SLUICE_AVX512_DIAGNOSTICS_BEGIN
  /// Philox state of blocks first .. first+7 in AVX-512 registers, for the same fused consumer
  /// as block8: block first+l in 64-bit lane l of each word (low half; the high halves hold
  /// don't-care bits). A round is 2 multiplies, 2 shifts and 2 three-way xors (vpternlog) for 8
  /// blocks.
  struct block8z {
    __m512i x0, x1, x2, x3;
  };

  /// keys8's round keys and folded constants of rounds 0-2, broadcast to 512 bits.
  struct keys8z {
    __m512i a[10], b[10];
    __m512i r0, d0, d2, e2;
  };

  SLUICE_TARGET_AVX512 keys8z round_keys_512() const noexcept {
    key_words const w = round_key_words();
    keys8z k;
    for (int round = 0; round < 10; ++round)
      k.a[round] = _mm512_set1_epi32(static_cast<int>(w.a[round])),
      k.b[round] = _mm512_set1_epi32(static_cast<int>(w.b[round]));
    k.r0 = _mm512_set1_epi32(static_cast<int>(w.r0));
    k.d0 = _mm512_set1_epi32(static_cast<int>(w.d0));
    k.d2 = _mm512_set1_epi32(static_cast<int>(w.d2));
    k.e2 = _mm512_set1_epi32(static_cast<int>(w.e2));
    return k;
  }

  /// Blocks first .. first+7 after rounds 0-2 (as begin8).
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline block8z begin8_512(std::uint32_t first,
                                                                                       keys8z const& k) noexcept {
    __m512i const m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
    __m512i const ctr = _mm512_add_epi64(_mm512_set1_epi64(first), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    __m512i const p0 = _mm512_mul_epu32(ctr, m0);                          // round 0
    __m512i const x2 = _mm512_xor_si512(_mm512_srli_epi64(p0, 32), k.r0);  //   (x0, x1 constant)
    __m512i const p1 = _mm512_mul_epu32(x2, m1);                           // round 1
    __m512i const y0 = _mm512_xor_si512(_mm512_srli_epi64(p1, 32), k.d0);  //   (x3 constant)
    __m512i const y2 = _mm512_xor_si512(p0, k.d2);
    __m512i const q0 = _mm512_mul_epu32(y0, m0), q1 = _mm512_mul_epu32(y2, m1);  // round 2
    block8z s;
    s.x0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(q1, 32), p1, k.a[2], 0x96);  // three-way xor
    s.x1 = q1;
    s.x2 = _mm512_xor_si512(_mm512_srli_epi64(q0, 32), k.e2);
    s.x3 = q0;
    return s;
  }

  /// Rounds R0 .. R1-1 (of 10) on s.
  template <int R0, int R1>
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline void rounds8_512(block8z& s,
                                                                                     keys8z const& k) noexcept {
    __m512i const m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
    for (int round = R0; round < R1; ++round) {
      __m512i const p0 = _mm512_mul_epu32(s.x0, m0), p1 = _mm512_mul_epu32(s.x2, m1);
      s.x0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), s.x1, k.a[round], 0x96);
      s.x1 = p1;
      s.x2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), s.x3, k.b[round], 0x96);
      s.x3 = p0;
    }
  }

  /// The 64 rounding halfwords of a finished block8z: 64-bit lane l of w01 holds halfwords 0-3
  /// of block first+l (elements 8l .. 8l+3), lane l of w23 halfwords 4-7 (elements 8l+4 .. 8l+7).
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline void halves8_512(block8z const& s, __m512i& w01,
                                                                                     __m512i& w23) noexcept {
    // Odd 32-bit lanes take the low word of their 64-bit lane from x1 / x3 (vpshufd, merged).
    w01 = _mm512_mask_shuffle_epi32(s.x0, 0xaaaa, s.x1, _MM_PERM_CCAA);
    w23 = _mm512_mask_shuffle_epi32(s.x2, 0xaaaa, s.x3, _MM_PERM_CCAA);
  }
  SLUICE_AVX512_DIAGNOSTICS_END
#endif

#if defined(__SSE2__)
  static void mulhilo(__m128i x, __m128i m, __m128i& hi, __m128i& lo) noexcept {
    __m128i const even = _mm_mul_epu32(x, m);                     // 64-bit products of lanes 0, 2
    __m128i const odd = _mm_mul_epu32(_mm_srli_epi64(x, 32), m);  // lanes 1, 3
    __m128i const low32 = _mm_set_epi32(0, -1, 0, -1);
    lo = _mm_or_si128(_mm_and_si128(even, low32), _mm_slli_epi64(odd, 32));
    hi = _mm_or_si128(_mm_srli_epi64(even, 32), _mm_andnot_si128(low32, odd));
  }

  void words_sse2(std::uint64_t first, std::uint32_t* out) const noexcept {
    auto const f = static_cast<std::uint32_t>(first);
    __m128i x0 =
        _mm_set_epi32(static_cast<int>(f + 3), static_cast<int>(f + 2), static_cast<int>(f + 1), static_cast<int>(f));
    __m128i x1 = _mm_set1_epi32(static_cast<int>(step)), x2 = _mm_set1_epi32(static_cast<int>(tensor)),
            x3 = _mm_set1_epi32(static_cast<int>(rank));
    __m128i const m0 = _mm_set1_epi32(static_cast<int>(0xD2511F53u)),
                  m1 = _mm_set1_epi32(static_cast<int>(0xCD9E8D57u));
    std::uint32_t ka = k0, kb = k1;
    for (int round = 0; round < 10; ++round) {
      __m128i hi0, lo0, hi1, lo1;
      mulhilo(x0, m0, hi0, lo0);
      mulhilo(x2, m1, hi1, lo1);
      x0 = _mm_xor_si128(_mm_xor_si128(hi1, x1), _mm_set1_epi32(static_cast<int>(ka)));
      x1 = lo1;
      x2 = _mm_xor_si128(_mm_xor_si128(hi0, x3), _mm_set1_epi32(static_cast<int>(kb)));
      x3 = lo0;
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    // Transpose: lane l of x0..x3 is block first+l, whose four words are stored together.
    __m128i const t0 = _mm_unpacklo_epi32(x0, x1), t1 = _mm_unpacklo_epi32(x2, x3);
    __m128i const t2 = _mm_unpackhi_epi32(x0, x1), t3 = _mm_unpackhi_epi32(x2, x3);
    auto* o = reinterpret_cast<__m128i*>(out);
    _mm_storeu_si128(o, _mm_unpacklo_epi64(t0, t1));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi64(t0, t1));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi64(t2, t3));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi64(t2, t3));
  }
#endif

  /// Word i of the stream.
  [[nodiscard]] std::uint32_t word(std::uint64_t i) const noexcept {
    std::uint32_t w[4];
    words(i >> 2, 1, w);
    return w[i & 3];
  }
};

}  // namespace sluice::detail
