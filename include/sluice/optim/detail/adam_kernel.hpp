// The Adam/AdamW per-tile kernel (torch.optim.Adam / AdamW formulas) and its catch-up of skipped
// steps; shared by sluice::adam and sluice::adamw. The fp32 step and the bf16-moment loops around
// it are one body over lanes (adam_body.hpp) stamped per instruction-set level.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <sluice/core/detail/bf16_bits.hpp>
#include <sluice/core/detail/philox_lanes.hpp>
#include <sluice/core/detail/prefetch.hpp>
#include <sluice/optim/catch_up.hpp>
#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// The float constants of one Adam step, as the lanes use them.
struct adam_scalars {
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0, eps = 0, wd = 0, lr_wd = 0, step_size = 0, inv_sqrt_bc2 = 0;
};

/// The fp32 step at level L (optim/detail/adam_body.hpp, stamped below).
template <sluice::simd L>
struct adam_lanes;

}  // namespace sluice::detail::optim

#define SLUICE_SIMD_BODY <sluice/optim/detail/adam_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one Adam step t, computed once in double, used in float.
struct adam_kernel : adam_scalars {
  std::size_t moments = 2;
  std::uint64_t t = 0;
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

  /// f.template operator()<L2, Decoupled>() for this step's weight decay.
  template <class F>
  void with_decay(F&& f) const noexcept {
    if (l2)
      f.template operator()<true, false>();
    else if (decoupled)
      f.template operator()<false, true>();
    else
      f.template operator()<false, false>();
  }

  /// One step on n contiguous float elements (params, gradient, m, v) in place, at level L.
  template <sluice::simd L>
  void core_at(float* p, float const* g, float* mm, float* vv, std::size_t n) const noexcept {
    with_decay([&]<bool L2, bool D>() { adam_lanes<L>::template dense<L2, D>(*this, p, g, mm, vv, n); });
  }

  /// One step on n contiguous float elements (one tile), at this process's level.
  void core(float* p, float const* g, float* const* m, float*, std::size_t n) const noexcept {
    detail::simd::dispatch([&](auto l) { core_at<decltype(l)::value>(p, g, m[0], m[1], n); });
  }

  /// core() over a whole range (run_contiguous's fp32 path without catch-up or shadow): the level
  /// chosen once, the lanes streaming the range.
  void core_range(float* p, float const* g, float* const* m, std::size_t n) const noexcept {
    core(p, g, m, nullptr, n);
  }

  /// A block-sparse step in place on fp32 moments (adam_lanes::blocks), at this process's level.
  template <class Index>
  void core_blocks(float* p, float* mm, float* vv, float const* vals, Index const* idx, std::size_t count,
                   std::size_t b, std::size_t n, std::size_t ahead) const noexcept {
    detail::simd::dispatch([&](auto l) {
      with_decay([&]<bool L2, bool D>() {
        adam_lanes<decltype(l)::value>::template blocks<L2, D>(*this, p, mm, vv, vals, idx, count, b, n, ahead);
      });
    });
  }

  /// bf16 moments in one pass with the rounding halfwords rnd[0 .. n) (adam_lanes::bf16), at
  /// level L: the words through memory (the fused loop's reference in the tests).
  template <sluice::simd L>
  void core_bf16_at(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, std::uint16_t const* rnd,
                    std::size_t n) const noexcept {
    with_decay([&]<bool L2, bool D>() { adam_lanes<L>::template bf16<L2, D>(*this, p, g, mb, vb, rnd, n); });
  }

  /// The fused bf16 step of elements first .. first + n - 1 (adam_lanes::bf16_stream) at level L.
  template <sluice::simd L>
  void core_bf16_stream_at(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, philox_lanes const& rs,
                           std::uint64_t first, std::size_t n) const noexcept {
    with_decay(
        [&]<bool L2, bool D>() { adam_lanes<L>::template bf16_stream<L2, D>(*this, p, g, mb, vb, rs, first, n); });
  }

  /// The fused bf16 step at this process's level.
  void core_bf16_stream(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, philox_lanes const& rs,
                        std::uint64_t first, std::size_t n) const noexcept {
    detail::simd::dispatch([&](auto l) { core_bf16_stream_at<decltype(l)::value>(p, g, mb, vb, rs, first, n); });
  }

  /// Replays steps last[i]+1 .. target with zero gradient (the geometric approximation, see
  /// docs/optim.md): m and v decay exactly (b1^k, b2^k), AdamW's decoupled decay is exact, and the
  /// parameter moves by this step's update of (m, v) times sum_{j=1..k} (b1 / sqrt(b2))^j, which is
  /// exact when eps = 0 and the bias corrections have converged to 1.
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    auto const replay = adam_catch_up::from(*this);  // the one definition, shared with the device
    for (std::size_t i = 0; i < n; ++i) replay(p[i], m[0][i], m[1][i], last[i], target);
  }
};

}  // namespace sluice::detail::optim
