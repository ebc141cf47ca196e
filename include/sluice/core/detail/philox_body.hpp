// Philox4x32-10 words of consecutive blocks written once over lanes: philox_words<L> for each
// level L, stamped by core/detail/simd_stamp.hpp from philox_lanes.hpp (no include guard; alone it
// includes that).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/core/detail/philox_lanes.hpp>
#else

namespace sluice::detail {

template <>
struct philox_words<SLUICE_SIMD_LEVEL> {
  using I = detail::simd::vi32<SLUICE_SIMD_LEVEL>;
  static constexpr std::size_t w = I::width;

  /// G groups of w blocks from block `first`, interleaved round by round: one group is a chain of
  /// ten dependent multiply rounds (latency-bound); two keep the pipes busy.
  template <int G>
  static SLUICE_SIMD_INLINE void group(philox_lanes const& k, std::uint32_t first,
                                       std::uint32_t* SLUICE_RESTRICT out) noexcept {
    I x0[G], x1[G], x2[G], x3[G];
    for (int q = 0; q < G; ++q) {
      x0[q] = I::iota(first + static_cast<std::uint32_t>(w) * static_cast<std::uint32_t>(q));
      x1[q] = I::set(static_cast<std::int32_t>(k.step));
      x2[q] = I::set(static_cast<std::int32_t>(k.tensor));
      x3[q] = I::set(static_cast<std::int32_t>(k.rank));
    }
    I const m0 = I::set(static_cast<std::int32_t>(0xD2511F53u)), m1 = I::set(static_cast<std::int32_t>(0xCD9E8D57u));
    std::uint32_t ka = k.k0, kb = k.k1;
    for (int round = 0; round < 10; ++round) {
      I const va = I::set(static_cast<std::int32_t>(ka)), vb = I::set(static_cast<std::int32_t>(kb));
      for (int q = 0; q < G; ++q) {
        I hi0, lo0, hi1, lo1;
        mulhilo(x0[q], m0, hi0, lo0);
        mulhilo(x2[q], m1, hi1, lo1);
        x0[q] = hi1 ^ x1[q] ^ va;
        x1[q] = lo1;
        x2[q] = hi0 ^ x3[q] ^ vb;
        x3[q] = lo0;
      }
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    for (int q = 0; q < G; ++q) I::store4(out + 4 * w * static_cast<std::size_t>(q), x0[q], x1[q], x2[q], x3[q]);
  }

  /// Words of blocks first .. first + j - 1 into out[0 .. 4 j) for the largest multiple j of w
  /// up to `blocks`; returns j.
  static std::size_t words(philox_lanes const& k, std::uint64_t first, std::size_t blocks,
                           std::uint32_t* SLUICE_RESTRICT out) noexcept {
    std::size_t j = 0;
    for (; j + 2 * w <= blocks; j += 2 * w) group<2>(k, static_cast<std::uint32_t>(first + j), out + 4 * j);
    for (; j + w <= blocks; j += w) group<1>(k, static_cast<std::uint32_t>(first + j), out + 4 * j);
    return j;
  }
};

}  // namespace sluice::detail

#endif
