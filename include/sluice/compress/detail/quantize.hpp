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

#include <sluice/compress/rounding.hpp>
#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>

namespace sluice::detail::compress {

/// A bucket's quantization grid: level q decodes to min + q * unit (fp32 whatever T is).
struct maxmin_range {
  float min = 0.0f;
  float unit = 0.0f;
  friend bool operator==(maxmin_range const&, maxmin_range const&) = default;
};

/// Bytes [from, to) of a region of `bytes` bytes at `p`, asked for one cache line at a time.
inline void prefetch_lines(char const* p, std::size_t bytes, std::size_t from, std::size_t to) noexcept {
  for (std::size_t o = from; o < to && o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/// The float loops at level L (compress/detail/quantize_body.hpp, stamped below up to AVX2).
template <sluice::simd L>
struct maxmin_lanes;

}  // namespace sluice::detail::compress

#define SLUICE_SIMD_BODY <sluice/compress/detail/quantize_body.hpp>
#define SLUICE_SIMD_MAX_AVX2
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail::compress {

/// c = g + e over whole groups of 16 with the running min and max of c and whether any c was NaN
/// or Inf (maxmin_lanes::add_range at this process's level); returns the count handled.
inline std::size_t add_range_f32(float const* g, float const* e, float* c, std::size_t len, float& mn, float& mx,
                                 bool& poisoned) noexcept {
  return detail::simd::dispatch<sluice::simd::avx2>(
      [&](auto l) { return maxmin_lanes<decltype(l)::value>::add_range(g, e, c, len, mn, mx, poisoned); });
}

/// 4-bit nearest levels packed into `out` and the residual e = c - value over whole groups
/// (maxmin_lanes::levels_u4_residual at this process's level); returns the count handled.
inline std::size_t levels4_residual_f32(float const* c, std::size_t len, float min, float inv, float unit,
                                        std::byte* out, float* e, void const* ahead0 = nullptr,
                                        void const* ahead1 = nullptr, std::size_t ahead_bytes = 0) noexcept {
  return detail::simd::dispatch<sluice::simd::avx2>([&](auto l) {
    return maxmin_lanes<decltype(l)::value>::levels_u4_residual(c, len, min, inv, unit, out, e, ahead0, ahead1,
                                                                ahead_bytes);
  });
}

/// e = c - (min + q * unit) over whole groups (maxmin_lanes::residual); returns the count handled.
inline std::size_t residual_f32(float const* c, std::uint8_t const* q, float min, float unit, float* e,
                                std::size_t len) noexcept {
  return detail::simd::dispatch<sluice::simd::avx2>(
      [&](auto l) { return maxmin_lanes<decltype(l)::value>::residual(c, q, min, unit, e, len); });
}

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
  // `poison` turns NaN when any value is NaN or Inf. Lanes for float: GCC leaves a running
  // min/max scalar (it may not reorder the reduction), and this loop is half the encoder's work.
  float mn = std::numeric_limits<float>::infinity(), mx = -std::numeric_limits<float>::infinity(), p = 0.0f;
  std::size_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    bool poisoned = false;
    i = detail::simd::dispatch<sluice::simd::avx2>(
        [&](auto l) { return maxmin_lanes<decltype(l)::value>::range(x, len, mn, mx, poisoned); });
    if (poisoned) p = std::numeric_limits<float>::quiet_NaN();
  }
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
    if constexpr (std::is_same_v<T, float>)
      j = detail::simd::dispatch<sluice::simd::avx2>(
          [&](auto l) { return maxmin_lanes<decltype(l)::value>::levels_u8(x, len, r.min, inv, maxq, codes); });
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
/// leading elements as the lanes handle (whole groups); returns that count (0 for a subnormal
/// unit). The caller quantizes and packs the rest. The `ahead_len` floats at `ahead` (the next
/// bucket) are prefetched along the way.
inline std::size_t maxmin_pack4_nearest(float const* SLUICE_RESTRICT x, std::size_t len, maxmin_range r,
                                        std::byte* SLUICE_RESTRICT out, float const* ahead = nullptr,
                                        std::size_t ahead_len = 0) noexcept {
  float const inv = 1.0f / r.unit;
  if (!std::isfinite(inv)) return 0;
  return detail::simd::dispatch<sluice::simd::avx2>([&](auto l) {
    return maxmin_lanes<decltype(l)::value>::levels_u4(x, len, r.min, inv, out, ahead, 4 * ahead_len);
  });
}

/// The value level q of a grid decodes to (before narrowing to T).
inline float maxmin_value(maxmin_range r, std::uint8_t q) noexcept { return r.min + static_cast<float>(q) * r.unit; }

}  // namespace sluice::detail::compress
