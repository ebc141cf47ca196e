// Counter-based random streams (Philox4x32-10, core/detail/philox.hpp) keyed by (seed, rank, step, tensor):
// any rank can regenerate any other rank's numbers, and element i of a stream can be drawn
// without drawing elements 0..i-1, so threads split a stream without coordination.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <sluice/core/detail/philox.hpp>

namespace sluice {

/// The identity of a random stream. Two streams with equal keys produce identical numbers on
/// every rank, run and thread count; streams with different keys are independent.
struct stream_key {
  std::uint64_t seed = 0;    ///< user seed, shared by all ranks of a job
  std::uint32_t rank = 0;    ///< the drawing rank, or shared_rank for streams all ranks agree on
  std::uint32_t step = 0;    ///< training step (wraps after 2^32 steps)
  std::uint32_t tensor = 0;  ///< tensor or bucket id
  friend constexpr bool operator==(stream_key const&, stream_key const&) = default;

  /// The rank value used by streams that every rank must agree on (shared random indices).
  static constexpr std::uint32_t shared_rank = std::numeric_limits<std::uint32_t>::max();
  /// This key with rank replaced by shared_rank.
  [[nodiscard]] constexpr stream_key shared() const noexcept { return {seed, shared_rank, step, tensor}; }
};

/// A random-access stream of 32-bit words. Word i is a pure function of (key, i).
/// Thread-safety: const member functions may be called concurrently; it holds no mutable state.
class random_stream {
 public:
  using philox = detail::philox4x32;  ///< Random123's Philox4x32, bit for bit

  constexpr random_stream() = default;
  explicit random_stream(stream_key const& k) noexcept
      : key_{{static_cast<std::uint32_t>(k.seed), static_cast<std::uint32_t>(k.seed >> 32)}},
        rank_(k.rank),
        step_(k.step),
        tensor_(k.tensor) {}

  /// Four consecutive words starting at word 4*block_index. One Philox evaluation.
  /// The 128-bit counter is (block_index, step, tensor, rank) and the key is the seed, so every
  /// (seed, rank, step, tensor) names a disjoint stream of 2^32 blocks (2^34 words).
  [[nodiscard]] std::array<std::uint32_t, 4> block(std::uint32_t block_index) const noexcept {
    philox::ctr_type const ctr = {{block_index, step_, tensor_, rank_}};
    auto const r = philox{}(ctr, key_);
    return {r.v[0], r.v[1], r.v[2], r.v[3]};
  }

  /// Word i of the stream.
  [[nodiscard]] std::uint32_t word(std::uint64_t i) const noexcept {
    return block(static_cast<std::uint32_t>(i >> 2))[i & 3];
  }

  /// Uniform float in [0, 1) with 24 random bits, from word i.
  [[nodiscard]] float uniform(std::uint64_t i) const noexcept { return to_unit_float(word(i)); }

  /// Maps 32 random bits to a float uniform in [0, 1) (24-bit resolution, never 1.0f).
  static constexpr float to_unit_float(std::uint32_t w) noexcept { return static_cast<float>(w >> 8) * 0x1p-24f; }

  /// Uniform integer in [0, bound) from words i (Lemire's multiply-shift; bias < bound / 2^32).
  [[nodiscard]] std::uint32_t below(std::uint64_t i, std::uint32_t bound) const noexcept {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(word(i)) * bound) >> 32);
  }

 private:
  philox::key_type key_{};
  std::uint32_t rank_ = 0, step_ = 0, tensor_ = 0;
};

/// Sequential reader over a random_stream: draws words 4 at a time from a starting word.
class random_cursor {
 public:
  explicit random_cursor(random_stream const& s, std::uint32_t first_block = 0) noexcept
      : stream_(&s), block_(first_block) {}
  /// The next 32-bit word.
  std::uint32_t next() noexcept {
    if (pos_ == 4) {
      buf_ = stream_->block(block_++);
      pos_ = 0;
    }
    return buf_[pos_++];
  }
  /// The next uniform float in [0, 1).
  float next_unit() noexcept { return random_stream::to_unit_float(next()); }

 private:
  random_stream const* stream_;
  std::uint32_t block_;
  std::array<std::uint32_t, 4> buf_{};
  unsigned pos_ = 4;
};

}  // namespace sluice
