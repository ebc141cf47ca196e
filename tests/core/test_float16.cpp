// sluice::half and sluice::bfloat16 against Eigen::half and Eigen::bfloat16 (the types sluice used
// before, and the reference for the bits on the wire and in checkpoints): every 16-bit pattern
// widens to the same float bits, and float narrows to the same 16 bits over every rounding case
// (each top half of a float with the low bits on both sides of each tie) and 2^24 random floats.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include <sluice/core/float16.hpp>

namespace {

std::uint32_t float_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// The low 16 bits of a float that decide rounding: half drops 13 bits (tie 0x1000), bfloat16
// drops 16 (tie 0x8000); each tie with its neighbours, under an even and an odd kept bit.
constexpr std::array<std::uint32_t, 16> rounding_cases{0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2fff,
                                                       0x3000, 0x3001, 0x7fff, 0x8000, 0x8001, 0x9000, 0xefff, 0xffff};

template <class Sluice, class Eigen_type>
void check_narrowing(float x) {
  auto const ours = std::bit_cast<std::uint16_t>(Sluice(x));
  auto const eigen = std::bit_cast<std::uint16_t>(Eigen_type(x));
  if (ours != eigen) FAIL_CHECK("float bits " << float_bits(x) << ": sluice " << ours << ", Eigen " << eigen);
}

}  // namespace

static_assert(sizeof(sluice::half) == 2 && sizeof(sluice::bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<sluice::half> && std::is_trivially_copyable_v<sluice::bfloat16>);
static_assert(std::regular<sluice::half> && std::regular<sluice::bfloat16>);
static_assert(!std::is_convertible_v<float, sluice::half> && std::is_convertible_v<sluice::half, float>);
// Conversions are constant expressions.
static_assert(sluice::half(1.0f).bits() == 0x3c00 && sluice::bfloat16(1.0f).bits() == 0x3f80);
static_assert(float(sluice::half::from_bits(0x0001)) == 0x1p-24f);

TEST_CASE("every 16-bit pattern widens to the float Eigen gives") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    auto const u = static_cast<std::uint16_t>(b);
    CHECK(float_bits(sluice::half::from_bits(u)) == float_bits(std::bit_cast<Eigen::half>(u)));
    CHECK(float_bits(sluice::bfloat16::from_bits(u)) == float_bits(std::bit_cast<Eigen::bfloat16>(u)));
    // Narrowing the widened value gives the pattern back, except that NaNs become the quiet NaN.
    float const h = sluice::half::from_bits(u);
    if (h == h) CHECK(sluice::half(h).bits() == u);
  }
}

TEST_CASE("narrowing rounds to nearest even with Eigen's bits, NaN and Inf included") {
  for (std::uint32_t top = 0; top <= 0xffff; ++top)
    for (std::uint32_t low : rounding_cases) {
      float const x = std::bit_cast<float>(top << 16 | low);
      check_narrowing<sluice::half, Eigen::half>(x);
      check_narrowing<sluice::bfloat16, Eigen::bfloat16>(x);
    }
  std::uint64_t state = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < (1 << 24); ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    float const x = std::bit_cast<float>(static_cast<std::uint32_t>(state >> 32));
    check_narrowing<sluice::half, Eigen::half>(x);
    check_narrowing<sluice::bfloat16, Eigen::bfloat16>(x);
  }
  // The special values by name.
  CHECK(sluice::half(std::numeric_limits<float>::quiet_NaN()).bits() == 0x7e00);
  CHECK(sluice::half(-std::numeric_limits<float>::infinity()).bits() == 0xfc00);
  CHECK(sluice::half(65520.0f).bits() == 0x7c00);  // halfway past the largest half rounds to Inf
  CHECK(sluice::half(65519.0f).bits() == 0x7bff);
  CHECK(sluice::bfloat16(-std::numeric_limits<float>::quiet_NaN()).bits() == 0xffc0);
}

TEST_CASE("values compare as floats and other arithmetic types narrow through float") {
  CHECK(sluice::half(0.0f) == sluice::half(-0.0f));
  CHECK_FALSE(sluice::bfloat16(std::numeric_limits<float>::quiet_NaN()) ==
              sluice::bfloat16(std::numeric_limits<float>::quiet_NaN()));
  CHECK(sluice::half(3).bits() == Eigen::half(3).x);
  CHECK(sluice::bfloat16(0.1).bits() == Eigen::bfloat16(0.1).value);
  CHECK(sluice::half{}.bits() == 0);
}
