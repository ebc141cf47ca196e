// Element types sluice moves and computes on: float, sluice::half, sluice::bfloat16 (core/float16.hpp),
// with round-to-nearest-even and stochastic conversions from float. Compute is always fp32.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include <sluice/core/concepts.hpp>
#include <sluice/core/float16.hpp>

namespace sluice {

static_assert(std::endian::native == std::endian::little,
              "sluice: the wire format is little-endian and is read in place; big-endian hosts are unsupported");

/// Element type tag as it appears on the wire (one byte). Values are stable.
enum class element_type : std::uint8_t { f32 = 1, f16 = 2, bf16 = 3 };

/// Human-readable name of an element type ("f32", "f16", "bf16").
constexpr std::string_view to_string(element_type e) noexcept {
  switch (e) {
    case element_type::f32:
      return "f32";
    case element_type::f16:
      return "f16";
    case element_type::bf16:
      return "bf16";
  }
  return "unknown";
}

/// Bytes per element of an element type.
constexpr std::size_t size_of(element_type e) noexcept { return e == element_type::f32 ? 4 : 2; }

template <class T>
struct element_traits;  // only the three element types below are defined

template <>
struct element_traits<float> {
  static constexpr element_type id = element_type::f32;
};
template <>
struct element_traits<half> {
  static constexpr element_type id = element_type::f16;
};
template <>
struct element_traits<bfloat16> {
  static constexpr element_type id = element_type::bf16;
};

template <Element T>
inline constexpr element_type element_type_of = element_traits<std::remove_cv_t<T>>::id;

/// Widens any element to float (exact).
template <Element T>
inline float to_float(T x) noexcept {
  if constexpr (std::is_same_v<std::remove_cv_t<T>, float>)
    return x;
  else
    return static_cast<float>(x);
}

/// Narrows float to T with round-to-nearest-even (NaN stays NaN, overflow becomes Inf).
template <Element T>
inline T from_float(float x) noexcept {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return T(x);  // round-to-nearest-even for both half and bfloat16
}

/// Narrows float to T with stochastic rounding: rounds up with probability equal to the distance
/// to the lower neighbour divided by the gap, so E[to_float(result)] == x for finite x within range.
/// `random` is 32 uniformly distributed bits (from a counter-based stream, see core/random.hpp).
/// Non-finite inputs convert as from_float does.
template <Element T>
inline T from_float_stochastic(float x, std::uint32_t random) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    (void)random;
    return x;
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    // bfloat16 is the top half of a float: adding 16 random bits below the cut and truncating
    // rounds the magnitude up with probability (dropped bits) / 2^16.
    std::uint32_t const bits = std::bit_cast<std::uint32_t>(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) return bfloat16(x);  // Inf/NaN
    std::uint32_t const rounded = bits + (random >> 16);
    // Carry into the exponent is the correct next value; overflow to Inf is the correct limit.
    return bfloat16::from_bits(static_cast<std::uint16_t>(rounded >> 16));
  } else {
    if (!(std::abs(x) <= std::numeric_limits<float>::max())) return half(x);
    half const nearest(x);
    float const n = static_cast<float>(nearest);
    if (n == x) return nearest;
    // The two representable neighbours of x: `nearest` and the next one away from it towards x.
    std::uint16_t const nb = nearest.bits();
    bool const toward_larger_magnitude = std::abs(x) > std::abs(n);
    std::uint16_t other_bits;
    if (n == 0.0f)
      other_bits = static_cast<std::uint16_t>((x < 0 ? 0x8000u : 0u) | 1u);  // smallest subnormal
    else
      other_bits = static_cast<std::uint16_t>(toward_larger_magnitude ? nb + 1 : nb - 1);
    half const other = half::from_bits(other_bits);
    float const o = static_cast<float>(other);
    float const lo = std::min(n, o), hi = std::max(n, o);
    // P(round to hi) = (x - lo) / (hi - lo), compared in 24-bit fixed point.
    float const p = (x - lo) / (hi - lo);
    float const u = static_cast<float>(random >> 8) * 0x1p-24f;
    float const chosen = u < p ? hi : lo;
    return chosen == n ? nearest : other;
  }
}

}  // namespace sluice
