// The pipeline's checkpoint record, on core/serial.hpp's sealed record: the configuration's and
// the layout's identity, the run id and step counters, master and published parameters, the
// error-feedback state, each bucket's optimizer state and the sums exchanged but not yet applied.
// The reader checks every value against what the writer can produce before anything changes.
// Independent of the pipeline's policies, so it is compiled once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <sluice/config.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/pipeline/exchange.hpp>

namespace sluice::detail::pipeline {

inline constexpr std::uint32_t checkpoint_magic = 0x50504c53;  // "SLPP"
inline constexpr std::uint16_t checkpoint_version = 2;
/// The largest block of a block-sparse sum (block_top_k's largest block).
inline constexpr std::uint64_t max_block = 65536;
/// Steps a pipeline runs at most: frames and random streams carry the step in 32 bits.
inline constexpr std::uint64_t max_steps = (std::uint64_t{1} << 32) - 1;

/// A new step may begin after `steps` steps: below max_steps, what a checkpoint may hold.
SLUICE_DECL void check_step_room(std::uint64_t steps);

/// What a checkpoint must match: the attached pipeline's identity and sizes.
struct checkpoint_shape {
  std::uint64_t config = 0;  ///< policies, options and world size (serial::hasher)
  std::uint64_t layout = 0;  ///< layout::fingerprint()
  unsigned staleness = 0;
  std::size_t master = 0;           ///< fp32 elements of all buckets
  std::vector<std::size_t> user{};  ///< elements of each tensor
  std::vector<std::size_t> bucket_elements{};
  std::vector<std::uint8_t> bucket_sparse{};  ///< 1: the bucket's pending sum is sparse
  bool keeps_gradients = false;               ///< compensation_method::local_step: in-flight gradients saved

  /// Gradients of in-flight steps a checkpoint after `steps` steps holds (local_step: steps
  /// max(0, steps + 1 - staleness) .. steps - 1).
  [[nodiscard]] std::size_t kept(std::uint64_t steps) const noexcept {
    if (!keeps_gradients) return 0;
    std::uint64_t const from = steps + 1 > staleness ? steps + 1 - staleness : 0;
    return static_cast<std::size_t>(steps - from);
  }
};

/// A bucket's part of a checkpoint.
struct checkpoint_bucket {
  std::span<std::byte const> optimizer{};  ///< optimizer_state::save() bytes
  bool pending = false;                    ///< a sum exchanged but not yet applied follows
  std::size_t block = 1;
  std::vector<std::uint32_t> indices{};  ///< sparse pending sum
  std::vector<float> values{};           ///< sparse: nnz * block values; dense: the bucket's elements
};

/// A parsed checkpoint; its spans view the bytes it was read from.
struct checkpoint {
  std::uint64_t run = 0, steps = 0, published = 0;
  std::vector<float> master{};
  std::vector<std::vector<float>> user{};
  std::vector<std::vector<float>> kept{};  ///< in-flight gradients, oldest first (local_step)
  std::span<std::byte const> feedback{};
  std::vector<checkpoint_bucket> buckets{};
};

SLUICE_DECL void put_floats(std::vector<std::byte>& out, std::span<float const> v);
SLUICE_DECL void put_blob(std::vector<std::byte>& out, std::span<std::byte const> blob);

/// The record of a pipeline between steps. `pending[b]` is bucket b's sum when it was exchanged
/// and not applied, else null.
SLUICE_DECL std::vector<std::byte> write_checkpoint(
    checkpoint_shape const& shape, std::uint64_t run, std::uint64_t steps, std::uint64_t published,
    std::span<float const> master, std::span<std::span<float const> const> user,
    std::span<std::span<float const> const> kept, std::span<std::byte const> feedback,
    std::span<std::vector<std::byte> const> optimizer, std::span<bucket_sum const* const> pending);

SLUICE_DECL bool get_floats(serial::reader& r, std::vector<float>& v, std::size_t n);
SLUICE_DECL bool get_blob(serial::reader& r, std::span<std::byte const>& blob);

/// Parses and checks a checkpoint against `shape`: errc::malformed_message for damaged bytes or
/// values the writer cannot produce, errc::size_mismatch for another configuration or layout.
SLUICE_DECL checkpoint read_checkpoint(std::span<std::byte const> bytes, checkpoint_shape const& shape,
                                       std::string_view describe);

/// Puts a checked pending sum back where the apply thread takes it.
SLUICE_DECL void load_pending(bucket_sum& sum, checkpoint_bucket&& saved, std::size_t elements);

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/checkpoint.ipp>
#endif
