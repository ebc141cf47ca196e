// The Adam/AdamW per-tile kernel (torch.optim.Adam / AdamW formulas) and its catch-up of skipped
// steps; shared by sluice::adam and sluice::adamw.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one Adam step t, computed once in double, used in float.
struct adam_kernel {
  std::size_t moments = 2;
  std::uint64_t t = 0;
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0, eps = 0, wd = 0, lr_wd = 0, step_size = 0, inv_sqrt_bc2 = 0;
  bool l2 = false, decoupled = false;
  double step_size_d = 0, inv_sqrt_bc2_d = 0, eps_d = 0, b1_d = 0, b2_d = 0, decay_d = 1, ratio = 0;

  adam_kernel(double lr, double beta1, double beta2, double epsilon, double weight_decay, bool decoupled_decay,
              std::uint64_t step)
      : t(step), l2(!decoupled_decay && weight_decay != 0), decoupled(decoupled_decay && weight_decay != 0) {
    auto const td = static_cast<double>(step);
    double const bc1 = 1 - std::pow(beta1, td), bc2 = 1 - std::pow(beta2, td);
    b1_d = beta1;
    b2_d = beta2;
    eps_d = epsilon;
    step_size_d = lr / bc1;
    inv_sqrt_bc2_d = 1 / std::sqrt(bc2);
    decay_d = decoupled ? 1 - lr * weight_decay : 1.0;
    ratio = beta2 > 0 ? beta1 / std::sqrt(beta2) : 0.0;
    b1 = static_cast<float>(beta1);
    c1 = static_cast<float>(1 - beta1);
    b2 = static_cast<float>(beta2);
    c2 = static_cast<float>(1 - beta2);
    eps = static_cast<float>(epsilon);
    wd = static_cast<float>(weight_decay);
    lr_wd = static_cast<float>(lr * weight_decay);
    step_size = static_cast<float>(step_size_d);
    inv_sqrt_bc2 = static_cast<float>(inv_sqrt_bc2_d);
  }

  template <bool L2>
  void moments_pass(float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, float const* SLUICE_RESTRICT p,
                    float const* SLUICE_RESTRICT g, std::size_t n) const noexcept {
    float const b1_ = b1, c1_ = c1, b2_ = b2, c2_ = c2, wd_ = wd;
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float gi = g[i];
      if constexpr (L2) gi = gi + wd_ * p[i];
      mm[i] = mm[i] * b1_ + c1_ * gi;
      vv[i] = vv[i] * b2_ + c2_ * (gi * gi);
    }
  }

  // AdamW's decay joins the update: p - (lr wd p + step m / denom) rounds p once per step, where
  // torch's p * (1 - lr wd) rounds 1 - lr wd to float (up to 3e-8 relative error, every step) and
  // rounds p twice.
  template <bool Decoupled>
  static void update_pass(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT mm, float const* SLUICE_RESTRICT root,
                          std::size_t n, float step, float inv, float e, float lr_wd) noexcept {
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float const u = step * (mm[i] / (root[i] * inv + e));
      if constexpr (Decoupled)
        p[i] -= lr_wd * p[i] + u;
      else
        p[i] -= u;
    }
  }

  /// One step on n contiguous float elements (params, gradient, m, v), in place.
  void core(float* p, float const* g, float* const* m, float* tmp, std::size_t n) const noexcept {
    if (l2)
      moments_pass<true>(m[0], m[1], p, g, n);
    else
      moments_pass<false>(m[0], m[1], p, g, n);
    sqrt_into(tmp, m[1], n);
    if (decoupled)
      update_pass<true>(p, m[0], tmp, n, step_size, inv_sqrt_bc2, eps, lr_wd);
    else
      update_pass<false>(p, m[0], tmp, n, step_size, inv_sqrt_bc2, eps, lr_wd);
  }

  /// Replays steps last[i]+1 .. target with zero gradient (the geometric approximation, see
  /// docs/optim.md): m and v decay exactly (b1^k, b2^k), AdamW's decoupled decay is exact, and the
  /// parameter moves by this step's update of (m, v) times sum_{j=1..k} (b1 / sqrt(b2))^j, which is
  /// exact when eps = 0 and the bias corrections have converged to 1.
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (last[i] >= target) continue;
      auto const k = static_cast<double>(target - last[i]);
      double pi = p[i];
      if (decoupled) pi *= std::pow(decay_d, k);
      double const mi = m[0][i], vi = m[1][i];
      if (mi != 0) {
        double const base = step_size_d * mi / (std::sqrt(vi) * inv_sqrt_bc2_d + eps_d);
        double const geo = ratio == 1 ? k : ratio * (1 - std::pow(ratio, k)) / (1 - ratio);
        pi -= base * geo;
      }
      m[0][i] = static_cast<float>(mi * std::pow(b1_d, k));
      m[1][i] = static_cast<float>(vi * std::pow(b2_d, k));
      p[i] = static_cast<float>(pi);
    }
  }
};

}  // namespace sluice::detail::optim
