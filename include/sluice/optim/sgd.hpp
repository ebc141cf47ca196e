// sluice::sgd: stochastic gradient descent with momentum, dampening, Nesterov and weight decay,
// exactly as torch.optim.SGD computes it, on fp32 master weights.
#pragma once

#include <cstdint>
#include <span>

#include <fmt/core.h>

#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/sgd_kernel.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>

namespace sluice {

/// The constants of one SGD step (sgd::kernel(t)), computed once from the policy's values: what
/// sluice::step runs the update with, and what cuda::sgd_element::from reads. Its members belong to
/// the kernels and may change with them.
struct sgd_step_constants : detail::optim::sgd_kernel {
  using detail::optim::sgd_kernel::sgd_kernel;
};

/// SGD as torch.optim.SGD (maximize=False). With d = g + weight_decay * p, step t:
///   momentum == 0:  p -= lr * d
///   otherwise:      b = (t == 1 ? d : momentum * b + (1 - dampening) * d)
///                   p -= lr * (nesterov ? d + momentum * b : b)
/// Sparse steps: lazy updates only touched entries; catch_up replays the skipped steps exactly
/// (zero gradient, weight decay included) through the closed form of the linear recurrence, so a
/// sparse run equals a dense run with zero gradients at untouched entries.
struct sgd {
  using optimizer_concept = optimizer_tag;
  static constexpr char const* name = "sgd";  ///< names the policy in error messages

  double lr = 1e-2;                             ///< learning rate, finite, >= 0
  double momentum = 0;                          ///< momentum factor, finite, >= 0 (0: no buffer)
  double dampening = 0;                         ///< dampening of the momentum update, in [0, 1]
  double weight_decay = 0;                      ///< L2 penalty added to the gradient, finite, >= 0
  bool nesterov = false;                        ///< Nesterov momentum (needs momentum > 0, dampening 0)
  sparse_mode sparse = sparse_mode::lazy;       ///< treatment of entries a sparse step does not touch
  element_type state_type = element_type::f32;  ///< momentum buffer in f32, or bf16 with stochastic rounding
  std::uint64_t seed = 0;                       ///< keys the stochastic-rounding stream (bf16 states)

  friend bool operator==(sgd const&, sgd const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, sgd const& v) {
    h("sgd", v.lr, v.momentum, v.dampening, v.weight_decay, v.nesterov, v.sparse, v.state_type, v.seed);
  }

  /// One momentum buffer per element when momentum != 0; per-entry steps for catch_up.
  [[nodiscard]] state_layout layout() const noexcept {
    return {momentum != 0 ? std::size_t{1} : std::size_t{0}, state_type, sparse == sparse_mode::catch_up};
  }

  /// Throws errc::invalid_argument for values outside their ranges (and Nesterov without momentum
  /// or with dampening, as torch does); errc::unsupported for a state_type other than f32 or bf16.
  void validate() const {
    detail::optim::require_nonnegative(lr, name, "lr");
    detail::optim::require_nonnegative(momentum, name, "momentum");
    require(dampening >= 0 && dampening <= 1, errc::invalid_argument, "sgd: dampening = {} is outside [0, 1]",
            dampening);
    detail::optim::require_nonnegative(weight_decay, name, "weight_decay");
    require(!nesterov || (momentum > 0 && dampening == 0), errc::invalid_argument,
            "sgd: nesterov needs momentum > 0 and dampening == 0 (momentum = {}, dampening = {})", momentum, dampening);
    detail::optim::require_state_type(state_type, name);
  }

  /// The constants of step t (t >= 1).
  [[nodiscard]] sgd_step_constants kernel(std::uint64_t t) const {
    return {lr, momentum, dampening, weight_decay, nesterov, t};
  }
};
// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sgd> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::sgd const& o, Ctx& ctx) const {
    return fmt::format_to(
        ctx.out(),
        "sgd{{.lr = {}, .momentum = {}, .dampening = {}, .weight_decay = {}, .nesterov = {}, .sparse = {}, "
        ".state_type = {}, .seed = {}}}",
        o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.sparse, sluice::to_string(o.state_type), o.seed);
  }
};
