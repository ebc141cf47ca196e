// The lane types the SIMD kernel bodies are written over: vf32<L> holds width floats at level L
// (baseline: SSE2, 4, or one scalar off x86; avx2: 8; avx512: 16) and vi32<L> as many int32
// (levels and keys), each compiled for its level's
// instruction set, so that a body stamped at L (core/detail/simd_stamp.hpp) can inline them.
// Products round on their own (an empty asm keeps them out of FMA; see core/simd.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sluice/core/simd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/// Lane operations and the helpers of a stamped body: always inlined (each is a few instructions).
#define SLUICE_SIMD_INLINE __attribute__((always_inline)) inline

namespace sluice::simd_detail {

template <simd L>
struct vf32;
template <simd L>
struct vi32;

#if defined(__SSE2__)
template <>
struct vf32<simd::baseline> {
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
};

/// Four int32 lanes (levels of the quantizers).
template <>
struct vi32<simd::baseline> {
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
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<simd::baseline> x) noexcept { return {_mm_cvttps_epi32(x.v)}; }
  static SLUICE_SIMD_INLINE vf32<simd::baseline> to_float(vi32 x) noexcept { return {_mm_cvtepi32_ps(x.v)}; }
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
};
#else
template <>
struct vf32<simd::baseline> {
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
};

template <>
struct vi32<simd::baseline> {
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
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<simd::baseline> x) noexcept {
    bool const in = x.v > -2147483648.0f && x.v < 2147483648.0f;  // false for NaN
    return {in ? static_cast<std::int32_t>(x.v) : INT32_MIN};
  }
  static SLUICE_SIMD_INLINE vf32<simd::baseline> to_float(vi32 x) noexcept { return {static_cast<float>(x.v)}; }
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
};
#endif

#if SLUICE_HAVE_AVX2_TARGET
SLUICE_SIMD_BEGIN_AVX2
template <>
struct vf32<simd::avx2> {
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
};

template <>
struct vi32<simd::avx2> {
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
  static SLUICE_SIMD_INLINE vi32 truncate(vf32<simd::avx2> x) noexcept { return {_mm256_cvttps_epi32(x.v)}; }
  static SLUICE_SIMD_INLINE vf32<simd::avx2> to_float(vi32 x) noexcept { return {_mm256_cvtepi32_ps(x.v)}; }
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
};
SLUICE_SIMD_END_AVX2
#endif

#if SLUICE_HAVE_AVX512_TARGET
SLUICE_SIMD_BEGIN_AVX512
template <>
struct vf32<simd::avx512> {
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
};

template <>
struct vi32<simd::avx512> {
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
};
SLUICE_SIMD_END_AVX512
#endif

}  // namespace sluice::simd_detail
