// Statistical efficiency: how many steps a configuration needs to reach the target accuracy, so
// that the solver minimises time-to-accuracy rather than step time and never buys speed with
// divergence. Supplied by the user as curves; the defaults are conservative (docs/solver.md).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <sluice/core/error.hpp>

namespace sluice {

/// steps(B, d, s) = reference_steps * batch(B) * compression(d) * staleness[s], where
///  - batch(B) = (1 + noise_scale / B) / (1 + noise_scale / reference_batch): the gradient noise
///    scale law of McCandlish et al. 2018 (steps S = S_min (1 + B_noise / B)), normalised to 1 at
///    the reference batch: doubling B halves the steps only while B << B_noise;
///  - compression(d): the step multiplier at density d (codec density(): ratio, bits / 32, 1 for
///    dense), linear in log10(d) between the points of `compression_curve`, 1 above its densest
///    point and +infinity (never chosen) below its sparsest point;
///  - staleness[s]: the step multiplier of s-step-stale gradients (s in [0, 2]).
/// The defaults are conservative: top-k 1% costs 25% more steps, 0.1% doubles them, anything
/// sparser is refused; staleness 1 costs 5%, 2 costs 15%. Replace them with your model's curve.
struct efficiency_model {
  double reference_steps = 10000;  ///< steps to target with dense gradients, s = 0, reference_batch
  double reference_batch = 256;    ///< global batch (samples) of reference_steps, > 0
  double noise_scale = 1024;       ///< B_noise in samples, >= 0 (0: steps independent of B)
  /// (density, step multiplier) points, densities in (0, 1], multipliers >= 1.
  std::vector<std::pair<double, double>> compression_curve{{1.0, 1.0}, {0.1, 1.05}, {0.01, 1.25}, {0.001, 2.0}};
  std::array<double, 3> staleness{1.0, 1.05, 1.15};  ///< step multiplier for s = 0, 1, 2, each >= 1

  /// errc::invalid_argument for a non-positive reference, an empty or unsorted curve, or a
  /// multiplier below 1.
  void validate() const {
    require(reference_steps > 0 && std::isfinite(reference_steps), errc::invalid_argument,
            "efficiency_model: reference_steps {} must be finite and > 0", reference_steps);
    require(reference_batch > 0 && std::isfinite(reference_batch), errc::invalid_argument,
            "efficiency_model: reference_batch {} must be finite and > 0", reference_batch);
    require(noise_scale >= 0 && std::isfinite(noise_scale), errc::invalid_argument,
            "efficiency_model: noise_scale {} must be finite and >= 0", noise_scale);
    require(!compression_curve.empty(), errc::invalid_argument,
            "efficiency_model: the compression curve is empty; give at least the point (1, 1)");
    for (std::size_t i = 0; i < compression_curve.size(); ++i) {
      auto const [d, m] = compression_curve[i];
      require(d > 0 && d <= 1 && m >= 1 && std::isfinite(m), errc::invalid_argument,
              "efficiency_model: curve point {} is ({}, {}); densities are in (0, 1], multipliers >= 1", i, d, m);
      if (i > 0)
        require(d < compression_curve[i - 1].first, errc::invalid_argument,
                "efficiency_model: curve densities must decrease strictly (point {} has {} after {})", i, d,
                compression_curve[i - 1].first);
    }
    for (std::size_t s = 0; s < staleness.size(); ++s)
      require(staleness[s] >= 1 && std::isfinite(staleness[s]), errc::invalid_argument,
              "efficiency_model: staleness multiplier {} for s = {} must be >= 1", staleness[s], s);
  }

  /// Step multiplier of the global batch (1 at reference_batch).
  [[nodiscard]] double batch_factor(std::size_t global_batch) const noexcept {
    double const b = static_cast<double>(std::max<std::size_t>(global_batch, 1));
    return (1 + noise_scale / b) / (1 + noise_scale / reference_batch);
  }

  /// Step multiplier of a codec density; +infinity below the sparsest point of the curve.
  [[nodiscard]] double compression_factor(double d) const noexcept {
    auto const& c = compression_curve;
    if (d >= c.front().first) return c.front().second;
    for (std::size_t i = 1; i < c.size(); ++i)
      if (d >= c[i].first) {
        double const x0 = std::log10(c[i - 1].first), x1 = std::log10(c[i].first);
        double const t = (std::log10(d) - x0) / (x1 - x0);
        return c[i - 1].second + t * (c[i].second - c[i - 1].second);
      }
    // A tiny tolerance so that a codec exactly at the last point is not refused by rounding.
    if (d >= c.back().first * (1 - 1e-12)) return c.back().second;
    return std::numeric_limits<double>::infinity();
  }

  /// Steps to the target accuracy; +infinity when the density is refused or s is outside [0, 2].
  [[nodiscard]] double steps(std::size_t global_batch, double d, int s) const noexcept {
    if (s < 0 || s > 2) return std::numeric_limits<double>::infinity();
    return reference_steps * batch_factor(global_batch) * compression_factor(d) *
           staleness[static_cast<std::size_t>(s)];
  }
};

/// One measured run: the steps a configuration took to reach the target accuracy (same model,
/// data, optimizer and target as the other runs of a fit).
struct efficiency_run {
  double density = 1;            ///< codec density (codec_strength: 1 dense, the ratio, bits / 32)
  int staleness = 0;             ///< pipeline staleness, 0..2 (with the compensation the run used)
  std::size_t global_batch = 0;  ///< samples per step over all workers, > 0
  double steps = 0;              ///< steps to the target, finite and > 0
};

/// The efficiency model of measured runs, so that the solver trades step time against the steps a
/// configuration really costs on this model. `base` gives the noise scale (steps are normalised
/// to base.reference_batch by the batch law first) and every part the runs do not measure:
///  - reference_steps: the median of the dense staleness-0 runs (required);
///  - staleness[s]: the median of the dense runs at s over reference_steps, at least 1 (the
///    base's where no dense run has that staleness);
///  - compression_curve: (1, 1), then one point per measured density d < 1, its multiplier the
///    median over its runs of steps / (reference_steps x staleness[s]), at least 1. Densities
///    sparser than the sparsest run are refused (+infinity steps): nothing beyond what was measured
///    is recommended.
/// errc::invalid_argument for a run outside these ranges or without a dense staleness-0 run.
[[nodiscard]] inline efficiency_model fit_efficiency(std::span<efficiency_run const> runs,
                                                     efficiency_model const& base = {}) {
  base.validate();
  efficiency_model m = base;
  auto const median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    std::size_t const n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto const& r = runs[i];
    require(r.density > 0 && r.density <= 1 && r.staleness >= 0 && r.staleness <= 2 && r.global_batch > 0 &&
                r.steps > 0 && std::isfinite(r.steps),
            errc::invalid_argument,
            "fit_efficiency: run {} has density {}, staleness {}, global batch {}, steps {}; densities are in "
            "(0, 1], staleness 0..2, batches > 0, steps finite and > 0",
            i, r.density, r.staleness, r.global_batch, r.steps);
  }
  auto const normalised = [&](efficiency_run const& r) { return r.steps / base.batch_factor(r.global_batch); };
  auto const dense = [](efficiency_run const& r) { return r.density >= 1; };
  std::vector<double> v;
  for (auto const& r : runs)
    if (dense(r) && r.staleness == 0) v.push_back(normalised(r));
  require(!v.empty(), errc::invalid_argument,
          "fit_efficiency: no dense staleness-0 run among {} runs; measure one (codec identity, staleness 0): "
          "every multiplier is relative to it",
          runs.size());
  m.reference_steps = median(v);
  for (int s = 1; s <= 2; ++s) {
    v.clear();
    for (auto const& r : runs)
      if (dense(r) && r.staleness == s) v.push_back(normalised(r) / m.reference_steps);
    if (!v.empty()) m.staleness[static_cast<std::size_t>(s)] = std::max(1.0, median(v));
  }
  std::vector<double> densities;
  for (auto const& r : runs)
    if (!dense(r)) densities.push_back(r.density);
  std::sort(densities.begin(), densities.end(), std::greater<>{});
  densities.erase(std::unique(densities.begin(), densities.end()), densities.end());
  m.compression_curve = {{1.0, 1.0}};
  for (double d : densities) {
    v.clear();
    for (auto const& r : runs)
      if (r.density == d)
        v.push_back(normalised(r) / (m.reference_steps * m.staleness[static_cast<std::size_t>(r.staleness)]));
    m.compression_curve.push_back({d, std::max(1.0, median(v))});
  }
  m.validate();
  return m;
}

}  // namespace sluice
