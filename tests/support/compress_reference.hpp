// Plain reference implementations the codec tests compare against: sort-based top-k and block
// top-k, and small helpers to build inputs and round-trip frames.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <sluice/core/element.hpp>

namespace sluice::test {

/// Ranking key of the documented rule: the bit pattern of |x| as float (NaN above +Inf).
template <class T>
std::uint32_t ref_key(T x) {
  return std::bit_cast<std::uint32_t>(static_cast<float>(x)) & 0x7fffffffu;
}

/// Reference top-k: std::nth_element by (key desc, index asc), then sort of the k indices.
template <class T>
std::vector<std::uint32_t> reference_top_k(std::vector<T> const& x, std::size_t k) {
  std::vector<std::uint32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0u);
  auto better = [&](std::uint32_t a, std::uint32_t b) {
    auto const ka = ref_key(x[a]), kb = ref_key(x[b]);
    return ka != kb ? ka > kb : a < b;
  };
  if (k < idx.size()) {
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), better);
    idx.resize(k);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

/// Block score by the documented order: four lane partial sums (lane = offset mod 4, each summed
/// left to right), combined as (l0 + l1) + (l2 + l3). L1 sums |x|, L2 sums x^2.
template <class T>
float reference_block_score(T const* x, std::size_t len, bool l2) {
  float lane[4] = {0, 0, 0, 0};
  for (std::size_t e = 0; e < len; ++e) {
    float const v = static_cast<float>(x[e]);
    lane[e % 4] += l2 ? v * v : std::abs(v);
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

/// Reference block top-k: the `blocks` best block scores (ties to the lower block), sorted.
template <class T>
std::vector<std::uint32_t> reference_block_top_k(std::vector<T> const& x, std::size_t block, std::size_t blocks,
                                                 bool l2) {
  std::size_t const nb = (x.size() + block - 1) / block;
  std::vector<float> score(nb);
  for (std::size_t b = 0; b < nb; ++b)
    score[b] = reference_block_score(x.data() + b * block, std::min(block, x.size() - b * block), l2);
  return reference_top_k(score, blocks);
}

/// n values: Gaussian with a few scales (so bucket ranges differ), deterministic in `seed`.
template <class T>
std::vector<T> gaussian(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T(d(rng) * scale * (1.0f + static_cast<float>((i / 4096) % 7)));
  return v;
}

}  // namespace sluice::test
