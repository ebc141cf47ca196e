// Shared by the pipeline tests: a small model with compressed and bypassed tensors, options with
// small buckets, deterministic parameters and gradients that depend on rank, step and parameters.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

namespace sluice::test {

inline constexpr std::uint64_t seed = 11;

// Two compressed matrices, a bias and a small matrix that bypass compression; small caps so the
// plan has several buckets of both kinds.
inline layout model() {
  layout l;
  l.add("fc1.weight", {48, 100});
  l.add("fc1.bias", {48});
  l.add("fc2.weight", {40, 48});
  l.add("fc3.weight", {10, 40});
  l.add("fc3.bias", {10});
  return l;
}
inline pipeline_options small_buckets(unsigned staleness = 0) {
  return {.staleness = staleness,
          .bucket_bytes = 12 << 10,
          .first_bucket_bytes = 4 << 10,
          .seed = seed,
          .timeout = std::chrono::milliseconds(20'000)};
}

struct model_params {
  std::vector<std::vector<float>> tensors;
  explicit model_params(layout const& l) {
    random_stream const rs({.seed = 3});
    std::uint64_t k = 0;
    for (auto const& t : l.tensors()) {
      auto& v = tensors.emplace_back(t.elements());
      for (float& x : v) x = rs.uniform(k++) - 0.5f;
    }
  }
  std::vector<std::span<float>> spans() {
    std::vector<std::span<float>> s;
    for (auto& v : tensors) s.emplace_back(v);
    return s;
  }
  friend bool operator==(model_params const&, model_params const&) = default;
};

// The gradient a rank computes at `step` from parameters `p`: depends on the parameters (so
// staleness changes the trajectory) and on the rank (so ranks disagree before aggregation).
inline void gradients(int rank, std::uint64_t step, model_params const& p, std::vector<std::vector<float>>& g) {
  random_stream const rs(
      {.seed = 5, .rank = static_cast<std::uint32_t>(rank), .step = static_cast<std::uint32_t>(step)});
  g.resize(p.tensors.size());
  std::uint64_t k = 0;
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    g[i].resize(p.tensors[i].size());
    for (std::size_t j = 0; j < g[i].size(); ++j) g[i][j] = 0.5f * p.tensors[i][j] + (rs.uniform(k++) - 0.5f);
  }
}
inline std::vector<std::span<float const>> views(std::vector<std::vector<float>> const& g) {
  std::vector<std::span<float const>> s;
  for (auto const& v : g) s.emplace_back(v);
  return s;
}

}  // namespace sluice::test
