// Gradient-like inputs shared by the compress benchmarks: Gaussian values whose scale changes
// every 64 Ki elements (as across the layers of a bucket), generated once per size.
#pragma once

#include <cstddef>
#include <map>
#include <random>
#include <vector>

#include <sluice/core/memory.hpp>
#include <sluice/core/parallel.hpp>

namespace sluice::bench {

/// Storage of benchmark tensors: as a tuned trainer allocates them (sluice::line_allocator).
using tensor = std::vector<float, sluice::line_allocator<float>>;

/// n gradient-like floats, cached per n for the life of the process.
inline tensor& gradient(std::size_t n) {
  static std::map<std::size_t, tensor> cache;
  auto [it, inserted] = cache.try_emplace(n);
  if (inserted) {
    it->second.resize(n);
    std::size_t const chunk = std::size_t{1} << 16;
    sluice::parallel_chunks((n + chunk - 1) / chunk, 1, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t c = b; c < e; ++c) {
        std::mt19937 rng(static_cast<unsigned>(c));
        std::normal_distribution<float> d(0.0f, 1e-3f * static_cast<float>(1 + c % 13));
        for (std::size_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) it->second[i] = d(rng);
      }
    });
  }
  return it->second;
}

}  // namespace sluice::bench
