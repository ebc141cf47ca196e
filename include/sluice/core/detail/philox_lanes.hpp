// Philox4x32-10 lanes: the words of a sluice::random_stream for many consecutive blocks at once
// (one body over lanes, philox_body.hpp, at the CPU's level), equal to random_stream's word for
// word; and the keys of the register-resident Philox state of the fused bf16 optimizer loops.
#pragma once

#include <cstddef>
#include <cstdint>

#include <sluice/config.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace sluice::detail {

/// Philox4x32-10 keyed like sluice::random_stream (key = seed, counter = (block, step, tensor,
/// rank)), evaluated for many consecutive blocks in one vectorizable loop.
struct philox_lanes {
  std::uint32_t k0 = 0, k1 = 0, step = 0, tensor = 0, rank = 0;

  static philox_lanes from(stream_key const& k) noexcept {
    return {static_cast<std::uint32_t>(k.seed), static_cast<std::uint32_t>(k.seed >> 32), k.step, k.tensor, k.rank};
  }

  /// Words 4*first .. 4*(first+blocks)-1 of the stream into out[0 .. 4*blocks): philox_words
  /// at this process's level (GCC vectorizes the plain loop with 64-bit lanes only, 2 blocks per
  /// vector, which made Philox the bottleneck of bf16 states), the rest scalar.
  void words(std::uint64_t first, std::size_t blocks, std::uint32_t* SLUICE_RESTRICT out) const noexcept;

  void words_scalar(std::uint64_t first, std::size_t blocks, std::uint32_t* SLUICE_RESTRICT out) const noexcept {
    std::uint32_t const s = step, t = tensor, r = rank, a = k0, b = k1;
    for (std::size_t j = 0; j < blocks; ++j) {
      std::uint32_t x0 = static_cast<std::uint32_t>(first + j), x1 = s, x2 = t, x3 = r, ka = a, kb = b;
      for (int round = 0; round < 10; ++round) {
        std::uint64_t const p0 = std::uint64_t{0xD2511F53u} * x0;
        std::uint64_t const p1 = std::uint64_t{0xCD9E8D57u} * x2;
        std::uint32_t const hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
        std::uint32_t const hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
        x0 = hi1 ^ x1 ^ ka;
        x1 = lo1;
        x2 = hi0 ^ x3 ^ kb;
        x3 = lo0;
        ka += 0x9E3779B9u;
        kb += 0xBB67AE85u;
      }
      out[4 * j] = x0;
      out[4 * j + 1] = x1;
      out[4 * j + 2] = x2;
      out[4 * j + 3] = x3;
    }
  }

  /// The round keys of the ten rounds, and the constants of rounds 0-2 for consumers that run
  /// many consecutive blocks (the fused bf16 optimizer loop, optim/detail/adam_body.hpp): only
  /// word 0 of the counter varies between blocks, so half of the first rounds' products are the
  /// same for every block (computed here once in scalar).
  struct key_words {
    std::uint32_t a[10], b[10];
    std::uint32_t r0, d0, d2, e2;
  };

  [[nodiscard]] key_words round_key_words() const noexcept {
    key_words w{};
    std::uint32_t ka = k0, kb = k1;
    for (int round = 0; round < 10; ++round) {
      w.a[round] = ka;
      w.b[round] = kb;
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    std::uint64_t const p1 = std::uint64_t{0xCD9E8D57u} * tensor;  // round 0, words 2 -> 0, 1
    auto const c0 = static_cast<std::uint32_t>(p1 >> 32) ^ step ^ w.a[0], c1 = static_cast<std::uint32_t>(p1);
    std::uint64_t const q0 = std::uint64_t{0xD2511F53u} * c0;  // round 1, words 0 -> 2, 3
    auto const d3 = static_cast<std::uint32_t>(q0);
    w.r0 = rank ^ w.b[0];
    w.d0 = c1 ^ w.a[1];
    w.d2 = static_cast<std::uint32_t>(q0 >> 32) ^ w.b[1];
    w.e2 = d3 ^ w.b[2];
    return w;
  }

  /// Word i of the stream.
  [[nodiscard]] std::uint32_t word(std::uint64_t i) const noexcept {
    std::uint32_t w[4];
    words(i >> 2, 1, w);
    return w[i & 3];
  }
};

/// philox_lanes::words at level L (core/detail/philox_body.hpp, stamped below).
template <sluice::simd L>
struct philox_words;

}  // namespace sluice::detail

#define SLUICE_SIMD_BODY <sluice/core/detail/philox_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail {

inline void philox_lanes::words(std::uint64_t first, std::size_t blocks,
                                std::uint32_t* SLUICE_RESTRICT out) const noexcept {
  std::size_t const j = detail::simd::dispatch(
      [&](auto l) { return philox_words<decltype(l)::value>::words(*this, first, blocks, out); });
  words_scalar(first + j, blocks - j, out + 4 * j);
}

}  // namespace sluice::detail
