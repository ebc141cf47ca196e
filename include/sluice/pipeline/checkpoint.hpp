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
inline void check_step_room(std::uint64_t steps) {
  require(steps < max_steps, errc::invalid_argument,
          "pipeline: step {} is past the last step a pipeline runs ({}); start a new run", steps, max_steps);
}

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

inline void put_floats(std::vector<std::byte>& out, std::span<float const> v) {
  serial::put<std::uint64_t>(out, v.size());
  serial::append(out, std::as_bytes(v));
}
inline void put_blob(std::vector<std::byte>& out, std::span<std::byte const> blob) {
  serial::put<std::uint64_t>(out, blob.size());
  serial::append(out, blob);
}

/// The record of a pipeline between steps. `pending[b]` is bucket b's sum when it was exchanged
/// and not applied, else null.
inline std::vector<std::byte> write_checkpoint(checkpoint_shape const& shape, std::uint64_t run, std::uint64_t steps,
                                               std::uint64_t published, std::span<float const> master,
                                               std::span<std::span<float const> const> user,
                                               std::span<std::span<float const> const> kept,
                                               std::span<std::byte const> feedback,
                                               std::span<std::vector<std::byte> const> optimizer,
                                               std::span<bucket_sum const* const> pending) {
  std::vector<std::byte> out;
  serial::start_record(out, checkpoint_magic, checkpoint_version);
  serial::put<std::uint16_t>(out, 0);  // flags, reserved
  serial::put<std::uint64_t>(out, shape.config);
  serial::put<std::uint64_t>(out, shape.layout);
  serial::put<std::uint64_t>(out, run);
  serial::put<std::uint64_t>(out, steps);
  serial::put<std::uint64_t>(out, published);
  put_floats(out, master);
  for (auto const& u : user) put_floats(out, std::span<float const>(u));
  for (auto const& g : kept) put_floats(out, g);
  put_blob(out, feedback);
  for (std::size_t b = 0; b < optimizer.size(); ++b) {
    put_blob(out, optimizer[b]);
    serial::put<std::uint8_t>(out, pending[b] != nullptr ? 1 : 0);
    if (pending[b] == nullptr) continue;
    bucket_sum const& s = *pending[b];
    if (s.sparse) {
      serial::put<std::uint64_t>(out, s.sparse_values.block_size());
      serial::put<std::uint64_t>(out, s.sparse_values.nnz());
      serial::append(out, std::as_bytes(s.sparse_values.indices()));
      put_floats(out, std::span<float const>(s.sparse_values.values()));
    } else {
      put_floats(out, std::span<float const>(s.dense));
    }
  }
  serial::seal(out);
  return out;
}

inline bool get_floats(serial::reader& r, std::vector<float>& v, std::size_t n) {
  std::uint64_t stored = 0;
  std::span<std::byte const> raw;
  if (!r.get(stored) || stored != n || n > r.left() / sizeof(float) || !r.take(n * sizeof(float), raw)) return false;
  v.resize(n);
  std::memcpy(v.data(), raw.data(), raw.size());
  return true;
}
inline bool get_blob(serial::reader& r, std::span<std::byte const>& blob) {
  std::uint64_t n = 0;
  return r.get(n) && n <= r.left() && r.take(static_cast<std::size_t>(n), blob);
}

/// Parses and checks a checkpoint against `shape`: errc::malformed_message for damaged bytes or
/// values the writer cannot produce, errc::size_mismatch for another configuration or layout.
inline checkpoint read_checkpoint(std::span<std::byte const> bytes, checkpoint_shape const& shape,
                                  std::string_view describe) {
  serial::reader r = serial::open_record(bytes, checkpoint_magic, checkpoint_version, "pipeline checkpoint");
  checkpoint c;
  std::uint16_t flags = 0;
  std::uint64_t cfg = 0, fp = 0;
  bool ok = r.get(flags) && r.get(cfg) && r.get(fp) && r.get(c.run) && r.get(c.steps) && r.get(c.published);
  require(ok, errc::malformed_message, "pipeline checkpoint: truncated header");
  require(flags == 0, errc::malformed_message, "pipeline checkpoint: reserved flags 0x{:04x} are set", flags);
  require(cfg == shape.config, errc::size_mismatch,
          "pipeline checkpoint: saved by a pipeline with other policies, options or world size (this one: {})",
          describe);
  require(fp == shape.layout, errc::size_mismatch,
          "pipeline checkpoint: saved for another layout (fingerprint {:016x}, this layout {:016x})", fp, shape.layout);
  require(c.steps <= max_steps, errc::malformed_message,
          "pipeline checkpoint: {} steps is more than a pipeline runs ({})", c.steps, max_steps);
  require(c.published <= c.steps && c.steps - c.published <= shape.staleness, errc::malformed_message,
          "pipeline checkpoint: {} updates published of {} steps; at staleness {} a pipeline publishes at least {}",
          c.published, c.steps, shape.staleness, c.steps > shape.staleness ? c.steps - shape.staleness : 0);
  // Between steps the apply thread has applied min(steps, published + 1) updates of every bucket,
  // so a sum is pending in every bucket, or in none, as steps - published >= 2.
  bool const expect_pending = c.steps - c.published >= 2;
  ok = get_floats(r, c.master, shape.master);
  c.user.resize(shape.user.size());
  for (std::size_t i = 0; ok && i < shape.user.size(); ++i) ok = get_floats(r, c.user[i], shape.user[i]);
  c.kept.resize(ok ? shape.kept(c.steps) : 0);
  for (std::size_t k = 0; ok && k < c.kept.size(); ++k) ok = get_floats(r, c.kept[k], shape.master);
  ok = ok && get_blob(r, c.feedback);
  require(ok, errc::malformed_message, "pipeline checkpoint: truncated parameters");
  std::size_t const nb = shape.bucket_elements.size();
  c.buckets.resize(nb);
  for (std::size_t b = 0; b < nb; ++b) {
    auto& bk = c.buckets[b];
    std::size_t const n = shape.bucket_elements[b];
    std::uint8_t pending = 0;
    require(get_blob(r, bk.optimizer) && r.get(pending) && pending <= 1, errc::malformed_message,
            "pipeline checkpoint: bucket {} is truncated", b);
    bk.pending = pending == 1;
    require(bk.pending == expect_pending, errc::malformed_message,
            "pipeline checkpoint: bucket {} {} a pending sum, but {} steps with {} published leave {}", b,
            bk.pending ? "has" : "lacks", c.steps, c.published, expect_pending ? "one in every bucket" : "none");
    if (!bk.pending) continue;
    if (shape.bucket_sparse[b] != 0) {
      std::uint64_t block = 0, nnz = 0;
      require(r.get(block) && r.get(nnz) && block >= 1 && block <= max_block &&
                  nnz <= n / block + (n % block != 0 ? 1 : 0),  // a partial last block is padded
              errc::malformed_message, "pipeline checkpoint: bucket {}: bad pending sparse sum", b);
      bk.block = static_cast<std::size_t>(block);
      std::span<std::byte const> raw;
      require(r.take(static_cast<std::size_t>(nnz) * sizeof(std::uint32_t), raw) &&
                  get_floats(r, bk.values, static_cast<std::size_t>(nnz * block)),
              errc::malformed_message, "pipeline checkpoint: bucket {}: truncated pending sparse sum", b);
      bk.indices.resize(static_cast<std::size_t>(nnz));
      std::memcpy(bk.indices.data(), raw.data(), raw.size());
      try {
        sparse_view<float const>{bk.indices, bk.values, n, bk.block}.validate("pipeline checkpoint");
      } catch (error const& e) {  // bytes that no writer produced: the checkpoint's fault, not the caller's
        throw_error(errc::malformed_message, "pipeline checkpoint: bucket {}: {}", b, e.what());
      }
    } else {
      require(get_floats(r, bk.values, n), errc::malformed_message,
              "pipeline checkpoint: bucket {}: truncated pending sum", b);
    }
  }
  require(r.left() == 0, errc::malformed_message, "pipeline checkpoint: {} trailing bytes", r.left());
  return c;
}

/// Puts a checked pending sum back where the apply thread takes it.
inline void load_pending(bucket_sum& sum, checkpoint_bucket&& saved, std::size_t elements) {
  if (!sum.sparse) {
    sum.dense = std::move(saved.values);
    return;
  }
  sum.sparse_values.reset(elements, saved.block);
  sum.sparse_values.resize_for_overwrite(saved.indices.size());
  std::copy(saved.indices.begin(), saved.indices.end(), sum.sparse_values.indices().begin());
  std::copy(saved.values.begin(), saved.values.end(), sum.sparse_values.values().begin());
}

}  // namespace sluice::detail::pipeline
