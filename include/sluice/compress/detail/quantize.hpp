// Per-bucket building blocks of the max-min quantizer (CGX, Middleware'22 §4.1): the range of a
// bucket, quantizing one bucket to codes (nearest or stochastic rounding) and the inverse. encode
// and decode are written in terms of these, so a fused error-feedback pass that calls them per
// bucket is bit-identical to the unfused composition.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <sluice/compress/rounding.hpp>
#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>

namespace sluice::compress_detail {

/// A bucket's quantization grid: level q decodes to min + q * unit (fp32 whatever T is).
struct maxmin_range {
  float min = 0.0f;
  float unit = 0.0f;
  friend bool operator==(maxmin_range const&, maxmin_range const&) = default;
};

#if SLUICE_HAVE_AVX2_TARGET
namespace avx2 {

// AVX2 bodies of the float loops below. They return how many elements they handled (whole
// vectors) and leave the tail to the baseline code. Compiled without FMA, so the multiply and add
// of a level stay two roundings: the results are bit-identical to the baseline bodies (tested).

/// Running min, max and poison (x - x: ±0, or NaN for NaN and Inf, OR-ed bitwise: ±0 until a NaN
/// sets the exponent bits, and a one-cycle chain where an add would take three) of 16 floats per
/// step, in two independent halves; finish() reduces them (min and max of finite values do not
/// depend on the order of the reduction).
struct range_acc {
  __m256 mn0, mn1, mx0, mx1, p0, p1;
  SLUICE_TARGET_AVX2 range_acc(float mn, float mx) noexcept
      : mn0(_mm256_set1_ps(mn)), mn1(mn0), mx0(_mm256_set1_ps(mx)), mx1(mx0), p0(_mm256_setzero_ps()), p1(p0) {}
  SLUICE_TARGET_AVX2 void add(__m256 a, __m256 b) noexcept {
    mn0 = _mm256_min_ps(mn0, a), mn1 = _mm256_min_ps(mn1, b);
    mx0 = _mm256_max_ps(mx0, a), mx1 = _mm256_max_ps(mx1, b);
    p0 = _mm256_or_ps(p0, _mm256_sub_ps(a, a)), p1 = _mm256_or_ps(p1, _mm256_sub_ps(b, b));
  }
  SLUICE_TARGET_AVX2 void finish(float& mn, float& mx, bool& poisoned) const noexcept {
    alignas(32) float l[16];
    _mm256_store_ps(l, _mm256_min_ps(mn0, mn1));
    _mm256_store_ps(l + 8, _mm256_max_ps(mx0, mx1));
    // In locals: through the references (which may alias) every step was a store and a reload,
    // a 16-step store-forwarding chain that cost as much as the loop over a 1024 bucket.
    float lo = mn, hi = mx;
    for (int t = 0; t < 8; ++t) lo = l[t] < lo ? l[t] : lo, hi = l[8 + t] > hi ? l[8 + t] : hi;
    mn = lo, mx = hi;
    poisoned = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_or_ps(p0, p1), _mm256_setzero_ps(), _CMP_EQ_OQ)) != 0xff;
  }
};

/// Running min and max over whole groups of 16, and whether any value was NaN or Inf.
SLUICE_TARGET_AVX2 inline std::size_t range_f32(float const* SLUICE_RESTRICT x, std::size_t len, float& mn, float& mx,
                                                bool& poisoned) noexcept {
  range_acc r(mn, mx);
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) r.add(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
  r.finish(mn, mx, poisoned);
  return i;
}

/// Levels clamp((x - min) * inv + 0.5, 0, maxq), truncated, 8 at a time.
SLUICE_TARGET_AVX2 inline __m256i levels8(float const* x, __m256 vmin, __m256 vinv, __m256 top) noexcept {
  __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmin), vinv), _mm256_set1_ps(0.5f));
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), top);  // max(NaN, 0) gives 0
  return _mm256_cvttps_epi32(v);
}

/// levels8 without the clamp at 0, for callers that only narrow the result to bytes with the
/// saturating packs of codes32 or store_levels4: a NaN (cvtt: INT_MIN) or a negative level
/// saturates to 0 there, as the clamp would make it; `top` first, so that min returns a NaN
/// rather than `top`.
SLUICE_TARGET_AVX2 inline __m256i levels8_to_bytes(float const* x, __m256 vmin, __m256 vinv, __m256 top) noexcept {
  __m256 const v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmin), vinv), _mm256_set1_ps(0.5f));
  return _mm256_cvttps_epi32(_mm256_min_ps(top, v));
}

/// 32 levels (four vectors of 8, int32) as 32 bytes in element order: packs/packus work within
/// 128-bit lanes, and the permutation puts the 4-byte groups back in order.
SLUICE_TARGET_AVX2 inline __m256i codes32(__m256i l0, __m256i l1, __m256i l2, __m256i l3) noexcept {
  __m256i const packed = _mm256_packus_epi16(_mm256_packs_epi32(l0, l1), _mm256_packs_epi32(l2, l3));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Stores 32 4-bit levels (four vectors of 8, int32, elements in order) as 16 bytes in the layout
/// of pack_codes, without first putting the codes in element order: after the in-lane packs every
/// 4-byte group holds 4 consecutive elements, so pairs (2i, 2i+1) are adjacent bytes and one
/// maddubs (lo + 16 * hi) merges them; the two lanes' halves are then interleaved 16 bits at a
/// time. 7 shuffle/ALU operations where putting the codes in order first took 10.
SLUICE_TARGET_AVX2 inline void store_levels4(__m256i l0, __m256i l1, __m256i l2, __m256i l3, std::byte* out) noexcept {
  // Bytes per lane: lane 0 holds elements 0-3, 8-11, 16-19, 24-27; lane 1 elements 4-7, 12-15, ...
  __m256i const bytes = _mm256_packus_epi16(_mm256_packs_epi32(l0, l1), _mm256_packs_epi32(l2, l3));
  __m256i const pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));  // < 256 each
  __m256i const packed = _mm256_packus_epi16(pairs, pairs);                      // each lane's pairs in its low 8 bytes
  // Lane 0 has pair bytes (0,1) (2,3) (8,9) ..., lane 1 (4,5) (6,7) (12,13) ...: 16-bit interleave.
  __m128i const v = _mm_unpacklo_epi16(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
}

/// Codes (one byte each) of whole groups of 32; returns the count handled.
SLUICE_TARGET_AVX2 inline std::size_t levels_f32(float const* SLUICE_RESTRICT x, std::size_t len, float min, float inv,
                                                 float maxq, std::uint8_t* SLUICE_RESTRICT codes) noexcept {
  __m256 const vmin = _mm256_set1_ps(min), vinv = _mm256_set1_ps(inv), top = _mm256_set1_ps(maxq);
  std::size_t j = 0;
  for (; j + 32 <= len; j += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + j),
                        codes32(levels8(x + j, vmin, vinv, top), levels8(x + j + 8, vmin, vinv, top),
                                levels8(x + j + 16, vmin, vinv, top), levels8(x + j + 24, vmin, vinv, top)));
  return j;
}

/// Bytes [from, to) of a region of `bytes` bytes at `p`, asked for one cache line at a time.
inline void prefetch_lines(char const* p, std::size_t bytes, std::size_t from, std::size_t to) noexcept {
  for (std::size_t o = from; o < to && o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/// 4-bit levels packed two per byte over whole groups of 32, straight from the values: no code
/// buffer round trip. Returns the count handled. The lines of `ahead` (`ahead_bytes`, the next
/// bucket) are requested two per group of 32, spread over the loop: a burst of requests at the
/// start of a bucket fills the miss buffers and stalls, a steady trickle keeps memory streaming
/// while this bucket is computed (the rest, when the loop is shorter, after it).
SLUICE_TARGET_AVX2 inline std::size_t levels4_packed_f32(float const* SLUICE_RESTRICT x, std::size_t len, float min,
                                                         float inv, std::byte* SLUICE_RESTRICT out,
                                                         void const* ahead = nullptr,
                                                         std::size_t ahead_bytes = 0) noexcept {
  __m256 const vmin = _mm256_set1_ps(min), vinv = _mm256_set1_ps(inv), top = _mm256_set1_ps(15.0f);
  auto const* const a = static_cast<char const*>(ahead);
  std::size_t j = 0;
  for (; j + 32 <= len; j += 32) {
    if (4 * j < ahead_bytes) prefetch_lines(a, ahead_bytes, 4 * j, 4 * j + 128);
    store_levels4(levels8_to_bytes(x + j, vmin, vinv, top), levels8_to_bytes(x + j + 8, vmin, vinv, top),
                  levels8_to_bytes(x + j + 16, vmin, vinv, top), levels8_to_bytes(x + j + 24, vmin, vinv, top),
                  out + j / 2);
  }
  prefetch_lines(a, ahead_bytes, 4 * j, ahead_bytes);
  return j;
}

/// Error feedback's 4-bit round-to-nearest step on a bucket of compensated values c, whole groups
/// of 32: the levels packed two per byte into `out` (as levels4_packed_f32) and the residual
/// e = c - (min + level * unit) (the receiver's value, as decode computes it), with no code
/// buffer in between. Returns the count handled.
SLUICE_TARGET_AVX2 inline std::size_t levels4_residual_f32(float const* SLUICE_RESTRICT c, std::size_t len, float min,
                                                           float inv, float unit, std::byte* SLUICE_RESTRICT out,
                                                           float* SLUICE_RESTRICT e, void const* ahead0 = nullptr,
                                                           void const* ahead1 = nullptr,
                                                           std::size_t ahead_bytes = 0) noexcept {
  __m256 const vmin = _mm256_set1_ps(min), vinv = _mm256_set1_ps(inv), top = _mm256_set1_ps(15.0f);
  __m256 const vunit = _mm256_set1_ps(unit);
  auto const* const a0 = static_cast<char const*>(ahead0);
  auto const* const a1 = static_cast<char const*>(ahead1);
  std::size_t j = 0;
  for (; j + 32 <= len; j += 32) {
    if (4 * j < ahead_bytes) {  // as levels4_packed_f32: the next bucket's lines, two of each stream per 32
      prefetch_lines(a0, ahead_bytes, 4 * j, 4 * j + 128);
      prefetch_lines(a1, ahead_bytes, 4 * j, 4 * j + 128);
    }
    __m256i l[4];
    for (int q = 0; q < 4; ++q) {
      float const* const cq = c + j + 8 * static_cast<std::size_t>(q);
      l[q] = levels8(cq, vmin, vinv, top);
      __m256 const v = _mm256_add_ps(vmin, _mm256_mul_ps(_mm256_cvtepi32_ps(l[q]), vunit));
      _mm256_storeu_ps(e + j + 8 * static_cast<std::size_t>(q), _mm256_sub_ps(_mm256_loadu_ps(cq), v));
    }
    store_levels4(l[0], l[1], l[2], l[3], out + j / 2);
  }
  prefetch_lines(a0, ahead_bytes, 4 * j, ahead_bytes);
  prefetch_lines(a1, ahead_bytes, 4 * j, ahead_bytes);
  return j;
}

/// c = g + e over whole groups of 16, with the running min and max of c and whether any c was
/// NaN or Inf (the compensation pass of error feedback, fused with the range); returns the count.
SLUICE_TARGET_AVX2 inline std::size_t add_range_f32(float const* SLUICE_RESTRICT g, float const* SLUICE_RESTRICT e,
                                                    float* SLUICE_RESTRICT c, std::size_t len, float& mn, float& mx,
                                                    bool& poisoned) noexcept {
  range_acc r(mn, mx);
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __m256 const a = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(e + i));
    __m256 const b = _mm256_add_ps(_mm256_loadu_ps(g + i + 8), _mm256_loadu_ps(e + i + 8));
    _mm256_storeu_ps(c + i, a);
    _mm256_storeu_ps(c + i + 8, b);
    r.add(a, b);
  }
  r.finish(mn, mx, poisoned);
  return i;
}

/// e = c - (min + q * unit) over whole groups of 8 (the residual after sending levels q); returns
/// the count.
SLUICE_TARGET_AVX2 inline std::size_t residual_f32(float const* SLUICE_RESTRICT c,
                                                   std::uint8_t const* SLUICE_RESTRICT q, float min, float unit,
                                                   float* SLUICE_RESTRICT e, std::size_t len) noexcept {
  __m256 const vmin = _mm256_set1_ps(min), vunit = _mm256_set1_ps(unit);
  std::size_t j = 0;
  for (; j + 8 <= len; j += 8) {
    __m128i const b = _mm_loadl_epi64(reinterpret_cast<__m128i const*>(q + j));
    __m256 const v = _mm256_add_ps(vmin, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), vunit));
    _mm256_storeu_ps(e + j, _mm256_sub_ps(_mm256_loadu_ps(c + j), v));
  }
  return j;
}

}  // namespace avx2
#endif

/// Asks for the cache lines of x[0, len) ahead of use.
template <class T>
inline void prefetch_range(T const* x, std::size_t len) noexcept {
  auto const* p = reinterpret_cast<char const*>(x);
  for (std::size_t o = 0; o < len * sizeof(T); o += 64) __builtin_prefetch(p + o, 0, 3);
}

/// The grid of a bucket of `len` elements with the given min and max, or the NaN grid when any
/// element was NaN or Inf (`poisoned`).
inline maxmin_range maxmin_grid(float mn, float mx, bool poisoned, std::size_t len, unsigned bits) noexcept {
  if (len == 0) return {0.0f, 0.0f};
  if (poisoned) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  float const maxq = static_cast<float>((1u << bits) - 1u);
  float const range = mx - mn;
  if (std::isfinite(range)) [[likely]]
    return {mn, range / maxq};
  // Finite values of both signs beyond +-1.7e38: max - min overflows float. The grid then covers
  // [min, min + FLT_MAX] (the largest span min + level * unit reaches without overflow): decoded
  // values stay finite, values above the grid decode to its top.
  float unit = static_cast<float>(static_cast<double>(std::numeric_limits<float>::max()) / maxq);
  while (!std::isfinite(unit * maxq)) unit = std::nextafter(unit, 0.0f);
  return {mn, unit};
}

/// The grid of a bucket for `bits` bits: min and (max - min) / (2^bits - 1). A bucket holding a NaN
/// or an infinity gets min = NaN, so every element of it decodes to NaN and the receiver sees it.
template <Element T>
inline maxmin_range maxmin_bucket_range(T const* SLUICE_RESTRICT x, std::size_t len, unsigned bits) noexcept {
  // `poison` turns NaN when any value is NaN or Inf. SSE2 for float: GCC leaves a running min/max
  // scalar (it may not reorder the reduction), and this loop is half the encoder's work.
  float mn = std::numeric_limits<float>::infinity(), mx = -std::numeric_limits<float>::infinity(), p = 0.0f;
  std::size_t i = 0;
#if SLUICE_HAVE_AVX2_TARGET
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) {
      bool poisoned = false;
      i = avx2::range_f32(x, len, mn, mx, poisoned);
      if (poisoned) p = std::numeric_limits<float>::quiet_NaN();
    }
#endif
#if defined(__SSE2__)
  // (Skipped when no group of 8 is left, as after the AVX2 body: its reduction would change nothing.)
  if constexpr (std::is_same_v<T, float>)
    if (i + 8 <= len) {
      __m128 mn0 = _mm_set1_ps(mn), mn1 = mn0, mx0 = _mm_set1_ps(mx), mx1 = mx0, p0 = _mm_setzero_ps(), p1 = p0;
      for (; i + 8 <= len; i += 8) {
        __m128 const a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
        mn0 = _mm_min_ps(mn0, a), mn1 = _mm_min_ps(mn1, b);
        mx0 = _mm_max_ps(mx0, a), mx1 = _mm_max_ps(mx1, b);
        p0 = _mm_add_ps(p0, _mm_sub_ps(a, a)), p1 = _mm_add_ps(p1, _mm_sub_ps(b, b));
      }
      alignas(16) float l[12];
      _mm_store_ps(l, _mm_min_ps(mn0, mn1));
      _mm_store_ps(l + 4, _mm_max_ps(mx0, mx1));
      _mm_store_ps(l + 8, _mm_add_ps(p0, p1));
      for (int t = 0; t < 4; ++t) mn = std::min(mn, l[t]), mx = std::max(mx, l[4 + t]), p += l[8 + t];
    }
#endif
  for (; i < len; ++i) {
    float const v = to_float(x[i]);
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    p += v - v;
  }
  return maxmin_grid(mn, mx, !(p == 0.0f), len, bits);
}

/// Level of one value on a grid, clamped to [0, maxq]; `u` in [0, 1) is 0.5 for round-to-nearest
/// or a uniform draw for stochastic rounding. NaN positions (unit 0 or a NaN range) give level 0.
inline std::uint8_t maxmin_level(float x, maxmin_range r, float maxq, float u) noexcept {
  float v = (x - r.min) / r.unit + u;
  v = v > 0.0f ? v : 0.0f;
  v = v < maxq ? v : maxq;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(v));
}

/// Quantizes one bucket to codes (one byte per element, < 2^bits). Element j draws its stochastic
/// rounding from word first + j of `stream`, so results do not depend on how buckets are split
/// across threads.
template <Element T>
inline void maxmin_quantize_bucket(T const* SLUICE_RESTRICT x, std::size_t len, maxmin_range r, unsigned bits,
                                   rounding mode, random_stream const& stream, std::size_t first,
                                   std::uint8_t* SLUICE_RESTRICT codes) noexcept {
  float const maxq = static_cast<float>((1u << bits) - 1u);
  float const inv = 1.0f / r.unit;
  if (mode == rounding::nearest && std::isfinite(inv)) {
    // Multiplying by the reciprocal moves a level by at most ~2^-22 * maxq units: the error bound
    // becomes unit * (1/2 + 2^-14) at worst; a subnormal unit (infinite reciprocal) divides.
    std::size_t j = 0;
#if SLUICE_HAVE_AVX2_TARGET
    if constexpr (std::is_same_v<T, float>)
      if (use_avx2()) j = avx2::levels_f32(x, len, r.min, inv, maxq, codes);
#endif
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      // SSE2 lacks an unsigned 32->16 pack, so GCC narrows with long shuffle chains; the signed
      // packs are exact here because levels lie in [0, 255].
      __m128 const vmin = _mm_set1_ps(r.min), vinv = _mm_set1_ps(inv), half = _mm_set1_ps(0.5f),
                   zero = _mm_setzero_ps(), top = _mm_set1_ps(maxq);
      auto level = [&](std::size_t o) {
        __m128 v = _mm_add_ps(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(x + o), vmin), vinv), half);
        v = _mm_min_ps(_mm_max_ps(v, zero), top);  // maxps(NaN, 0) gives 0
        return _mm_cvttps_epi32(v);
      };
      for (; j + 16 <= len; j += 16) {
        __m128i const a = _mm_packs_epi32(level(j), level(j + 4));
        __m128i const b = _mm_packs_epi32(level(j + 8), level(j + 12));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + j), _mm_packus_epi16(a, b));
      }
    }
#endif
    for (; j < len; ++j) {
      float v = (to_float(x[j]) - r.min) * inv + 0.5f;
      v = v > 0.0f ? v : 0.0f;
      v = v < maxq ? v : maxq;
      codes[j] = static_cast<std::uint8_t>(static_cast<std::int32_t>(v));
    }
    return;
  }
  if (mode == rounding::nearest) {
    for (std::size_t j = 0; j < len; ++j) codes[j] = maxmin_level(to_float(x[j]), r, maxq, 0.5f);
    return;
  }
  std::size_t j = 0;
  // Whole Philox blocks where the stream position is 4-aligned, single words at the edges.
  for (; j < len && (first + j) % 4 != 0; ++j)
    codes[j] = maxmin_level(to_float(x[j]), r, maxq, stream.uniform(first + j));
  for (; j + 4 <= len; j += 4) {
    auto const w = stream.block(static_cast<std::uint32_t>((first + j) / 4));
    for (std::size_t t = 0; t < 4; ++t)
      codes[j + t] = maxmin_level(to_float(x[j + t]), r, maxq, random_stream::to_unit_float(w[t]));
  }
  for (; j < len; ++j) codes[j] = maxmin_level(to_float(x[j]), r, maxq, stream.uniform(first + j));
}

/// Round-to-nearest 4-bit levels of floats packed straight into `out` (two per byte) for as many
/// leading elements as a wider body handles; returns that count (0 without one). The caller
/// quantizes and packs the rest. The `ahead_len` floats at `ahead` (the next bucket) are
/// prefetched along the way when a body ran.
inline std::size_t maxmin_pack4_nearest(float const* SLUICE_RESTRICT x, std::size_t len, maxmin_range r,
                                        std::byte* SLUICE_RESTRICT out, float const* ahead = nullptr,
                                        std::size_t ahead_len = 0) noexcept {
#if SLUICE_HAVE_AVX2_TARGET
  float const inv = 1.0f / r.unit;
  if (use_avx2() && std::isfinite(inv)) return avx2::levels4_packed_f32(x, len, r.min, inv, out, ahead, 4 * ahead_len);
#endif
  (void)x, (void)len, (void)r, (void)out, (void)ahead, (void)ahead_len;
  return 0;
}

/// The value level q of a grid decodes to (before narrowing to T).
inline float maxmin_value(maxmin_range r, std::uint8_t q) noexcept { return r.min + static_cast<float>(q) * r.unit; }

}  // namespace sluice::compress_detail
