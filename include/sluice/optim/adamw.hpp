// sluice::adamw: AdamW (Loshchilov & Hutter, decoupled weight decay) as torch.optim.AdamW.
#pragma once

#include <cstdint>
#include <span>

#include <fmt/format.h>
#include <Eigen/Core>

#include <sluice/core/element.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/adam_kernel.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>

namespace sluice {

/// AdamW as torch.optim.AdamW (amsgrad=False): first p *= 1 - lr * weight_decay, then the
/// Adam update of sluice::adam without weight decay in the gradient. catch_up replays the
/// skipped decays exactly ((1 - lr wd)^k) and the moment part with Adam's approximation.
struct adamw {
  using optimizer_concept = optimizer_tag;

  double lr = 1e-3;                             ///< learning rate, finite, >= 0
  double beta1 = 0.9;                           ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;                         ///< second-moment decay, in [0, 1)
  double eps = 1e-8;                            ///< added to sqrt(v / (1 - beta2^t)), finite, >= 0
  double weight_decay = 1e-2;                   ///< decoupled: p *= 1 - lr * weight_decay each step, finite, >= 0
  sparse_mode sparse = sparse_mode::lazy;       ///< treatment of entries a sparse step does not touch
  element_type state_type = element_type::f32;  ///< moments in f32, or bf16 with stochastic rounding
  std::uint64_t seed = 0;                       ///< keys the stochastic-rounding stream (bf16 states)

  friend bool operator==(adamw const&, adamw const&) = default;

  /// Two moments (m, v) per element, in state_type; per-entry steps for catch_up.
  [[nodiscard]] state_layout layout() const noexcept { return {2, state_type, sparse == sparse_mode::catch_up}; }

  /// Throws errc::invalid_argument for a non-finite or negative lr, eps or weight_decay and betas
  /// outside [0, 1); errc::unsupported for a state_type other than f32 or bf16.
  void validate() const {
    detail::optim::require_nonnegative(lr, "adamw", "lr");
    detail::optim::require_beta(beta1, "adamw", "beta1");
    detail::optim::require_beta(beta2, "adamw", "beta2");
    detail::optim::require_nonnegative(eps, "adamw", "eps");
    detail::optim::require_nonnegative(weight_decay, "adamw", "weight_decay");
    detail::optim::require_state_type(state_type, "adamw");
  }

  /// Dense step over a tensor or a fused bucket: params.size() == grad.size() == s.size().
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<adamw>& s, std::span<float> params, std::span<float const> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>,
                  "sluice::adamw: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_dense(*this, s, params, grad, shadow, "adamw");
  }
  /// Sparse step (element or block indices, 32-bit).
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<adamw>& s, std::span<float> params, sparse_view<float const> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>,
                  "sluice::adamw: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_sparse(*this, s, params, grad, shadow, "adamw");
  }
  /// Sparse step (element or block indices, 64-bit).
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<adamw>& s, std::span<float> params, sparse_view<float const, std::uint64_t> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>,
                  "sluice::adamw: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_sparse(*this, s, params, grad, shadow, "adamw");
  }
  /// Brings catch_up entries up to s.step() and rewrites the shadow; no new step.
  template <class Shadow = detail::optim::no_shadow>
  void flush(optimizer_state<adamw>& s, std::span<float> params, std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>,
                  "sluice::adamw: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::flush(*this, s, params, shadow, "adamw");
  }

  /// Internal: the per-step scalars of step t (t >= 1).
  [[nodiscard]] detail::optim::adam_kernel kernel(std::uint64_t t) const {
    return {lr, beta1, beta2, eps, weight_decay, true, t};
  }
};
static_assert(Optimizer<adamw>);

}  // namespace sluice

template <>
struct fmt::formatter<sluice::adamw> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::adamw const& o, Ctx& ctx) const {
    return fmt::format_to(
        ctx.out(), "adamw{{lr={}, beta1={}, beta2={}, eps={}, weight_decay={}, sparse={}, state_type={}, seed={}}}",
        o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.sparse, sluice::to_string(o.state_type), o.seed);
  }
};
