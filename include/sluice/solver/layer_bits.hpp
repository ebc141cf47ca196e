// Per-layer quantization widths under an error budget (CGX's layer-wise bits, Middleware'22): a
// dynamic program over layers that picks each layer's max-min bit width so that the total
// expected squared quantization error stays within a budget and the encoded bytes are minimal.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// What the DP needs to know about one layer's gradient.
struct layer_stat {
  std::size_t elements = 0;  ///< n, > 0
  double range = 0;          ///< typical max - min within a bucket, >= 0 (measured, e.g. an EWMA)
};

/// Expected squared error of round-to-nearest max-min quantization of a layer at `bits`:
/// n * unit^2 / 12 with unit = range / (2^bits - 1) (uniform rounding error).
inline double quantization_error(layer_stat const& l, unsigned bits) noexcept {
  double const unit = l.range / (std::ldexp(1.0, static_cast<int>(bits)) - 1);
  return static_cast<double>(l.elements) * unit * unit / 12;
}

/// The DP's answer: bits per layer, the encoded bytes and the expected error they give.
struct layer_bits_plan {
  std::vector<unsigned> bits{};
  std::size_t bytes = 0;
  double error = 0;
};

/// Minimises sum of maxmin_quantize{bits_l, bucket}.max_encoded_bytes(n_l) subject to
/// sum quantization_error(l, bits_l) <= budget, over `choices` (each in [1, 8]). Errors are
/// rounded up to multiples of budget / resolution, so every answer is within budget and optimal
/// over the rounded errors (the DP is exact over them). O(layers x choices x resolution).
/// errc::invalid_argument for bad inputs; errc::unsupported when even the widest choice exceeds
/// the budget.
inline layer_bits_plan layer_bits(std::span<layer_stat const> layers, std::span<unsigned const> choices, double budget,
                                  std::size_t bucket = 1024, std::size_t resolution = 1000) {
  require(!layers.empty() && !choices.empty(), errc::invalid_argument, "layer_bits: no layers or no bit choices");
  require(std::isfinite(budget) && budget >= 0, errc::invalid_argument, "layer_bits: budget {} must be >= 0", budget);
  require(resolution >= 1 && resolution <= 1000000, errc::invalid_argument,
          "layer_bits: resolution {} is outside [1, 1e6]", resolution);
  for (unsigned b : choices) maxmin_quantize{.bits = b, .bucket = bucket}.validate();
  for (std::size_t l = 0; l < layers.size(); ++l)
    require(layers[l].elements > 0 && std::isfinite(layers[l].range) && layers[l].range >= 0, errc::invalid_argument,
            "layer_bits: layer {} needs elements > 0 and a finite range >= 0", l);
  std::size_t const g = resolution;
  double const unit = budget > 0 ? budget / static_cast<double>(g) : 0;
  auto const units = [&](double e) -> std::size_t {  // rounded up; g + 1 means over budget
    if (e <= 0) return 0;
    if (unit == 0) return g + 1;
    double const u = std::ceil(e / unit - 1e-12);
    return u > static_cast<double>(g) ? g + 1 : static_cast<std::size_t>(u);
  };
  constexpr std::size_t inf = std::numeric_limits<std::size_t>::max();
  std::size_t const L = layers.size();
  // best[l][u]: fewest bytes for layers [0, l) using exactly u error units; choice[l][u] the bits index.
  std::vector<std::size_t> best((L + 1) * (g + 1), inf);
  std::vector<std::size_t> pick(L * (g + 1), 0);
  best[0] = 0;
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t c = 0; c < choices.size(); ++c) {
      std::size_t const du = units(quantization_error(layers[l], choices[c]));
      if (du > g) continue;
      std::size_t const bytes =
          maxmin_quantize{.bits = choices[c], .bucket = bucket}.max_encoded_bytes(layers[l].elements);
      for (std::size_t u = 0; u + du <= g; ++u) {
        std::size_t const from = best[l * (g + 1) + u];
        if (from == inf) continue;
        std::size_t& to = best[(l + 1) * (g + 1) + u + du];
        if (from + bytes < to) {
          to = from + bytes;
          pick[l * (g + 1) + u + du] = c;
        }
      }
    }
  std::size_t end = g + 1;
  for (std::size_t u = 0; u <= g; ++u)
    if (best[L * (g + 1) + u] != inf && (end > g || best[L * (g + 1) + u] < best[L * (g + 1) + end])) end = u;
  require(end <= g, errc::unsupported,
          "layer_bits: no bit widths keep the expected error within the budget {}; raise the budget or allow more bits",
          budget);
  layer_bits_plan r;
  r.bits.resize(L);
  r.bytes = best[L * (g + 1) + end];
  for (std::size_t l = L, u = end; l-- > 0;) {
    unsigned const b = choices[pick[l * (g + 1) + u]];
    r.bits[l] = b;
    r.error += quantization_error(layers[l], b);
    u -= units(quantization_error(layers[l], b));
  }
  return r;
}

}  // namespace sluice
