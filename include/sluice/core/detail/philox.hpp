// Philox4x32-10 for one block: the counter-based generator of Salmon, Moraes, Dror and Shaw
// ("Parallel random numbers: as easy as 1, 2, 3", SC'11), with the bits of Random123's
// r123::Philox4x32 (tests/core/test_random.cpp pins its known answers). Ten rounds of two
// 32x32->64 multiplies; the 64-bit key is bumped by the Weyl constants between rounds. Plain C++
// that nvcc also compiles for the device (cuda/functors.hpp), so <Random123/philox.h> and the
// <iostream> it brings stay out of every header. philox_lanes.hpp evaluates the same function
// over many blocks at once.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SLUICE_PHILOX_HD __host__ __device__
#else
#define SLUICE_PHILOX_HD
#endif

namespace sluice::detail {

/// Philox4x32-10: maps a 128-bit counter and a 64-bit key to 128 random bits.
struct philox4x32 {
  struct ctr_type {
    std::uint32_t v[4];
  };
  struct key_type {
    std::uint32_t v[2];
  };

  static constexpr std::uint32_t multiplier0 = 0xD2511F53u, multiplier1 = 0xCD9E8D57u;
  static constexpr std::uint32_t weyl0 = 0x9E3779B9u, weyl1 = 0xBB67AE85u;
  static constexpr int rounds = 10;

  SLUICE_PHILOX_HD constexpr ctr_type operator()(ctr_type c, key_type k) const noexcept {
    std::uint32_t x0 = c.v[0], x1 = c.v[1], x2 = c.v[2], x3 = c.v[3];
    std::uint32_t ka = k.v[0], kb = k.v[1];
    for (int round = 0; round < rounds; ++round) {
      std::uint64_t const p0 = std::uint64_t{multiplier0} * x0;
      std::uint64_t const p1 = std::uint64_t{multiplier1} * x2;
      auto const hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
      auto const hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
      x0 = hi1 ^ x1 ^ ka;
      x1 = lo1;
      x2 = hi0 ^ x3 ^ kb;
      x3 = lo0;
      ka += weyl0;
      kb += weyl1;
    }
    return {{x0, x1, x2, x3}};
  }
};

}  // namespace sluice::detail

#undef SLUICE_PHILOX_HD
