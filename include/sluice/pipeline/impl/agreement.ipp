// The bodies of sluice/pipeline/detail/agreement.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <chrono>
#include <random>

#include <sluice/pipeline/detail/agreement.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL std::uint64_t draw_run_id(std::uint64_t config) {
  std::random_device rd;
  return serial::hash_of(std::uint64_t{rd()} << 32 | rd(), std::chrono::steady_clock::now().time_since_epoch().count(),
                         config);
}

SLUICE_DECL void throw_verdict(std::span<std::byte const> verdict) {
  std::string const text(reinterpret_cast<char const*>(verdict.data()) + 1, verdict.size() - 1);
  throw_error(static_cast<errc>(static_cast<int>(verdict[0])), "{}", text);
}

SLUICE_DECL float batch_weight(std::span<std::size_t const> batches, int rank, int world) {
  require(batches.size() == static_cast<std::size_t>(world), errc::size_mismatch,
          "pipeline: {} batch sizes for {} ranks; give one per rank", batches.size(), world);
  double sum = 0;
  for (std::size_t r = 0; r < batches.size(); ++r) {
    require(batches[r] > 0, errc::invalid_argument,
            "pipeline: rank {}'s batch size is 0; every rank trains on "
            "at least one sample per step",
            r);
    sum += static_cast<double>(batches[r]);
  }
  return static_cast<float>(static_cast<double>(batches[static_cast<std::size_t>(rank)]) * world / sum);
}

SLUICE_DECL std::uint64_t batches_id(std::span<std::size_t const> batches) {
  serial::hasher h;
  h(batches.size());
  for (std::size_t b : batches) h(b);
  return h.value();
}

}  // namespace sluice::detail::pipeline
