// The bodies of sluice/pipeline/checkpoint.hpp: header-only, included at its end; with sluice::kernels, compiled there
// once.
#pragma once

#include <sluice/pipeline/checkpoint.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void check_step_room(std::uint64_t steps) {
  require(steps < max_steps, errc::invalid_argument,
          "pipeline: step {} is past the last step a pipeline runs ({}); start a new run", steps, max_steps);
}

SLUICE_DECL void put_floats(std::vector<std::byte>& out, std::span<float const> v) {
  serial::put<std::uint64_t>(out, v.size());
  serial::append(out, std::as_bytes(v));
}

SLUICE_DECL void put_blob(std::vector<std::byte>& out, std::span<std::byte const> blob) {
  serial::put<std::uint64_t>(out, blob.size());
  serial::append(out, blob);
}

SLUICE_DECL std::vector<std::byte> write_checkpoint(
    checkpoint_shape const& shape, std::uint64_t run, std::uint64_t steps, std::uint64_t published,
    std::span<float const> master, std::span<std::span<float const> const> user,
    std::span<std::span<float const> const> kept, std::span<std::byte const> feedback,
    std::span<std::vector<std::byte> const> optimizer, std::span<bucket_sum const* const> pending) {
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

SLUICE_DECL bool get_floats(serial::reader& r, std::vector<float>& v, std::size_t n) {
  std::uint64_t stored = 0;
  std::span<std::byte const> raw;
  if (!r.get(stored) || stored != n || n > r.left() / sizeof(float) || !r.take(n * sizeof(float), raw)) return false;
  v.resize(n);
  std::memcpy(v.data(), raw.data(), raw.size());
  return true;
}

SLUICE_DECL bool get_blob(serial::reader& r, std::span<std::byte const>& blob) {
  std::uint64_t n = 0;
  return r.get(n) && n <= r.left() && r.take(static_cast<std::size_t>(n), blob);
}

SLUICE_DECL checkpoint read_checkpoint(std::span<std::byte const> bytes, checkpoint_shape const& shape,
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

SLUICE_DECL void load_pending(bucket_sum& sum, checkpoint_bucket&& saved, std::size_t elements) {
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
