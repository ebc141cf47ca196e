// The SGD per-tile kernel (torch.optim.SGD: momentum, dampening, Nesterov, weight decay) and its
// exact catch-up of skipped steps through the closed form of the linear zero-gradient recurrence.
// The step is one body over lanes (sgd_body.hpp) stamped per instruction-set level.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <sluice/optim/catch_up.hpp>
#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// The float constants of one SGD step, as the lanes use them.
struct sgd_scalars {
  float lr = 0, mu = 0, c = 0, wd = 0;
};

/// The step at level L (optim/detail/sgd_body.hpp, stamped below).
template <sluice::simd L>
struct sgd_lanes;

}  // namespace sluice::detail::optim

#define SLUICE_SIMD_BODY <sluice/optim/detail/sgd_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one SGD step t.
struct sgd_kernel : sgd_scalars {
  std::size_t moments = 0;  // 1 with momentum
  std::uint64_t t = 0;
  bool nesterov = false, first = false, has_wd = false;
  mat2 regular{}, initial{};  // zero-gradient step maps on (param, buffer)

  sgd_kernel(double lr_, double momentum, double dampening, double weight_decay, bool nesterov_, std::uint64_t step)
      : sgd_scalars{static_cast<float>(lr_), static_cast<float>(momentum), static_cast<float>(1 - dampening),
                    static_cast<float>(weight_decay)},
        moments(momentum != 0 ? 1 : 0),
        t(step),
        nesterov(nesterov_),
        first(step == 1),
        has_wd(weight_decay != 0) {
    double const l = lr_, m = momentum, cd = 1 - dampening, w = weight_decay;
    if (momentum == 0) {
      regular = initial = {1 - l * w, 0, 0, 0};
    } else if (!nesterov_) {
      // b' = c w p + m b ; p' = p - l b'
      regular = {1 - l * cd * w, -l * m, cd * w, m};
      // first step: b' = w p ; p' = p - l b'
      initial = {1 - l * w, 0, w, 0};
    } else {
      // b' = c w p + m b ; p' = p - l (w p + m b')
      regular = {1 - l * w - l * m * cd * w, -l * m * m, cd * w, m};
      initial = {1 - l * w - l * m * w, 0, w, 0};
    }
  }

  /// sgd_lanes<L>'s body for this step's options (momentum, weight decay, first step, Nesterov)
  /// on one tile or, with Range, on a whole range.
  template <sluice::simd L, bool Range>
  void run_at(float* p, float const* g, float* b, std::size_t n) const noexcept {
    auto const go = [&]<bool M, bool W, bool F, bool N>() {
      if constexpr (Range)
        sgd_lanes<L>::template step_range<M, W, F, N>(*this, p, g, b, n);
      else
        sgd_lanes<L>::template step_tile<M, W, F, N>(*this, p, g, b, n);
    };
    if (moments == 0)
      has_wd ? go.template operator()<false, true, false, false>()
             : go.template operator()<false, false, false, false>();
    else if (first)
      has_wd ? (nesterov ? go.template operator()<true, true, true, true>()
                         : go.template operator()<true, true, true, false>())
             : (nesterov ? go.template operator()<true, false, true, true>()
                         : go.template operator()<true, false, true, false>());
    else
      has_wd ? (nesterov ? go.template operator()<true, true, false, true>()
                         : go.template operator()<true, true, false, false>())
             : (nesterov ? go.template operator()<true, false, false, true>()
                         : go.template operator()<true, false, false, false>());
  }

  /// One step on n contiguous float elements (params, gradient, momentum buffer), in place, at
  /// this process's level.
  void core(float* p, float const* g, float* const* m, float*, std::size_t n) const noexcept {
    float* const b = moments == 0 ? nullptr : m[0];
    detail::simd::dispatch([&](auto l) { run_at<decltype(l)::value, false>(p, g, b, n); });
  }

  /// core() over n contiguous elements of any length (run_contiguous's fp32 path without
  /// catch-up or shadow): the level chosen once, the tile loop inside the body.
  void core_range(float* p, float const* g, float* const* m, std::size_t n) const noexcept {
    float* const b = moments == 0 ? nullptr : m[0];
    detail::simd::dispatch([&](auto l) { run_at<decltype(l)::value, true>(p, g, b, n); });
  }

  /// Replays steps last[i]+1 .. target with zero gradient exactly: (p, b) evolve linearly, so k
  /// skipped steps are one 2x2 matrix power (the first step of the tensor has its own map because
  /// torch starts the buffer at d instead of mu*b + (1-dampening)*d).
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    auto const replay = sgd_catch_up::from(*this);  // the one definition, shared with the device
    float unused = 0.0f;                            // the buffer entry without momentum (neither read nor written)
    for (std::size_t i = 0; i < n; ++i) replay(p[i], moments != 0 ? m[0][i] : unused, last[i], target);
  }
};

}  // namespace sluice::detail::optim
