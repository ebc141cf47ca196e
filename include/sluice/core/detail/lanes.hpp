// The lane types the SIMD kernel bodies are written over: vf32<L> holds width floats at level L
// (baseline: SSE2, 4, or one scalar off x86; avx2: 8; avx512: 16) and vi32<L> as many int32
// (levels, keys, Philox words, bf16 rounding bits, top-k entries), each compiled for its level's
// instruction set, so that a body stamped at L (core/detail/simd_stamp.hpp) can inline them.
// Products round on their own (an empty asm keeps them out of FMA; see core/simd.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sluice/core/simd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/// Lane operations and the helpers of a stamped body: always inlined (each is a few instructions).
#define SLUICE_SIMD_INLINE __attribute__((always_inline)) inline

namespace sluice::detail::simd {

template <sluice::simd L>
struct vf32;
template <sluice::simd L>
struct vi32;

#if defined(__SSE2__)
template <>
struct vf32<sluice::simd::baseline> {
  static constexpr std::size_t width = 4;
  __m128 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm_storeu_ps(p, x.v); }
  // The first k < width lanes, through a buffer (no masked moves at this level); the rest zero.
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    alignas(64) float b[width] = {};
    std::memcpy(b, p, k * sizeof(float));
    return load(b);
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    alignas(64) float b[width];
    store(b, x);
    std::memcpy(p, b, k * sizeof(float));
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m128 r = _mm_mul_ps(a.v, b.v);
    __asm__("" : "+x"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm_sqrt_ps(a.v)}; }
  // min and max as x86 computes them: the second operand where the compare fails (NaN).
  friend SLUICE_SIMD_INLINE vf32 min(vf32 a, vf32 b) noexcept { return {_mm_min_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 max(vf32 a, vf32 b) noexcept { return {_mm_max_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator|(vf32 a, vf32 b) noexcept { return {_mm_or_ps(a.v, b.v)}; }
  /// True when every lane is +-0.
  friend SLUICE_SIMD_INLINE bool all_zero(vf32 a) noexcept {
    return _mm_movemask_ps(_mm_cmpeq_ps(a.v, _mm_setzero_ps())) == 0xf;
  }
  /// width bf16 (bit patterns) widened to float (exact).
  static SLUICE_SIMD_INLINE vf32 load_bf16(std::uint16_t const* p) noexcept {
    __m128i const h = _mm_loadl_epi64(reinterpret_cast<__m128i const*>(p));
    return {_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h))};
  }
  /// True when any lane is NaN.
  friend SLUICE_SIMD_INLINE bool any_nan(vf32 a) noexcept { return _mm_movemask_ps(_mm_cmpunord_ps(a.v, a.v)) != 0; }
};

/// Four int32 lanes (levels of the quantizers).
template <>
struct vi32<sluice::simd::baseline> {
  static constexpr std::size_t width = 4;
  __m128i v;
  /// Truncated toward zero (NaN and out of range: INT_MIN).
  /// The bits of width floats.
  static SLUICE_SIMD_INLINE vi32 load_bits(float const* p) noexcept {
    return {_mm_loadu_si128(reinterpret_cast<__m128i const*>(p))};
  }
  static SLUICE_SIMD_INLINE vi32 set(std::int32_t x) noexcept { return {_mm_set1_epi32(x)}; }
  friend SLUICE_SIMD_INLINE vi32 operator&(vi32 a, vi32 b) noexcept { return {_mm_and_si128(a.v, b.v)}; }
  /// Bit j set when lane j of a > lane j of b (signed).
  friend SLUICE_SIMD_INLINE unsigned gt_mask(vi32 a, vi32 b) noexcept {
    return static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(a.v, b.v))));
  }
  friend SLUICE_SIMD_INLINE vi32 operator^(vi32 a, vi32 b) noexcept { return {_mm_xor_si128(a.v, b.v)}; }
  /// first, first + 1, ... (mod 2^32).
  static SLUICE_SIMD_INLINE vi32 iota(std::uint32_t first) noexcept {
    return {_mm_add_epi32(_mm_set1_epi32(static_cast<std::int32_t>(first)), _mm_setr_epi32(0, 1, 2, 3))};
  }
  /// The high and low halves of the unsigned 64-bit products x * m, lane by lane.
  friend SLUICE_SIMD_INLINE void mulhilo(vi32 x, vi32 m, vi32& hi, vi32& lo) noexcept {
    __m128i const even = _mm_mul_epu32(x.v, m.v);                     // 64-bit products of lanes 0, 2
    __m128i const odd = _mm_mul_epu32(_mm_srli_epi64(x.v, 32), m.v);  // lanes 1, 3
    __m128i const low32 = _mm_set_epi32(0, -1, 0, -1);
    lo = {_mm_or_si128(_mm_and_si128(even, low32), _mm_slli_epi64(odd, 32))};
    hi = {_mm_or_si128(_mm_srli_epi64(even, 32), _mm_andnot_si128(low32, odd))};
  }
  /// Lane l of a, b, c, d to out[4 l .. 4 l + 3] (a 4 x width transpose).
  static SLUICE_SIMD_INLINE void store4(std::uint32_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m128i const t0 = _mm_unpacklo_epi32(a.v, b.v), t1 = _mm_unpacklo_epi32(c.v, d.v);
    __m128i const t2 = _mm_unpackhi_epi32(a.v, b.v), t3 = _mm_unpackhi_epi32(c.v, d.v);
    auto* o = reinterpret_cast<__m128i*>(out);
    _mm_storeu_si128(o, _mm_unpacklo_epi64(t0, t1));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi64(t0, t1));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi64(t2, t3));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi64(t2, t3));
  }
  /// One 64-byte line from the 64-byte-aligned src to the 64-byte-aligned dst, non-temporal.
  static SLUICE_SIMD_INLINE void stream64(std::byte* dst, std::byte const* src) noexcept {
    for (int q = 0; q < 4; ++q)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst) + q, _mm_load_si128(reinterpret_cast<__m128i const*>(src) + q));
  }
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<sluice::simd::baseline> x) noexcept { return {_mm_cvttps_epi32(x.v)}; }
  static SLUICE_SIMD_INLINE vf32<sluice::simd::baseline> to_float(vi32 x) noexcept { return {_mm_cvtepi32_ps(x.v)}; }
  /// width bytes, zero-extended.
  static SLUICE_SIMD_INLINE vi32 load_u8(std::uint8_t const* p) noexcept {
    std::int32_t w;
    std::memcpy(&w, p, 4);
    __m128i const z = _mm_setzero_si128();
    return {_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(w), z), z)};
  }
  /// 4 * width levels as bytes in element order, each saturated to [0, 255]; the signed 32->16
  /// pack is exact for levels in [0, 255] (SSE2 has no unsigned one).
  static SLUICE_SIMD_INLINE void store_u8(std::uint8_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m128i const lo = _mm_packs_epi32(a.v, b.v), hi = _mm_packs_epi32(c.v, d.v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(lo, hi));
  }
  /// 4 * width levels in [0, 15] (saturated as store_u8) two per byte, element 2i in the low
  /// nibble of byte i: in each 16-bit pair lo | hi << 8, (w >> 4) | (w & 0xff) is lo + 16 hi.
  static SLUICE_SIMD_INLINE void store_u4(std::byte* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m128i const w = _mm_packus_epi16(_mm_packs_epi32(a.v, b.v), _mm_packs_epi32(c.v, d.v));
    __m128i const pairs = _mm_or_si128(_mm_srli_epi16(w, 4), _mm_and_si128(w, _mm_set1_epi16(0xff)));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(pairs, pairs));
  }
  /// The bits of x.
  static SLUICE_SIMD_INLINE vi32 bits_of(vf32<sluice::simd::baseline> x) noexcept { return {_mm_castps_si128(x.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator+(vi32 a, vi32 b) noexcept { return {_mm_add_epi32(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator|(vi32 a, vi32 b) noexcept { return {_mm_or_si128(a.v, b.v)}; }
  /// Bit j set when lane j of a == lane j of b.
  friend SLUICE_SIMD_INLINE unsigned eq_mask(vi32 a, vi32 b) noexcept {
    return static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a.v, b.v))));
  }
  /// Lane j of `nan` where lane j of x is NaN, else lane j of `other`.
  static SLUICE_SIMD_INLINE vi32 nan_select(vf32<sluice::simd::baseline> x, vi32 nan, vi32 other) noexcept {
    __m128i const m = _mm_castps_si128(_mm_cmpunord_ps(x.v, x.v));
    return {_mm_or_si128(_mm_and_si128(m, nan.v), _mm_andnot_si128(m, other.v))};
  }
  /// The top halfwords of a's lanes, then of b's (2 width bf16): shifted arithmetically, the
  /// signed pack is exact.
  static SLUICE_SIMD_INLINE void store_hi16(std::uint16_t* out, vi32 a, vi32 b) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_packs_epi32(_mm_srai_epi32(a.v, 16), _mm_srai_epi32(b.v, 16)));
  }
  /// The rounding halfwords of 2 width elements (element j: p[j]) in the order bf16_addends reads
  /// (here the elements' order).
  static SLUICE_SIMD_INLINE vi32 load_rounding(std::uint16_t const* p) noexcept {
    return {_mm_loadu_si128(reinterpret_cast<__m128i const*>(p))};
  }
  /// The stochastic-rounding addends (below bit 16) of the 2 width elements whose rounding
  /// halfwords r holds: lane j of am[h] / av[h] is the low / high byte of element h width + j's
  /// halfword, shifted to bits 8-15 (bf16_stochastic's random >> 16 for moment 0 / 1).
  static SLUICE_SIMD_INLINE void bf16_addends(vi32 r, vi32 (&am)[2], vi32 (&av)[2]) noexcept {
    // Bytes to the top of 16-bit units: lane j holds (low << 8) | (high << 8) << 16.
    __m128i const z = _mm_setzero_si128(), low16 = _mm_set1_epi32(0xffff);
    __m128i const u[2] = {_mm_unpacklo_epi8(z, r.v), _mm_unpackhi_epi8(z, r.v)};
    for (int h = 0; h < 2; ++h) am[h] = {_mm_and_si128(u[h], low16)}, av[h] = {_mm_srli_epi32(u[h], 16)};
  }
  // Philox4x32 blocks in the 64-bit lanes (width / 2 per vector), each word in the low half:
  // mul_even reads the low halves only, so a round is one multiply per word and vector.
  /// 64-bit lanes first, first + 1, ... (low halves).
  static SLUICE_SIMD_INLINE vi32 iota64(std::uint32_t first) noexcept {
    return {_mm_add_epi64(_mm_set1_epi64x(first), _mm_set_epi64x(1, 0))};
  }
  /// The 64-bit products of the low halves of each 64-bit lane.
  friend SLUICE_SIMD_INLINE vi32 mul_even(vi32 a, vi32 b) noexcept { return {_mm_mul_epu32(a.v, b.v)}; }
  /// The high half of each 64-bit lane, moved to its low half.
  friend SLUICE_SIMD_INLINE vi32 high_halves(vi32 a) noexcept { return {_mm_srli_epi64(a.v, 32)}; }
  /// The words of width blocks in load_rounding's order: x[k][h] holds word k of block
  /// h width / 2 + l in 64-bit lane l; t[q] gets words q width .. (q + 1) width - 1 of the
  /// blocks' words in stream order (the rounding halfwords of elements 2 q width ..).
  static SLUICE_SIMD_INLINE void order_words(vi32 const (&x)[4][2], vi32 (&t)[4]) noexcept {
    for (int h = 0; h < 2; ++h) {
      __m128i const a = _mm_unpacklo_epi32(x[0][h].v, x[1][h].v), b = _mm_unpacklo_epi32(x[2][h].v, x[3][h].v);
      __m128i const c = _mm_unpackhi_epi32(x[0][h].v, x[1][h].v), d = _mm_unpackhi_epi32(x[2][h].v, x[3][h].v);
      t[2 * h] = {_mm_unpacklo_epi64(a, b)};
      t[2 * h + 1] = {_mm_unpacklo_epi64(c, d)};
    }
  }
  /// The first and second words of width 8-byte pairs at p (top-k's index / value entries).
  static SLUICE_SIMD_INLINE void load_pairs(void const* p, vi32& first, vi32& second) noexcept {
    __m128 const a = _mm_loadu_ps(static_cast<float const*>(p)), b = _mm_loadu_ps(static_cast<float const*>(p) + 4);
    first = {_mm_castps_si128(_mm_shuffle_ps(a, b, 0x88))};
    second = {_mm_castps_si128(_mm_shuffle_ps(a, b, 0xdd))};
  }
  /// The lanes of x whose bit is set in `keep`, in order, to out[0 ..): writes width words, those
  /// past popcount(keep) unspecified (no shuffle by a variable at this level: a lane at a time).
  static SLUICE_SIMD_INLINE void compress_store(void* out, vi32 x, unsigned keep) noexcept {
    alignas(16) std::uint32_t b[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), x.v);
    auto* o = static_cast<unsigned char*>(out);
    for (unsigned l = 0; l < 4; ++l) std::memcpy(o, b + l, 4), o += 4 * ((keep >> l) & 1u);
  }
};
#else
template <>
struct vf32<sluice::simd::baseline> {
  static constexpr std::size_t width = 1;
  float v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {*p}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { *p = x.v; }
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t) noexcept { return {*p}; }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t) noexcept { *p = x.v; }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {x}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {a.v + b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {a.v - b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {a.v / b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    float r = a.v * b.v;
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+m"(r));
#endif
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {__builtin_sqrtf(a.v)}; }
  friend SLUICE_SIMD_INLINE vf32 min(vf32 a, vf32 b) noexcept { return {a.v < b.v ? a.v : b.v}; }
  friend SLUICE_SIMD_INLINE vf32 max(vf32 a, vf32 b) noexcept { return {a.v > b.v ? a.v : b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator|(vf32 a, vf32 b) noexcept {
    std::uint32_t x, y;
    std::memcpy(&x, &a.v, 4);
    std::memcpy(&y, &b.v, 4);
    x |= y;
    std::memcpy(&a.v, &x, 4);
    return a;
  }
  friend SLUICE_SIMD_INLINE bool all_zero(vf32 a) noexcept { return a.v == 0.0f; }
  static SLUICE_SIMD_INLINE vf32 load_bf16(std::uint16_t const* p) noexcept {
    std::uint32_t const b = std::uint32_t{*p} << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return {f};
  }
  friend SLUICE_SIMD_INLINE bool any_nan(vf32 a) noexcept { return a.v != a.v; }
};

template <>
struct vi32<sluice::simd::baseline> {
  static constexpr std::size_t width = 1;
  std::int32_t v;
  static SLUICE_SIMD_INLINE vi32 load_bits(float const* p) noexcept {
    std::int32_t b;
    std::memcpy(&b, p, 4);
    return {b};
  }
  static SLUICE_SIMD_INLINE vi32 set(std::int32_t x) noexcept { return {x}; }
  friend SLUICE_SIMD_INLINE vi32 operator&(vi32 a, vi32 b) noexcept { return {a.v & b.v}; }
  friend SLUICE_SIMD_INLINE unsigned gt_mask(vi32 a, vi32 b) noexcept { return a.v > b.v ? 1u : 0u; }
  friend SLUICE_SIMD_INLINE vi32 operator^(vi32 a, vi32 b) noexcept { return {a.v ^ b.v}; }
  static SLUICE_SIMD_INLINE vi32 iota(std::uint32_t first) noexcept { return {static_cast<std::int32_t>(first)}; }
  friend SLUICE_SIMD_INLINE void mulhilo(vi32 x, vi32 m, vi32& hi, vi32& lo) noexcept {
    std::uint64_t const p = std::uint64_t{static_cast<std::uint32_t>(x.v)} * static_cast<std::uint32_t>(m.v);
    hi = {static_cast<std::int32_t>(static_cast<std::uint32_t>(p >> 32))};
    lo = {static_cast<std::int32_t>(static_cast<std::uint32_t>(p))};
  }
  static SLUICE_SIMD_INLINE void store4(std::uint32_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    out[0] = static_cast<std::uint32_t>(a.v), out[1] = static_cast<std::uint32_t>(b.v);
    out[2] = static_cast<std::uint32_t>(c.v), out[3] = static_cast<std::uint32_t>(d.v);
  }
  static SLUICE_SIMD_INLINE void stream64(std::byte* dst, std::byte const* src) noexcept { std::memcpy(dst, src, 64); }
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<sluice::simd::baseline> x) noexcept {
    bool const in = x.v > -2147483648.0f && x.v < 2147483648.0f;  // false for NaN
    return {in ? static_cast<std::int32_t>(x.v) : INT32_MIN};
  }
  static SLUICE_SIMD_INLINE vf32<sluice::simd::baseline> to_float(vi32 x) noexcept { return {static_cast<float>(x.v)}; }
  static SLUICE_SIMD_INLINE vi32 load_u8(std::uint8_t const* p) noexcept { return {*p}; }
  static SLUICE_SIMD_INLINE std::uint8_t sat(vi32 x) noexcept {
    return static_cast<std::uint8_t>(x.v < 0 ? 0 : x.v > 255 ? 255 : x.v);
  }
  static SLUICE_SIMD_INLINE void store_u8(std::uint8_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    out[0] = sat(a), out[1] = sat(b), out[2] = sat(c), out[3] = sat(d);
  }
  static SLUICE_SIMD_INLINE void store_u4(std::byte* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    out[0] = static_cast<std::byte>(sat(a) | sat(b) << 4);
    out[1] = static_cast<std::byte>(sat(c) | sat(d) << 4);
  }
  static SLUICE_SIMD_INLINE vi32 bits_of(vf32<sluice::simd::baseline> x) noexcept {
    std::int32_t b;
    std::memcpy(&b, &x.v, 4);
    return {b};
  }
  friend SLUICE_SIMD_INLINE vi32 operator+(vi32 a, vi32 b) noexcept {
    return {static_cast<std::int32_t>(static_cast<std::uint32_t>(a.v) + static_cast<std::uint32_t>(b.v))};
  }
  friend SLUICE_SIMD_INLINE vi32 operator|(vi32 a, vi32 b) noexcept { return {a.v | b.v}; }
  friend SLUICE_SIMD_INLINE unsigned eq_mask(vi32 a, vi32 b) noexcept { return a.v == b.v ? 1u : 0u; }
  static SLUICE_SIMD_INLINE vi32 nan_select(vf32<sluice::simd::baseline> x, vi32 nan, vi32 other) noexcept {
    return x.v != x.v ? nan : other;
  }
  static SLUICE_SIMD_INLINE void store_hi16(std::uint16_t* out, vi32 a, vi32 b) noexcept {
    out[0] = static_cast<std::uint16_t>(static_cast<std::uint32_t>(a.v) >> 16);
    out[1] = static_cast<std::uint16_t>(static_cast<std::uint32_t>(b.v) >> 16);
  }
  static SLUICE_SIMD_INLINE vi32 load_rounding(std::uint16_t const* p) noexcept {
    return {static_cast<std::int32_t>(p[0] | std::uint32_t{p[1]} << 16)};
  }
  static SLUICE_SIMD_INLINE void bf16_addends(vi32 r, vi32 (&am)[2], vi32 (&av)[2]) noexcept {
    auto const u = static_cast<std::uint32_t>(r.v);
    am[0] = {static_cast<std::int32_t>((u & 0xffu) << 8)}, av[0] = {static_cast<std::int32_t>(u & 0xff00u)};
    am[1] = {static_cast<std::int32_t>((u >> 8) & 0xff00u)}, av[1] = {static_cast<std::int32_t>((u >> 16) & 0xff00u)};
  }
  static SLUICE_SIMD_INLINE void load_pairs(void const* p, vi32& first, vi32& second) noexcept {
    std::memcpy(&first.v, p, 4);
    std::memcpy(&second.v, static_cast<unsigned char const*>(p) + 4, 4);
  }
  static SLUICE_SIMD_INLINE void compress_store(void* out, vi32 x, unsigned) noexcept { std::memcpy(out, &x.v, 4); }
};
#endif

#if SLUICE_HAVE_AVX2_TARGET
/// Byte l of entry m: the position of the l-th set bit of m (vi32<avx2>::compress_store's vpermd).
inline constexpr auto compress_positions = [] {
  std::array<std::uint64_t, 256> t{};
  for (unsigned m = 0; m < 256; ++m)
    for (unsigned l = 0, o = 0; l < 8; ++l)
      if ((m >> l) & 1u) t[m] |= std::uint64_t{l} << (8 * o++);
  return t;
}();

SLUICE_SIMD_BEGIN_AVX2
template <>
struct vf32<sluice::simd::avx2> {
  static constexpr std::size_t width = 8;
  __m256 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm256_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm256_storeu_ps(p, x.v); }
  /// Lanes j < k of a mask (vmaskmov: the rest neither read nor written, no fault past them).
  static SLUICE_SIMD_INLINE __m256i first(std::size_t k) noexcept {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    return {_mm256_maskload_ps(p, first(k))};
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    _mm256_maskstore_ps(p, first(k), x.v);
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm256_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm256_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm256_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm256_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m256 r = _mm256_mul_ps(a.v, b.v);
    __asm__("" : "+x"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm256_sqrt_ps(a.v)}; }
  friend SLUICE_SIMD_INLINE vf32 min(vf32 a, vf32 b) noexcept { return {_mm256_min_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 max(vf32 a, vf32 b) noexcept { return {_mm256_max_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator|(vf32 a, vf32 b) noexcept { return {_mm256_or_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE bool all_zero(vf32 a) noexcept {
    return _mm256_movemask_ps(_mm256_cmp_ps(a.v, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
  }
  /// The 8 halfwords broadcast to both 128-bit lanes (a load, no shuffle), then an in-lane byte
  /// shuffle: lane 0 widens halfwords 0-3, lane 1 halfwords 4-7.
  static SLUICE_SIMD_INLINE vf32 load_bf16(std::uint16_t const* p) noexcept {
    char const z = static_cast<char>(0x80);
    __m256i const widen = _mm256_setr_epi8(z, z, 0, 1, z, z, 2, 3, z, z, 4, 5, z, z, 6, 7, z, z, 8, 9, z, z, 10, 11, z,
                                           z, 12, 13, z, z, 14, 15);
    __m256i const h = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<__m128i const*>(p)));
    return {_mm256_castsi256_ps(_mm256_shuffle_epi8(h, widen))};
  }
  friend SLUICE_SIMD_INLINE bool any_nan(vf32 a) noexcept {
    return _mm256_movemask_ps(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)) != 0;
  }
};

template <>
struct vi32<sluice::simd::avx2> {
  static constexpr std::size_t width = 8;
  __m256i v;
  static SLUICE_SIMD_INLINE vi32 load_bits(float const* p) noexcept {
    return {_mm256_loadu_si256(reinterpret_cast<__m256i const*>(p))};
  }
  static SLUICE_SIMD_INLINE vi32 set(std::int32_t x) noexcept { return {_mm256_set1_epi32(x)}; }
  friend SLUICE_SIMD_INLINE vi32 operator&(vi32 a, vi32 b) noexcept { return {_mm256_and_si256(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE unsigned gt_mask(vi32 a, vi32 b) noexcept {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a.v, b.v))));
  }
  friend SLUICE_SIMD_INLINE vi32 operator^(vi32 a, vi32 b) noexcept { return {_mm256_xor_si256(a.v, b.v)}; }
  static SLUICE_SIMD_INLINE vi32 iota(std::uint32_t first) noexcept {
    return {_mm256_add_epi32(_mm256_set1_epi32(static_cast<std::int32_t>(first)),
                             _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0))};
  }
  /// 64-bit products of the even lanes and of the odd lanes; blends pick each lane's half.
  friend SLUICE_SIMD_INLINE void mulhilo(vi32 x, vi32 m, vi32& hi, vi32& lo) noexcept {
    __m256i const e = _mm256_mul_epu32(x.v, m.v), o = _mm256_mul_epu32(_mm256_srli_epi64(x.v, 32), m.v);
    lo = {_mm256_blend_epi32(e, _mm256_slli_epi64(o, 32), 0xaa)};
    hi = {_mm256_blend_epi32(_mm256_srli_epi64(e, 32), o, 0xaa)};
  }
  static SLUICE_SIMD_INLINE void store4(std::uint32_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m256i const t0 = _mm256_unpacklo_epi32(a.v, b.v), t1 = _mm256_unpacklo_epi32(c.v, d.v);
    __m256i const t2 = _mm256_unpackhi_epi32(a.v, b.v), t3 = _mm256_unpackhi_epi32(c.v, d.v);
    __m256i const r0 = _mm256_unpacklo_epi64(t0, t1), r1 = _mm256_unpackhi_epi64(t0, t1);  // lanes 0|4, 1|5
    __m256i const r2 = _mm256_unpacklo_epi64(t2, t3), r3 = _mm256_unpackhi_epi64(t2, t3);  // lanes 2|6, 3|7
    auto* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
  }
  static SLUICE_SIMD_INLINE void stream64(std::byte* dst, std::byte const* src) noexcept {
    for (int q = 0; q < 2; ++q)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst) + q,
                          _mm256_load_si256(reinterpret_cast<__m256i const*>(src) + q));
  }
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<sluice::simd::avx2> x) noexcept { return {_mm256_cvttps_epi32(x.v)}; }
  static SLUICE_SIMD_INLINE vf32<sluice::simd::avx2> to_float(vi32 x) noexcept { return {_mm256_cvtepi32_ps(x.v)}; }
  static SLUICE_SIMD_INLINE vi32 load_u8(std::uint8_t const* p) noexcept {
    return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<__m128i const*>(p)))};
  }
  /// packs/packus work within 128-bit lanes; the permutation puts the 4-byte groups back in order.
  static SLUICE_SIMD_INLINE void store_u8(std::uint8_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m256i const packed = _mm256_packus_epi16(_mm256_packs_epi32(a.v, b.v), _mm256_packs_epi32(c.v, d.v));
    __m256i const ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
  }
  /// Without first putting the bytes in element order: after the in-lane packs every 4-byte
  /// group holds 4 consecutive elements, so pairs (2i, 2i+1) are adjacent bytes and one maddubs
  /// (lo + 16 * hi) merges them; the two lanes' halves are then interleaved 16 bits at a time
  /// (7 shuffle/ALU operations where ordering first took 10).
  static SLUICE_SIMD_INLINE void store_u4(std::byte* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    // Lane 0 holds elements 0-3, 8-11, 16-19, 24-27; lane 1 elements 4-7, 12-15, ...
    __m256i const bytes = _mm256_packus_epi16(_mm256_packs_epi32(a.v, b.v), _mm256_packs_epi32(c.v, d.v));
    __m256i const pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));  // < 256 each
    __m256i const packed = _mm256_packus_epi16(pairs, pairs);  // each lane's pairs in its low 8 bytes
    // Lane 0 has pair bytes (0,1) (2,3) (8,9) ..., lane 1 (4,5) (6,7) (12,13) ...: 16-bit interleave.
    __m128i const v = _mm_unpacklo_epi16(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
  }
  static SLUICE_SIMD_INLINE vi32 bits_of(vf32<sluice::simd::avx2> x) noexcept { return {_mm256_castps_si256(x.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator+(vi32 a, vi32 b) noexcept { return {_mm256_add_epi32(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator|(vi32 a, vi32 b) noexcept { return {_mm256_or_si256(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE unsigned eq_mask(vi32 a, vi32 b) noexcept {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a.v, b.v))));
  }
  static SLUICE_SIMD_INLINE vi32 nan_select(vf32<sluice::simd::avx2> x, vi32 nan, vi32 other) noexcept {
    return {_mm256_blendv_epi8(other.v, nan.v, _mm256_castps_si256(_mm256_cmp_ps(x.v, x.v, _CMP_UNORD_Q)))};
  }
  /// The in-lane pack gives [a0-3 b0-3 | a4-7 b4-7]; the permutation orders the quarters.
  static SLUICE_SIMD_INLINE void store_hi16(std::uint16_t* out, vi32 a, vi32 b) noexcept {
    __m256i const packed = _mm256_packs_epi32(_mm256_srai_epi32(a.v, 16), _mm256_srai_epi32(b.v, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  /// In the order [0-3, 8-11 | 4-7, 12-15] (64-bit quarters permuted by 0xd8), which lets
  /// bf16_addends use in-lane byte shuffles.
  static SLUICE_SIMD_INLINE vi32 load_rounding(std::uint16_t const* p) noexcept {
    return {_mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<__m256i const*>(p)), 0xd8)};
  }
  /// vpshufb mask: byte b + 2 j of each 128-bit lane to byte 1 of 32-bit lane j, the rest zero.
  static SLUICE_SIMD_INLINE __m256i rounding_byte(char b) noexcept {
    char const z = static_cast<char>(0x80);
    return _mm256_setr_epi8(z, b, z, z, z, static_cast<char>(b + 2), z, z, z, static_cast<char>(b + 4), z, z, z,
                            static_cast<char>(b + 6), z, z, z, b, z, z, z, static_cast<char>(b + 2), z, z, z,
                            static_cast<char>(b + 4), z, z, z, static_cast<char>(b + 6), z, z);
  }
  /// Elements 0-7 read bytes 0-7 of each 128-bit lane, elements 8-15 bytes 8-15 (the low byte
  /// moment 0's, the high byte moment 1's).
  static SLUICE_SIMD_INLINE void bf16_addends(vi32 r, vi32 (&am)[2], vi32 (&av)[2]) noexcept {
    am[0] = {_mm256_shuffle_epi8(r.v, rounding_byte(0))}, am[1] = {_mm256_shuffle_epi8(r.v, rounding_byte(8))};
    av[0] = {_mm256_shuffle_epi8(r.v, rounding_byte(1))}, av[1] = {_mm256_shuffle_epi8(r.v, rounding_byte(9))};
  }
  static SLUICE_SIMD_INLINE vi32 iota64(std::uint32_t first) noexcept {
    return {_mm256_add_epi64(_mm256_set1_epi64x(first), _mm256_set_epi64x(3, 2, 1, 0))};
  }
  friend SLUICE_SIMD_INLINE vi32 mul_even(vi32 a, vi32 b) noexcept { return {_mm256_mul_epu32(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vi32 high_halves(vi32 a) noexcept { return {_mm256_srli_epi64(a.v, 32)}; }
  /// Per 64-bit lane (block) words 0, 1 and words 2, 3; two blocks per vector, in load_rounding's order.
  static SLUICE_SIMD_INLINE void order_words(vi32 const (&x)[4][2], vi32 (&t)[4]) noexcept {
    for (int h = 0; h < 2; ++h) {
      __m256i const w01 = _mm256_blend_epi32(x[0][h].v, _mm256_slli_epi64(x[1][h].v, 32), 0xaa);
      __m256i const w23 = _mm256_blend_epi32(x[2][h].v, _mm256_slli_epi64(x[3][h].v, 32), 0xaa);
      t[2 * h] = {_mm256_permute2x128_si256(w01, w23, 0x20)};
      t[2 * h + 1] = {_mm256_permute2x128_si256(w01, w23, 0x31)};
    }
  }
  /// The in-lane shuffle leaves [0 1 4 5 | 2 3 6 7]; the permutation orders the quarters.
  static SLUICE_SIMD_INLINE void load_pairs(void const* p, vi32& first, vi32& second) noexcept {
    __m256 const a = _mm256_loadu_ps(static_cast<float const*>(p));
    __m256 const b = _mm256_loadu_ps(static_cast<float const*>(p) + 8);
    first = {_mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)), 0xd8)};
    second = {_mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8)};
  }
  /// The kept lanes' positions from a table (vpermd); one unmasked store.
  static SLUICE_SIMD_INLINE void compress_store(void* out, vi32 x, unsigned keep) noexcept {
    __m256i const idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(compress_positions[keep])));
    _mm256_storeu_si256(static_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(x.v, idx));
  }
};
SLUICE_SIMD_END_AVX2
#endif

#if SLUICE_HAVE_AVX512_TARGET
SLUICE_SIMD_BEGIN_AVX512
template <>
struct vf32<sluice::simd::avx512> {
  static constexpr std::size_t width = 16;
  __m512 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm512_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm512_storeu_ps(p, x.v); }
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << k) - 1), p)};
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << k) - 1), x.v);
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm512_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm512_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm512_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm512_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m512 r = _mm512_mul_ps(a.v, b.v);
    __asm__("" : "+v"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm512_sqrt_ps(a.v)}; }
  static SLUICE_SIMD_INLINE vf32 load_bf16(std::uint16_t const* p) noexcept {
    __m256i const h = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(p));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  }
  friend SLUICE_SIMD_INLINE bool any_nan(vf32 a) noexcept { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q) != 0; }
};

template <>
struct vi32<sluice::simd::avx512> {
  static constexpr std::size_t width = 16;
  __m512i v;
  static SLUICE_SIMD_INLINE vi32 load_bits(float const* p) noexcept { return {_mm512_loadu_si512(p)}; }
  static SLUICE_SIMD_INLINE vi32 set(std::int32_t x) noexcept { return {_mm512_set1_epi32(x)}; }
  friend SLUICE_SIMD_INLINE vi32 operator&(vi32 a, vi32 b) noexcept { return {_mm512_and_si512(a.v, b.v)}; }
  /// Straight into a mask register (AVX2 needs a compare and a movemask).
  friend SLUICE_SIMD_INLINE unsigned gt_mask(vi32 a, vi32 b) noexcept {
    return _cvtmask16_u32(_mm512_cmpgt_epi32_mask(a.v, b.v));
  }
  friend SLUICE_SIMD_INLINE vi32 operator^(vi32 a, vi32 b) noexcept { return {_mm512_xor_si512(a.v, b.v)}; }
  static SLUICE_SIMD_INLINE vi32 iota(std::uint32_t first) noexcept {
    return {_mm512_add_epi32(_mm512_set1_epi32(static_cast<std::int32_t>(first)),
                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))};
  }
  friend SLUICE_SIMD_INLINE void mulhilo(vi32 x, vi32 m, vi32& hi, vi32& lo) noexcept {
    __m512i const e = _mm512_mul_epu32(x.v, m.v), o = _mm512_mul_epu32(_mm512_srli_epi64(x.v, 32), m.v);
    lo = {_mm512_mask_blend_epi32(0xaaaa, e, _mm512_slli_epi64(o, 32))};
    hi = {_mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(e, 32), o)};
  }
  /// In-lane unpacks leave block 4l + k in 128-bit lane l of r_k; a 4 x 4 transpose of the
  /// 128-bit lanes puts the blocks in order.
  static SLUICE_SIMD_INLINE void store4(std::uint32_t* out, vi32 a, vi32 b, vi32 c, vi32 d) noexcept {
    __m512i const t0 = _mm512_unpacklo_epi32(a.v, b.v), t1 = _mm512_unpacklo_epi32(c.v, d.v);
    __m512i const t2 = _mm512_unpackhi_epi32(a.v, b.v), t3 = _mm512_unpackhi_epi32(c.v, d.v);
    __m512i const r0 = _mm512_unpacklo_epi64(t0, t1), r1 = _mm512_unpackhi_epi64(t0, t1);
    __m512i const r2 = _mm512_unpacklo_epi64(t2, t3), r3 = _mm512_unpackhi_epi64(t2, t3);
    __m512i const lo01 = _mm512_shuffle_i32x4(r0, r1, 0x44), lo23 = _mm512_shuffle_i32x4(r2, r3, 0x44);
    __m512i const hi01 = _mm512_shuffle_i32x4(r0, r1, 0xee), hi23 = _mm512_shuffle_i32x4(r2, r3, 0xee);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(lo01, lo23, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(lo01, lo23, 0xdd));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(hi01, hi23, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(hi01, hi23, 0xdd));
  }
  static SLUICE_SIMD_INLINE void stream64(std::byte* dst, std::byte const* src) noexcept {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_load_si512(src));
  }
  static SLUICE_SIMD_INLINE vi32 bits_of(vf32<sluice::simd::avx512> x) noexcept { return {_mm512_castps_si512(x.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator+(vi32 a, vi32 b) noexcept { return {_mm512_add_epi32(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vi32 operator|(vi32 a, vi32 b) noexcept { return {_mm512_or_si512(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE unsigned eq_mask(vi32 a, vi32 b) noexcept {
    return _cvtmask16_u32(_mm512_cmpeq_epi32_mask(a.v, b.v));
  }
  static SLUICE_SIMD_INLINE vi32 nan_select(vf32<sluice::simd::avx512> x, vi32 nan, vi32 other) noexcept {
    return {_mm512_mask_mov_epi32(other.v, _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q), nan.v)};
  }
  /// The odd halfwords of a and b, in order (one two-source permutation).
  static SLUICE_SIMD_INLINE void store_hi16(std::uint16_t* out, vi32 a, vi32 b) noexcept {
    __m512i const odd =
        _mm512_setr_epi32(0x30001, 0x70005, 0xb0009, 0xf000d, 0x130011, 0x170015, 0x1b0019, 0x1f001d, 0x230021,
                          0x270025, 0x2b0029, 0x2f002d, 0x330031, 0x370035, 0x3b0039, 0x3f003d);
    _mm512_storeu_si512(out, _mm512_permutex2var_epi16(a.v, odd, b.v));
  }
  static SLUICE_SIMD_INLINE vi32 load_rounding(std::uint16_t const* p) noexcept { return {_mm512_loadu_si512(p)}; }
  static SLUICE_SIMD_INLINE void bf16_addends(vi32 r, vi32 (&am)[2], vi32 (&av)[2]) noexcept {
    __m512i const high = _mm512_set1_epi32(0xff00);
    __m256i const half[2] = {_mm512_castsi512_si256(r.v), _mm512_extracti64x4_epi64(r.v, 1)};
    for (int h = 0; h < 2; ++h) {
      __m512i const x = _mm512_cvtepu16_epi32(half[h]);
      am[h] = {_mm512_and_si512(_mm512_slli_epi32(x, 8), high)}, av[h] = {_mm512_and_si512(x, high)};
    }
  }
  static SLUICE_SIMD_INLINE vi32 iota64(std::uint32_t first) noexcept {
    return {_mm512_add_epi64(_mm512_set1_epi64(first), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0))};
  }
  friend SLUICE_SIMD_INLINE vi32 mul_even(vi32 a, vi32 b) noexcept { return {_mm512_mul_epu32(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vi32 high_halves(vi32 a) noexcept { return {_mm512_srli_epi64(a.v, 32)}; }
  /// Words 0, 1 and 2, 3 of each block (64-bit lane) merged (vpshufd into the odd lanes), one
  /// block per 128-bit lane (unpack), four blocks in order per vector (two-source permutation).
  static SLUICE_SIMD_INLINE void order_words(vi32 const (&x)[4][2], vi32 (&t)[4]) noexcept {
    __m512i const first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11),
                  second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int h = 0; h < 2; ++h) {
      __m512i const w01 = _mm512_mask_shuffle_epi32(x[0][h].v, 0xaaaa, x[1][h].v, _MM_PERM_CCAA);
      __m512i const w23 = _mm512_mask_shuffle_epi32(x[2][h].v, 0xaaaa, x[3][h].v, _MM_PERM_CCAA);
      __m512i const even = _mm512_unpacklo_epi64(w01, w23), odd = _mm512_unpackhi_epi64(w01, w23);
      t[2 * h] = {_mm512_permutex2var_epi64(even, first, odd)};
      t[2 * h + 1] = {_mm512_permutex2var_epi64(even, second, odd)};
    }
  }
  static SLUICE_SIMD_INLINE void load_pairs(void const* p, vi32& first, vi32& second) noexcept {
    __m512i const even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __m512i const odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512i const a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(static_cast<char const*>(p) + 64);
    first = {_mm512_permutex2var_epi32(a, even, b)};
    second = {_mm512_permutex2var_epi32(a, odd, b)};
  }
  /// vpcompressd into a register, then one store (compressing straight to memory is slow on Zen 4).
  static SLUICE_SIMD_INLINE void compress_store(void* out, vi32 x, unsigned keep) noexcept {
    _mm512_storeu_si512(out, _mm512_maskz_compress_epi32(static_cast<__mmask16>(keep), x.v));
  }
};
SLUICE_SIMD_END_AVX512
#endif

}  // namespace sluice::detail::simd
