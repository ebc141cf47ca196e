// How error-feedback state is stored, shared by the feedback policies and the fused
// encode_compensated paths codecs offer: the non-finite test, the state's own rounding stream,
// and fp32 / bf16 (stochastically rounded) stores that never keep a NaN or Inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/random.hpp>

namespace sluice::detail::compress {

/// Elements per parallel chunk of the element loops (cache-sized: 64 Ki floats = 256 KiB).
inline constexpr std::size_t grain = std::size_t{1} << 16;

/// True for NaN and ±Inf; branch-free so loops over it vectorize (x - x is 0 only for finite x).
inline bool non_finite(float x) noexcept { return x - x != 0.0f; }

/// The stream that rounds bf16 state: keyed like the codec's stream but in its own domain, so
/// state rounding never reuses the codec's random words. Word i rounds element offset + i.
/// `buffer` separates the streams of a policy's two buffers.
inline random_stream state_stream(encode_context const& ctx, std::size_t tensor, std::size_t buffer = 0) noexcept {
  return random_stream(stream_key{ctx.seed ^ (0x5EEDFEEDBACC0001ull + buffer), ctx.rank,
                                  static_cast<std::uint32_t>(ctx.step), static_cast<std::uint32_t>(tensor)});
}

/// Narrows x to the state type: exact for float, stochastic rounding for bf16 with the word of
/// element `index` of the stream. A non-finite x becomes 0: the state is never poisoned.
template <class S>
inline S store(float x, random_stream const& rs, std::uint64_t index) noexcept {
  if (non_finite(x)) x = 0.0f;
  if constexpr (std::is_same_v<S, float>) {
    (void)rs;
    (void)index;
    return x;
  } else {
    return from_float_stochastic<S>(x, rs.word(index));
  }
}

/// dst[i] = store(src(i)) for i in [b, e), drawing one Philox block per 4 elements.
template <class S, class F>
inline void store_range(S* dst, std::size_t b, std::size_t e, random_stream const& rs, std::uint64_t offset,
                        F&& src) noexcept {
  if constexpr (std::is_same_v<S, float>) {
    (void)rs;
    (void)offset;
    for (std::size_t i = b; i < e; ++i) {
      float const x = src(i);
      dst[i] = non_finite(x) ? 0.0f : x;
    }
  } else {
    std::size_t i = b;
    while (i < e) {
      std::uint64_t const w = offset + i;
      auto const blk = rs.block(static_cast<std::uint32_t>(w >> 2));
      for (std::size_t lane = static_cast<std::size_t>(w & 3); lane < 4 && i < e; ++lane, ++i) {
        float x = src(i);
        if (non_finite(x)) x = 0.0f;
        dst[i] = from_float_stochastic<S>(x, blk[lane]);
      }
    }
  }
}

}  // namespace sluice::detail::compress
