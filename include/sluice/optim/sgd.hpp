// sluice::sgd: stochastic gradient descent with momentum, dampening, Nesterov and weight decay,
// exactly as torch.optim.SGD computes it, on fp32 master weights.
#pragma once

#include <cstdint>
#include <span>

#include <fmt/format.h>
#include <Eigen/Core>

#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/sgd_kernel.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>

namespace sluice {

/// SGD as torch.optim.SGD (maximize=False). With d = g + weight_decay * p, step t:
///   momentum == 0:  p -= lr * d
///   otherwise:      b = (t == 1 ? d : momentum * b + (1 - dampening) * d)
///                   p -= lr * (nesterov ? d + momentum * b : b)
/// Sparse steps: lazy updates only touched entries; catch_up replays the skipped steps exactly
/// (zero gradient, weight decay included) through the closed form of the linear recurrence, so a
/// sparse run equals a dense run with zero gradients at untouched entries.
struct sgd {
  using optimizer_concept = optimizer_tag;

  double lr = 1e-2;                             ///< learning rate, finite, >= 0
  double momentum = 0;                          ///< momentum factor, finite, >= 0 (0: no buffer)
  double dampening = 0;                         ///< dampening of the momentum update, in [0, 1]
  double weight_decay = 0;                      ///< L2 penalty added to the gradient, finite, >= 0
  bool nesterov = false;                        ///< Nesterov momentum (needs momentum > 0, dampening 0)
  sparse_mode sparse = sparse_mode::lazy;       ///< treatment of entries a sparse step does not touch
  element_type state_type = element_type::f32;  ///< momentum buffer in f32, or bf16 with stochastic rounding
  std::uint64_t seed = 0;                       ///< keys the stochastic-rounding stream (bf16 states)

  friend bool operator==(sgd const&, sgd const&) = default;

  /// One momentum buffer per element when momentum != 0; per-entry steps for catch_up.
  [[nodiscard]] state_layout layout() const noexcept {
    return {momentum != 0 ? std::size_t{1} : std::size_t{0}, state_type, sparse == sparse_mode::catch_up};
  }

  /// Throws errc::invalid_argument for values outside their ranges (and Nesterov without momentum
  /// or with dampening, as torch does); errc::unsupported for a state_type other than f32 or bf16.
  void validate() const {
    detail::optim::require_nonnegative(lr, "sgd", "lr");
    detail::optim::require_nonnegative(momentum, "sgd", "momentum");
    require(dampening >= 0 && dampening <= 1, errc::invalid_argument, "sgd: dampening = {} is outside [0, 1]",
            dampening);
    detail::optim::require_nonnegative(weight_decay, "sgd", "weight_decay");
    require(!nesterov || (momentum > 0 && dampening == 0), errc::invalid_argument,
            "sgd: nesterov needs momentum > 0 and dampening == 0 (momentum = {}, dampening = {})", momentum, dampening);
    detail::optim::require_state_type(state_type, "sgd");
  }

  /// Dense step over a tensor or a fused bucket: params.size() == grad.size() == s.size().
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<sgd>& s, std::span<float> params, std::span<float const> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>, "sluice::sgd: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_dense(*this, s, params, grad, shadow, "sgd");
  }
  /// Sparse step (element or block indices, 32-bit).
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<sgd>& s, std::span<float> params, sparse_view<float const> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>, "sluice::sgd: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_sparse(*this, s, params, grad, shadow, "sgd");
  }
  /// Sparse step (element or block indices, 64-bit).
  template <class Shadow = detail::optim::no_shadow>
  void step(optimizer_state<sgd>& s, std::span<float> params, sparse_view<float const, std::uint64_t> grad,
            std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>, "sluice::sgd: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::step_sparse(*this, s, params, grad, shadow, "sgd");
  }
  /// Brings catch_up entries up to s.step() and rewrites the shadow; no new step.
  template <class Shadow = detail::optim::no_shadow>
  void flush(optimizer_state<sgd>& s, std::span<float> params, std::span<Shadow> shadow = {}) const {
    static_assert(detail::optim::is_shadow_element<Shadow>, "sluice::sgd: a shadow is Eigen::bfloat16 or Eigen::half");
    detail::optim::flush(*this, s, params, shadow, "sgd");
  }

  /// Internal: the per-step scalars of step t (t >= 1).
  [[nodiscard]] detail::optim::sgd_kernel kernel(std::uint64_t t) const {
    return {lr, momentum, dampening, weight_decay, nesterov, t};
  }
};
static_assert(Optimizer<sgd>);

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sgd> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::sgd const& o, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "sgd{{lr={}, momentum={}, dampening={}, weight_decay={}, nesterov={}, sparse={}, "
                          "state_type={}, seed={}}}",
                          o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.sparse,
                          sluice::to_string(o.state_type), o.seed);
  }
};
