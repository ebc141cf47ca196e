// Shared machinery of the CPU optimizers: SIMD loop pragma, exact vector sqrt, vectorized Philox
// words for stochastic rounding, bf16 conversions, and the dense / block / element drivers that
// run an optimizer's per-tile kernel over cache-sized chunks on all threads.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <Eigen/Core>

#include <sluice/config.hpp>
#include <sluice/core/cache.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/state.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

// `omp simd` vectorizes plain loops at -O2 when OpenMP is on; otherwise ask GCC/clang directly.
#if defined(_OPENMP)
#define SLUICE_OPTIM_SIMD _Pragma("omp simd")
#elif defined(__clang__)
#define SLUICE_OPTIM_SIMD _Pragma("clang loop vectorize(enable)")
#elif defined(__GNUC__)
#define SLUICE_OPTIM_SIMD _Pragma("GCC ivdep")
#else
#define SLUICE_OPTIM_SIMD
#endif

namespace sluice::detail::optim {

/// Elements per tile: the unit a kernel processes with its temporaries in L1 (5 arrays x 1 KiB).
inline constexpr std::size_t tile = 256;

/// Mutable access to optimizer_state internals for the kernels.
struct state_access {
  template <class S>
  static float* f32(S& s, std::size_t k) noexcept {
    return s.f32_.empty() ? nullptr : s.f32_.data() + k * s.stride_;
  }
  template <class S>
  static std::uint16_t* bf16(S& s, std::size_t k) noexcept {
    return s.bf16_.empty() ? nullptr : s.bf16_.data() + k * s.stride_;
  }
  template <class S>
  static std::uint32_t* last(S& s) noexcept {
    return s.last_.empty() ? nullptr : s.last_.data();
  }
  template <class S>
  static std::uint64_t& step(S& s) noexcept {
    return s.step_;
  }
};

// sqrt without errno: GCC will not vectorize std::sqrt unless -fno-math-errno is on the command
// line (the optimize attribute does not help), and a header cannot choose its users' flags. The
// SSE/AVX square roots are correctly rounded, so results equal the scalar std::sqrt bit for bit.
inline void sqrt_into(float* SLUICE_RESTRICT dst, float const* SLUICE_RESTRICT src, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_sqrt_ps(_mm512_loadu_ps(src + i)));
#endif
#if defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_sqrt_ps(_mm256_loadu_ps(src + i)));
#endif
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(dst + i, _mm_sqrt_ps(_mm_loadu_ps(src + i)));
#endif
  for (; i < n; ++i) dst[i] = std::sqrt(src[i]);
}

/// bf16 bit pattern to float (exact).
inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// float to bf16 with stochastic rounding, bit-identical to from_float_stochastic<Eigen::bfloat16>
/// but branch-free so loops over it vectorize.
inline std::uint16_t bf16_stochastic(float x, std::uint32_t random) noexcept {
  // Signed 32-bit arithmetic throughout: SSE2 compares and packs signed lanes only.
  auto const bits = std::bit_cast<std::int32_t>(x);
  std::int32_t const mag = bits & 0x7fffffff;
  std::int32_t const nan = (bits & ~0x7fffffff) | 0x7fc00000;
  std::int32_t const rounded =
      static_cast<std::int32_t>(static_cast<std::uint32_t>(bits) + (random >> 16));  // carries are correct
  // Inf needs no case of its own: adding fewer than 2^16 to 0x7f800000 leaves the top half alone.
  std::int32_t const r = mag > 0x7f800000 ? nan : rounded;
  return static_cast<std::uint16_t>(static_cast<std::int16_t>(r >> 16));
}

/// float to bf16 with round-to-nearest-even, bit-identical to Eigen::bfloat16(x), branch-free.
inline std::uint16_t bf16_nearest(float x) noexcept {
  std::uint32_t const bits = std::bit_cast<std::uint32_t>(x);
  std::uint32_t const mag = bits & 0x7fffffffu;
  std::uint32_t const nan = (bits & 0x80000000u) | 0x7fc00000u;
  std::uint32_t const r = mag > 0x7f800000u ? nan : bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}

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

/// Stochastic rounding of bf16 moments draws 8 bits per rounding from the step's stream: word k
/// serves elements 2k (bits 0-15) and 2k+1 (bits 16-31), moment 0 taking the low byte and moment
/// 1 the high byte of each half, placed in the top byte of from_float_stochastic's random word.
/// Rounding up then happens with the probability quantized to 1/256 (bias <= 2^-9 ulp), and one
/// Philox evaluation serves 8 elements: 16 bits per rounding made Philox the bottleneck.
///
/// Raw pointers into one tensor's parameters and state for one step.
struct tensor_refs {
  float* params = nullptr;
  std::size_t n = 0;
  float* mf[2] = {nullptr, nullptr};          // f32 moments
  std::uint16_t* mb[2] = {nullptr, nullptr};  // bf16 moments (bit patterns)
  std::uint32_t* last = nullptr;              // per-entry last step (catch_up)
  philox_lanes rs{};                          // stochastic-rounding stream of this step
};

template <class O, class T>
tensor_refs refs_of(optimizer_state<O, T>& s, std::span<float> params, std::uint64_t seed) {
  tensor_refs r;
  r.params = params.data();
  r.n = params.size();
  for (std::size_t k = 0; k < s.layout().moments; ++k) {
    r.mf[k] = state_access::f32(s, k);
    r.mb[k] = state_access::bf16(s, k);
  }
  r.last = state_access::last(s);
  // Shared rank: every replica applies the same aggregated update, so every replica must round
  // the same way or replicas drift apart (CGX's bug); the step keeps streams of steps disjoint.
  r.rs =
      philox_lanes::from(stream_key{seed, stream_key::shared_rank, static_cast<std::uint32_t>(s.step()), s.tensor()});
  return r;
}

/// No shadow output.
struct no_shadow {};

template <class Sh>
inline void write_shadow(Sh* SLUICE_RESTRICT out, float const* SLUICE_RESTRICT p, std::size_t n) noexcept {
  if constexpr (std::is_same_v<Sh, Eigen::bfloat16>) {
    auto* o = reinterpret_cast<std::uint16_t*>(out);  // Eigen::bfloat16 is one uint16 (standard layout)
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) o[i] = bf16_nearest(p[i]);
  } else if constexpr (std::is_same_v<Sh, Eigen::half>) {
    for (std::size_t i = 0; i < n; ++i) out[i] = Eigen::half(p[i]);
  }
}

/// Prefetches element i of the parameters, moments and counters.
template <bool Bf16>
inline void prefetch_element(tensor_refs const& r, std::size_t nm, std::size_t i) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(r.params + i, 1, 3);
  for (std::size_t j = 0; j < nm; ++j) {
    if constexpr (Bf16)
      __builtin_prefetch(r.mb[j] + i, 1, 3);
    else
      __builtin_prefetch(r.mf[j] + i, 1, 3);
  }
  if (r.last != nullptr) __builtin_prefetch(r.last + i, 1, 3);
#else
  (void)r, (void)nm, (void)i;
#endif
}

/// Prefetches (for writing) every cache line of elements [i, i + len) of the parameters, moments
/// and counters: one block of a block-sparse step.
/// Prefetches (for writing) every cache line of [first, first + bytes).
inline void prefetch_lines(void const* first, std::size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  if (bytes == 0) return;
  auto const b = reinterpret_cast<std::uintptr_t>(first), last = b + bytes - 1;
  for (std::uintptr_t q = b & ~std::uintptr_t{63}; q <= last; q += 64)
    __builtin_prefetch(reinterpret_cast<void const*>(q), 1, 3);
#else
  (void)first, (void)bytes;
#endif
}

template <bool Bf16>
inline void prefetch_block(tensor_refs const& r, std::size_t nm, std::size_t i, std::size_t len) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  auto const lines = prefetch_lines;
  lines(r.params + i, len * sizeof(float));
  for (std::size_t j = 0; j < nm; ++j) {
    if constexpr (Bf16)
      lines(r.mb[j] + i, len * sizeof(std::uint16_t));
    else
      lines(r.mf[j] + i, len * sizeof(float));
  }
  if (r.last != nullptr) lines(r.last + i, len * sizeof(std::uint32_t));
#else
  (void)r, (void)nm, (void)i, (void)len;
#endif
}

/// Kernels with a fused one-pass bf16-moment step drawing its own rounding bits (core_bf16_stream).
template <class K>
concept fused_bf16_kernel = requires(K const& k, float* p, float const* g, std::uint16_t* b, philox_lanes const& rs) {
  k.core_bf16_stream(p, g, b, b, rs, std::uint64_t{}, std::size_t{});
};
template <class K>
inline constexpr bool has_fused_bf16 = SLUICE_HAVE_AVX2_TARGET&& fused_bf16_kernel<K>;

/// Processes elements [base, base + len) contiguously: moments (loaded to float when bf16),
/// catch-up of skipped steps to `target`, the kernel's update with gradient g (nullptr: catch-up
/// only), per-entry counters, stochastic-rounding stores and the shadow, one tile at a time.
template <class K, bool Bf16, class Sh>
void run_contiguous(K const& k, tensor_refs const& r, float const* g, Sh* shadow, std::size_t base, std::size_t len,
                    std::uint64_t target) {
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t words[tile / 2 + 8];
  alignas(64) std::uint16_t rnd[tile];
  std::size_t const nm = k.moments;
#if SLUICE_HAVE_AVX2_TARGET
  if constexpr (Bf16 && has_fused_bf16<K>) {
    // Lazy or dense bf16 steps with AVX2: one pass draws the rounding bits, widens, steps and
    // rounds (no catch-up), over stretches of 16 tiles: long enough for the loop's Philox pipeline
    // (its first group is not overlapped), short enough that the shadow reads p from L1.
    if (r.last == nullptr && g != nullptr && nm == 2 && use_avx2()) {
      constexpr std::size_t stretch = 16 * tile;
      for (std::size_t o = 0; o < len; o += stretch) {
        std::size_t const b = base + o, n = std::min(stretch, len - o);
        k.core_bf16_stream(r.params + b, g + o, r.mb[0] + b, r.mb[1] + b, r.rs, b, n);
        if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + b, r.params + b, n);
      }
      return;
    }
  }
#endif
  if constexpr (!Bf16 && std::is_same_v<Sh, no_shadow> &&
                requires(K const& kk, float* f, float const* cf, float* const* mm, std::size_t z) {
                  kk.core_range(f, cf, mm, z);
                }) {
    // fp32 steps without catch-up or shadow: the kernel's own tile loop over the whole range.
    if (r.last == nullptr && g != nullptr) {
      float* m[2] = {r.mf[0] == nullptr ? nullptr : r.mf[0] + base, r.mf[1] == nullptr ? nullptr : r.mf[1] + base};
      k.core_range(r.params + base, g, m, len);
      return;
    }
  }
  for (std::size_t o = 0; o < len; o += tile) {
    std::size_t const b = base + o, n = std::min(tile, len - o);
    float* p = r.params + b;
    float* m[2] = {nullptr, nullptr};
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16) {
        std::uint16_t const* src = r.mb[j] + b;
        float* dst = mbuf[j];
        SLUICE_OPTIM_SIMD
        for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
        m[j] = dst;
      } else {
        m[j] = r.mf[j] + b;
      }
    }
    if (r.last != nullptr) {
      k.catch_up(p, m, r.last + b, n, target);
      auto const now = static_cast<std::uint32_t>(g != nullptr ? target + 1 : target);
      std::fill_n(r.last + b, n, now);
    }
    if (g != nullptr) k.core(p, g + o, m, tmp, n);
    if constexpr (Bf16) {
      if (nm > 0) {
        // Half-word e of the stream (little-endian) holds element e's bits: copy them out.
        std::uint64_t const first = b >> 3, last_block = (b + n - 1) >> 3;
        r.rs.words(first, static_cast<std::size_t>(last_block - first + 1), words);
        std::memcpy(rnd, reinterpret_cast<unsigned char const*>(words) + 2 * (b & 7), 2 * n);
        for (std::size_t j = 0; j < nm; ++j) {
          std::uint16_t* dst = r.mb[j] + b;
          float const* src = m[j];
          unsigned const shift = 24 - 8 * static_cast<unsigned>(j);
          SLUICE_OPTIM_SIMD
          for (std::size_t i = 0; i < n; ++i)
            dst[i] = bf16_stochastic(src[i], (static_cast<std::uint32_t>(rnd[i]) << shift) & 0xff000000u);
        }
      }
    }
    if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + b, p, n);
  }
}

/// Processes `count` scattered elements idx[0..count) with gradients vals[0..count): gathers them
/// into tiles, runs the same tile kernel as the contiguous path (so results are identical), and
/// scatters back.
template <class K, bool Bf16, class Sh, class Index>
void run_gather(K const& k, tensor_refs const& r, Index const* idx, float const* vals, Sh* shadow, std::size_t count,
                std::uint64_t target) {
  alignas(64) float pbuf[tile];
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t lbuf[tile];
  std::size_t const nm = k.moments;
  for (std::size_t o = 0; o < count; o += tile) {
    std::size_t const n = std::min(tile, count - o);
    Index const* ix = idx + o;
    // Random indices defeat the hardware prefetcher: ask for element i + ahead while loading i.
    constexpr std::size_t ahead = 32;
    for (std::size_t i = 0; i < n; ++i) {
      if (o + i + ahead < count) prefetch_element<Bf16>(r, nm, static_cast<std::size_t>(ix[i + ahead]));
      pbuf[i] = r.params[ix[i]];
    }
    float* m[2] = {nullptr, nullptr};
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16)
        for (std::size_t i = 0; i < n; ++i) mbuf[j][i] = bf16_to_float(r.mb[j][ix[i]]);
      else
        for (std::size_t i = 0; i < n; ++i) mbuf[j][i] = r.mf[j][ix[i]];
      m[j] = mbuf[j];
    }
    if (r.last != nullptr) {
      for (std::size_t i = 0; i < n; ++i) lbuf[i] = r.last[ix[i]];
      k.catch_up(pbuf, m, lbuf, n, target);
      auto const now = static_cast<std::uint32_t>(target + 1);
      for (std::size_t i = 0; i < n; ++i) r.last[ix[i]] = now;
    }
    k.core(pbuf, vals + o, m, tmp, n);
    for (std::size_t i = 0; i < n; ++i) r.params[ix[i]] = pbuf[i];
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16) {
        unsigned const shift = 24 - 8 * static_cast<unsigned>(j);
        for (std::size_t i = 0; i < n; ++i) {
          std::uint32_t const bits = r.rs.word(ix[i] >> 1) >> (16 * (ix[i] & 1));
          r.mb[j][ix[i]] = bf16_stochastic(m[j][i], (bits << shift) & 0xff000000u);
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) r.mf[j][ix[i]] = m[j][i];
      }
    }
    if constexpr (!std::is_same_v<Sh, no_shadow>)
      for (std::size_t i = 0; i < n; ++i) write_shadow(shadow + ix[i], pbuf + i, 1);
  }
}

/// Copies a short run of floats inline (a block of 16 is one cache line): a memcpy call per
/// block and array cost more than the block's arithmetic.
inline void copy_floats(float* SLUICE_RESTRICT dst, float const* SLUICE_RESTRICT src, std::size_t n) noexcept {
  SLUICE_OPTIM_SIMD
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
}

/// Small blocks (block_size <= tile / 2): copies a group of blocks into one tile, runs the tile
/// kernel once and copies back, like the element path. Issuing the loads of a whole group back to
/// back keeps many cache misses in flight, where one block at a time serialized them. The
/// arithmetic is elementwise, so results equal the element path and the dense step bit for bit.
template <class K, bool Bf16, class Sh, class Index>
void run_blocks(K const& k, tensor_refs const& r, sparse_view<float const, Index> s, std::size_t jb, std::size_t je,
                Sh* shadow, std::uint64_t target) {
  alignas(64) float pbuf[tile];
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t lbuf[tile];
  alignas(64) std::uint32_t words[tile / 2 + 8];
  alignas(64) std::uint16_t rnd[tile];
  std::size_t const nm = k.moments, b = s.block_size, group = tile / b;
  float* m[2] = {mbuf[0], mbuf[1]};
  // Random blocks defeat the hardware prefetcher: request every line of block j + ahead while
  // loading block j, about 2 KiB of state ahead (10 blocks of 16 fp32 elements; 1 to 8 KiB
  // measured the same, as did prefetching a whole group at a time).
  std::size_t const ahead = std::clamp<std::size_t>(2048 / (b * (sizeof(float) + nm * (Bf16 ? 2 : 4))), 2, 32);
  auto const prefetch = [&](std::size_t j) {
    std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
    prefetch_block<Bf16>(r, nm, base, std::min(b, r.n - base));
  };
  for (std::size_t j = jb; j < std::min(je, jb + ahead); ++j) prefetch(j);
  if constexpr (!Bf16) {
    // fp32 moments without catch-up: step each block in place (the kernel is elementwise, so the
    // bits equal the tile path's), without copying it to the tile and back.
    if (r.last == nullptr) {
#if SLUICE_HAVE_AVX2_TARGET
      // Kernels with a whole-range block loop (per-step constants set up once, not per block).
      if constexpr (std::is_same_v<Sh, no_shadow> &&
                    requires(K const& kk, float* f, float const* cf, Index const* ix, std::size_t z) {
                      kk.core_blocks_avx2(f, f, f, cf, ix, z, z, z, z);
                    }) {
        if (nm == 2 && use_avx2()) {
          k.core_blocks_avx2(r.params, r.mf[0], r.mf[1], s.values.data() + jb * b, s.indices.data() + jb, je - jb, b,
                             r.n, ahead);
          return;
        }
      }
#endif
      for (std::size_t j = jb; j < je; ++j) {
        if (j + ahead < je) prefetch(j + ahead);
        std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
        std::size_t const len = std::min(b, r.n - base);
        float* mm[2] = {r.mf[0] == nullptr ? nullptr : r.mf[0] + base, r.mf[1] == nullptr ? nullptr : r.mf[1] + base};
        k.core(r.params + base, s.values.data() + j * b, mm, tmp, len);
        if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + base, r.params + base, len);
      }
      return;
    }
  }
  for (std::size_t j0 = jb; j0 < je; j0 += group) {
    std::size_t const j1 = std::min(je, j0 + group), count = (j1 - j0) * b;
    for (std::size_t j = j0; j < j1; ++j) {
      if (j + ahead < je) prefetch(j + ahead);
      std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b, off = (j - j0) * b;
      std::size_t const len = std::min(b, r.n - base);
      copy_floats(pbuf + off, r.params + base, len);
      for (std::size_t jj = 0; jj < nm; ++jj) {
        if constexpr (Bf16)
          for (std::size_t i = 0; i < len; ++i) mbuf[jj][off + i] = bf16_to_float(r.mb[jj][base + i]);
        else
          copy_floats(mbuf[jj] + off, r.mf[jj] + base, len);
      }
      if (r.last != nullptr) std::copy_n(r.last + base, len, lbuf + off);
      for (std::size_t i = len; i < b; ++i) {  // padding of a partial last block: computed, never stored
        pbuf[off + i] = 0;
        mbuf[0][off + i] = mbuf[1][off + i] = 0;
        lbuf[off + i] = static_cast<std::uint32_t>(target);
      }
    }
    if (r.last != nullptr) k.catch_up(pbuf, m, lbuf, count, target);
    k.core(pbuf, s.values.data() + j0 * b, m, tmp, count);
    auto const now = static_cast<std::uint32_t>(target + 1);
    for (std::size_t j = j0; j < j1; ++j) {
      std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b, off = (j - j0) * b;
      std::size_t const len = std::min(b, r.n - base);
      copy_floats(r.params + base, pbuf + off, len);
      if constexpr (Bf16) {
        if (nm > 0) {
          std::uint64_t const first = base >> 3, last_block = (base + len - 1) >> 3;
          r.rs.words(first, static_cast<std::size_t>(last_block - first + 1), words);
          std::memcpy(rnd, reinterpret_cast<unsigned char const*>(words) + 2 * (base & 7), 2 * len);
          for (std::size_t jj = 0; jj < nm; ++jj) {
            unsigned const shift = 24 - 8 * static_cast<unsigned>(jj);
            for (std::size_t i = 0; i < len; ++i)
              r.mb[jj][base + i] =
                  bf16_stochastic(mbuf[jj][off + i], (static_cast<std::uint32_t>(rnd[i]) << shift) & 0xff000000u);
          }
        }
      } else {
        for (std::size_t jj = 0; jj < nm; ++jj) copy_floats(r.mf[jj] + base, mbuf[jj] + off, len);
      }
      if (r.last != nullptr) std::fill_n(r.last + base, len, now);
      if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + base, pbuf + off, len);
    }
  }
}

/// Elements per parallel chunk: enough that one chunk's streams fill a core's share of L2.
inline std::size_t chunk_elements(std::size_t bytes_per_element) {
  std::size_t const l2 = cache_sizes().l2_per_core();
  return std::max<std::size_t>(tile * 4, l2 / std::max<std::size_t>(bytes_per_element, 1));
}

/// Bytes one element moves: params + grad + moments (read and written).
inline std::size_t bytes_per_element(std::size_t moments, bool bf16) { return 12 + moments * (bf16 ? 4 : 8); }

/// Dense step (g != nullptr) or flush (g == nullptr) over the whole tensor.
template <class K, bool Bf16, class Sh>
void run_dense(K const& k, tensor_refs const& r, float const* g, Sh* shadow, std::uint64_t target, bool parallel) {
  auto body = [&](std::size_t b, std::size_t e, int) {
    run_contiguous<K, Bf16, Sh>(k, r, g == nullptr ? nullptr : g + b, shadow, b, e - b, target);
  };
  if (parallel)
    parallel_chunks(r.n, chunk_elements(bytes_per_element(k.moments, Bf16)), body);
  else
    body(0, r.n, 0);
}

/// Sparse step: block path (contiguous blocks, SIMD across each block) or element path (gather).
template <class K, bool Bf16, class Sh, class Index>
void run_sparse(K const& k, tensor_refs const& r, sparse_view<float const, Index> s, Sh* shadow, std::uint64_t target,
                bool parallel) {
  std::size_t const nnz = s.nnz(), bsz = s.block_size;
  if (bsz > 1) {
    auto body = [&](std::size_t jb, std::size_t je, int) {
      if (bsz <= tile / 2) {
        run_blocks<K, Bf16, Sh, Index>(k, r, s, jb, je, shadow, target);
        return;
      }
      for (std::size_t j = jb; j < je; ++j) {
        std::size_t const base = static_cast<std::size_t>(s.indices[j]) * bsz;
        std::size_t const len = std::min(bsz, r.n - base);
        run_contiguous<K, Bf16, Sh>(k, r, s.values.data() + j * bsz, shadow, base, len, target);
      }
    };
    std::size_t const grain = std::max<std::size_t>(1, chunk_elements(bytes_per_element(k.moments, Bf16)) / bsz);
    if (parallel)
      parallel_chunks(nnz, grain, body);
    else
      body(0, nnz, 0);
  } else {
    auto body = [&](std::size_t jb, std::size_t je, int) {
      run_gather<K, Bf16, Sh, Index>(k, r, s.indices.data() + jb, s.values.data() + jb, shadow, je - jb, target);
    };
    if (parallel)
      parallel_chunks(nnz, std::size_t{1} << 14, body);
    else
      body(0, nnz, 0);
  }
}

/// 2x2 matrix power for the exact SGD momentum catch-up: the skipped steps act linearly on
/// (param, buffer) when their gradient is zero.
struct mat2 {
  double a = 1, b = 0, c = 0, d = 1;  // [[a, b], [c, d]]
  friend mat2 operator*(mat2 const& x, mat2 const& y) noexcept {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
  [[nodiscard]] mat2 pow(std::uint64_t k) const noexcept {
    mat2 result{}, base = *this;
    while (k != 0) {
      if (k & 1) result = result * base;
      base = base * base;
      k >>= 1;
    }
    return result;
  }
};

/// Throws unless the policy's layout matches the state's and the sizes agree.
template <class State>
void check_state(State const& s, state_layout want, std::size_t params, char const* who) {
  require(s.layout() == want, errc::invalid_argument,
          "{} (tensor {}): state was created with {} but the policy needs {}; create the state from this policy", who,
          s.tensor(), s.layout(), want);
  require(params == s.size(), errc::size_mismatch, "{} (tensor {}): {} parameters for a state of {} elements", who,
          s.tensor(), params, s.size());
  require(!want.per_entry_steps || s.step() < std::uint64_t{0xffffffffu}, errc::unsupported,
          "{} (tensor {}): catch_up counts steps in 32 bits; step {} is past the limit", who, s.tensor(), s.step());
}

template <class Sh>
void check_shadow(std::span<Sh> shadow, std::size_t n, std::uint32_t tensor, char const* who) {
  if constexpr (!std::is_same_v<Sh, no_shadow>)
    require(shadow.size() == n, errc::size_mismatch, "{} (tensor {}): shadow of {} elements for {} parameters", who,
            tensor, shadow.size(), n);
}

/// Dispatches a validated step on the state's moment precision.
template <class K, class O, class Sh>
void dispatch_dense(K const& k, optimizer_state<O, float>& s, std::span<float> params, float const* g,
                    std::span<Sh> shadow, std::uint64_t seed, std::uint64_t target, bool parallel) {
  tensor_refs const r = refs_of(s, params, seed);
  Sh* sh = shadow.data();
  if (s.layout().moment_type == element_type::bf16)
    run_dense<K, true, Sh>(k, r, g, sh, target, parallel);
  else
    run_dense<K, false, Sh>(k, r, g, sh, target, parallel);
}

template <class K, class O, class Sh, class Index>
void dispatch_sparse(K const& k, optimizer_state<O, float>& s, std::span<float> params,
                     sparse_view<float const, Index> g, std::span<Sh> shadow, std::uint64_t seed, std::uint64_t target,
                     bool parallel) {
  tensor_refs const r = refs_of(s, params, seed);
  Sh* sh = shadow.data();
  if (s.layout().moment_type == element_type::bf16)
    run_sparse<K, true, Sh, Index>(k, r, g, sh, target, parallel);
  else
    run_sparse<K, false, Sh, Index>(k, r, g, sh, target, parallel);
}

}  // namespace sluice::detail::optim
