// encode_context: the per-call inputs of a codec's encode and decode besides the data (seed,
// rank, step, tensor, shape). Frames carry step and tensor; random codecs key their streams on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/random.hpp>

namespace sluice {

/// Everything an encode or decode call may need besides the data. Built by the caller per
/// (tensor, step); cheap to copy. Random codecs draw from stream_key{seed, rank, step, tensor};
/// codecs with shared randomness use key().shared() so that every rank draws the same numbers.
struct encode_context {
  std::uint64_t seed = 0;                ///< job-wide seed
  std::uint32_t rank = 0;                ///< this rank
  std::uint64_t step = 0;                ///< training step, written to the frame header
  std::uint64_t tensor = 0;              ///< tensor or bucket id, written to the frame header
  std::span<std::size_t const> shape{};  ///< logical shape (low-rank codecs); empty means 1-D
  bool finite = false;  ///< the caller checked the input: no NaN/Inf (feedback policies skip their own scan)
  /// The caller stops for good when encode throws errc::non_finite and never uses the feedback
  /// state again (a pipeline): non_finite_policy::throw_error may then find the NaN/Inf in the
  /// encode's own compensation pass, after the state changed, instead of in a scan before it.
  bool fail_stop = false;

  /// The random-stream key for this (seed, rank, step, tensor).
  [[nodiscard]] constexpr stream_key key() const noexcept {
    return {seed, rank, static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(tensor)};
  }
};

}  // namespace sluice
