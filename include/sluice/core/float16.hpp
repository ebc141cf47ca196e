// The two 16-bit element types: sluice::half (IEEE binary16) and sluice::bfloat16 (the top half
// of a binary32). Each is two bytes, trivially copyable and regular; widening to float is exact
// and implicit, narrowing from float is explicit and rounds to nearest, ties to even. The bits
// equal those of Eigen::half and Eigen::bfloat16 built without F16C (the default x86-64 target):
// every NaN narrows to the quiet NaN of its sign (0x7e00 / 0x7fc0), widening keeps the payload.
// No Eigen: this is what core/ includes (tests/core/test_float16.cpp checks all 2^16 patterns
// and 2^24 floats against Eigen).
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define SLUICE_FLOAT16_HD __host__ __device__
#else
#define SLUICE_FLOAT16_HD
#endif

namespace sluice {

namespace detail {

/// binary16 bits to float (exact; NaN payloads move to the top of the float's mantissa).
SLUICE_FLOAT16_HD constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t const exponent = (h >> 10) & 0x1fu;
  std::uint32_t const mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float (a normal float for mantissa != 0).
    float const magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  std::uint32_t const bits = exponent == 0x1f ? (0xffu << 23) | (mantissa << 13)                     // Inf, NaN
                                              : ((exponent + (127 - 15)) << 23) | (mantissa << 13);  // normal
  return std::bit_cast<float>(sign | bits);
}

/// float to binary16 bits, round to nearest, ties to even; overflow to Inf, NaN to 0x7e00 | sign.
SLUICE_FLOAT16_HD constexpr std::uint16_t float_to_half_bits(float x) noexcept {
  std::uint32_t const bits = std::bit_cast<std::uint32_t>(x);
  auto const sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  std::uint32_t const mag = bits & 0x7fffffffu;
  std::uint16_t out;
  if (mag >= (127u + 16u) << 23) {  // |x| >= 65536: Inf, NaN, or beyond rounding range
    out = mag > 0x7f800000u ? std::uint16_t{0x7e00} : std::uint16_t{0x7c00};
  } else if (mag < (127u - 14u) << 23) {  // |x| < 2^-14: a subnormal half or zero
    // Adding 0.5 puts the half's units (2^-24) at the float's last mantissa bit; the float
    // addition rounds to nearest even, and the mantissa bits above 0.5's are the result.
    float const aligned = std::bit_cast<float>(mag) + 0.5f;
    out = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(aligned) - 0x3f000000u);
  } else {
    // Normal range: rebias the exponent and round the 13 dropped bits (ties to even); a carry
    // out of the mantissa moves into the exponent, up to Inf, which is the correct limit.
    std::uint32_t const odd = (mag >> 13) & 1u;
    std::uint32_t const rebiased = mag - ((127u - 15u) << 23);
    out = static_cast<std::uint16_t>((rebiased + 0xfffu + odd) >> 13);
  }
  return static_cast<std::uint16_t>(out | sign);
}

/// float to bfloat16 bits, round to nearest, ties to even; NaN to 0x7fc0 | sign.
SLUICE_FLOAT16_HD constexpr std::uint16_t float_to_bfloat16_bits(float x) noexcept {
  std::uint32_t const bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>(((bits >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace detail

/// IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits.
class half {
 public:
  constexpr half() noexcept = default;
  /// Rounds to nearest, ties to even (NaN stays NaN, overflow becomes Inf).
  SLUICE_FLOAT16_HD constexpr explicit half(float x) noexcept : bits_(detail::float_to_half_bits(x)) {}
  /// Any other arithmetic value, through float (as Eigen::half(value) does).
  template <class U>
  requires(std::integral<U> || std::floating_point<U>) SLUICE_FLOAT16_HD constexpr explicit half(U x) noexcept
      : half(static_cast<float>(x)) {}

  /// Widening is exact, so it is implicit.
  SLUICE_FLOAT16_HD constexpr operator float() const noexcept { return detail::half_bits_to_float(bits_); }

  /// The value with bit pattern b.
  SLUICE_FLOAT16_HD static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits_ = b;
    return h;
  }
  /// This value's bit pattern.
  SLUICE_FLOAT16_HD constexpr std::uint16_t bits() const noexcept { return bits_; }

  /// Compares values as float does (NaN is unequal to itself, -0 == +0).
  SLUICE_FLOAT16_HD friend constexpr bool operator==(half a, half b) noexcept { return float(a) == float(b); }

 private:
  std::uint16_t bits_ = 0;
};

/// bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa bits).
class bfloat16 {
 public:
  constexpr bfloat16() noexcept = default;
  /// Rounds to nearest, ties to even (NaN stays NaN, overflow becomes Inf).
  SLUICE_FLOAT16_HD constexpr explicit bfloat16(float x) noexcept : bits_(detail::float_to_bfloat16_bits(x)) {}
  /// Any other arithmetic value, through float (as Eigen::bfloat16(value) does).
  template <class U>
  requires(std::integral<U> || std::floating_point<U>) SLUICE_FLOAT16_HD constexpr explicit bfloat16(U x) noexcept
      : bfloat16(static_cast<float>(x)) {}

  /// Widening is exact, so it is implicit.
  SLUICE_FLOAT16_HD constexpr operator float() const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits_) << 16);
  }

  /// The value with bit pattern b.
  SLUICE_FLOAT16_HD static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits_ = b;
    return h;
  }
  /// This value's bit pattern.
  SLUICE_FLOAT16_HD constexpr std::uint16_t bits() const noexcept { return bits_; }

  /// Compares values as float does (NaN is unequal to itself, -0 == +0).
  SLUICE_FLOAT16_HD friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept { return float(a) == float(b); }

 private:
  std::uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2 && alignof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);
static_assert(std::regular<half> && std::regular<bfloat16>);

}  // namespace sluice

#undef SLUICE_FLOAT16_HD
