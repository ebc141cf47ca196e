// Helpers shared by the optimizer tests: seeded random tensors and sparse gradients.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "support/optim_reference.hpp"

namespace sluice::test {

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<double> widen(std::vector<float> const& v) { return {v.begin(), v.end()}; }

/// Sorted distinct indices in [0, extent), each kept with probability `density`.
inline std::vector<std::uint32_t> random_indices(std::size_t extent, double density, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::uint32_t> idx;
  for (std::size_t i = 0; i < extent; ++i)
    if (u(rng) < density) idx.push_back(static_cast<std::uint32_t>(i));
  return idx;
}

/// A sparse gradient over element indices, with its reference entries and its dense expansion.
struct sparse_grad {
  std::vector<std::uint32_t> indices{};
  std::vector<float> values{};
  std::vector<ref_entry> entries{};
  std::vector<float> dense{};
};

/// Element indices at `density`; `blocks` > 1 draws whole blocks of that many elements instead and
/// expands them (the partial last block is clipped to extent).
inline sparse_grad make_sparse(std::size_t extent, double density, std::uint32_t seed, std::size_t block = 1) {
  sparse_grad s;
  s.dense.assign(extent, 0.0f);
  std::size_t const blocks = (extent + block - 1) / block;
  s.indices = random_indices(blocks, density, seed);
  auto const vals = random_floats(s.indices.size() * block, seed + 7);
  s.values = vals;
  for (std::size_t j = 0; j < s.indices.size(); ++j)
    for (std::size_t e = 0; e < block; ++e) {
      std::size_t const i = static_cast<std::size_t>(s.indices[j]) * block + e;
      if (i >= extent) break;
      s.entries.push_back({i, static_cast<double>(vals[j * block + e])});
      s.dense[i] = vals[j * block + e];
    }
  return s;
}

/// The element-index form of a block sparse gradient.
inline sparse_grad to_elements(sparse_grad const& b) {
  sparse_grad e;
  e.dense = b.dense;
  e.entries = b.entries;
  for (auto const& x : b.entries) {
    e.indices.push_back(static_cast<std::uint32_t>(x.index));
    e.values.push_back(static_cast<float>(x.grad));
  }
  return e;
}

}  // namespace sluice::test
