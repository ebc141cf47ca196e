// Philox4x32-10 lanes: the words of a sluice::random_stream for many consecutive blocks at once
// (one body over lanes, philox_body.hpp, at the CPU's level), equal to random_stream's word for
// word; and the register-resident Philox state of the fused bf16 optimizer loops.
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

  /// Words 4*first .. 4*(first+blocks)-1 of the stream into out[0 .. 4*blocks): philox_words
  /// at this process's level (GCC vectorizes the plain loop with 64-bit lanes only, 2 blocks per
  /// vector, which made Philox the bottleneck of bf16 states), the rest scalar.
  void words(std::uint64_t first, std::size_t blocks, std::uint32_t* SLUICE_RESTRICT out) const noexcept;

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

  SLUICE_TARGET_AVX2 keys8 round_keys() const noexcept {
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
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline block8 begin8(std::uint32_t first,
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
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline void rounds8(block8& s, keys8 const& k) noexcept {
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
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline void halves8(block8 const& s,
                                                                               __m256i (&r)[4]) noexcept {
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

  /// Word i of the stream.
  [[nodiscard]] std::uint32_t word(std::uint64_t i) const noexcept {
    std::uint32_t w[4];
    words(i >> 2, 1, w);
    return w[i & 3];
  }
};

/// philox_lanes::words at level L (core/detail/philox_body.hpp, stamped below).
template <simd L>
struct philox_words;

}  // namespace sluice::detail

#define SLUICE_SIMD_BODY <sluice/core/detail/philox_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail {

inline void philox_lanes::words(std::uint64_t first, std::size_t blocks,
                                std::uint32_t* SLUICE_RESTRICT out) const noexcept {
  std::size_t const j =
      simd_detail::dispatch([&](auto l) { return philox_words<decltype(l)::value>::words(*this, first, blocks, out); });
  words_scalar(first + j, blocks - j, out + 4 * j);
}

}  // namespace sluice::detail
