// Shared by the CUDA tests (g++ and nvcc): seeded normal data, a bit-for-bit comparison of float
// arrays, and the CPU reference of error feedback around the max-min codec (compensate, encode,
// decode, subtract). No `using namespace sluice`: .cu files must not make `cuda` ambiguous.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <sluice/compress/maxmin_quantize.hpp>

namespace sluice::test {

inline std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline void same_bits(std::vector<float> const& a, std::vector<float> const& b, char const* what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) FAIL(what << ": element " << i << ": " << a[i] << " vs " << b[i]);
}

/// c - d as sluice::residual stores it after a sparse frame (d its decode), when a compensated
/// value c was NaN or Inf: every non-finite entry +0 (with all of c finite, it keeps c - d as is).
inline std::vector<float> kept_residual(std::vector<float> const& c, std::vector<float> const& d) {
  std::vector<float> r(c.size());
  bool any = false;
  for (std::size_t i = 0; i < c.size(); ++i) any = any || c[i] - c[i] != 0.0f;
  for (std::size_t i = 0; i < c.size(); ++i) {
    float const x = c[i] - d[i];
    r[i] = !any || x - x == 0.0f ? x : 0.0f;
  }
  return r;
}

/// The frame and residual of residual feedback around the CPU max-min codec: c = g + e0,
/// frame = encode(c), residual = c - decode(frame), +0 where that is NaN or Inf (sluice::residual
/// never stores a non-finite value).
struct feedback_reference {
  std::vector<std::byte> frame;
  std::vector<float> residual;
};
inline feedback_reference maxmin_feedback(maxmin_quantize const& c, encode_context const& ctx,
                                          std::vector<float> const& g, std::vector<float> const& e0) {
  std::size_t const n = g.size();
  std::vector<float> cv(n), d(n);
  feedback_reference r{std::vector<std::byte>(c.max_encoded_bytes(n)), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) cv[i] = g[i] + e0[i];
  codec_workspace<maxmin_quantize, float> ws;
  r.frame.resize(c.encode(std::span<float const>(cv), ctx, ws, r.frame));
  sluice::decode(c, std::span<std::byte const>(r.frame), ctx, ws, std::span<float>(d));
  for (std::size_t i = 0; i < n; ++i) {
    float const x = cv[i] - d[i];
    r.residual[i] = x - x == 0.0f ? x : 0.0f;
  }
  return r;
}

}  // namespace sluice::test
