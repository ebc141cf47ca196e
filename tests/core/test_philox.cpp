// The in-house Philox4x32-10 against Random123's published known-answer vectors (its
// kat_vectors file: counter and key all zeros, all ones, and the digits of pi), computed with
// Random123 0x10900 before sluice stopped including it.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>

#include <sluice/core/detail/philox.hpp>
#include <sluice/core/random.hpp>

namespace {

using philox = sluice::detail::philox4x32;

std::array<std::uint32_t, 4> evaluate(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) {
  auto const r = philox{}({{c[0], c[1], c[2], c[3]}}, {{k[0], k[1]}});
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

}  // namespace

// A constant expression: the generator is usable at compile time (and in device code).
static_assert(philox{}({{0, 0, 0, 0}}, {{0, 0}}).v[0] == 0x6627e8d5u);

TEST_CASE("Philox4x32-10 reproduces Random123's known answers") {
  using words = std::array<std::uint32_t, 4>;
  CHECK(evaluate({0, 0, 0, 0}, {0, 0}) == words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(evaluate({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(evaluate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("a stream's block is Philox of (block, step, tensor, rank) keyed by the seed") {
  sluice::stream_key const k{
      .seed = 0x299f31d0a4093822u, .rank = 0x03707344u, .step = 0x85a308d3u, .tensor = 0x13198a2eu};
  auto const b = sluice::random_stream(k).block(0x243f6a88u);
  CHECK(std::array<std::uint32_t, 4>{b[0], b[1], b[2], b[3]} ==
        std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}
