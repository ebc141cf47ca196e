// bf16 bit patterns as 16-bit integers: widening, round-to-nearest-even and stochastic rounding,
// bit-identical to sluice::bfloat16 and from_float_stochastic but branch-free, so loops over them
// vectorize.
#pragma once

#include <bit>
#include <cstdint>

namespace sluice::detail {

/// bf16 bit pattern to float (exact).
inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// float to bf16 with stochastic rounding, bit-identical to from_float_stochastic<bfloat16>
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

/// float to bf16 with round-to-nearest-even, bit-identical to sluice::bfloat16(x), branch-free.
inline std::uint16_t bf16_nearest(float x) noexcept {
  std::uint32_t const bits = std::bit_cast<std::uint32_t>(x);
  std::uint32_t const mag = bits & 0x7fffffffu;
  std::uint32_t const nan = (bits & 0x80000000u) | 0x7fc00000u;
  std::uint32_t const r = mag > 0x7f800000u ? nan : bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}

}  // namespace sluice::detail
