// sluice::adamw: AdamW (Loshchilov & Hutter, decoupled weight decay) as torch.optim.AdamW.
#pragma once

#include <cstdint>
#include <span>

#include <fmt/core.h>

#include <sluice/core/element.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>

namespace sluice {

/// AdamW as torch.optim.AdamW (amsgrad=False): first p *= 1 - lr * weight_decay, then the
/// Adam update of sluice::adam without weight decay in the gradient. catch_up replays the
/// skipped decays exactly ((1 - lr wd)^k) and the moment part with Adam's approximation.
struct adamw {
  using optimizer_concept = optimizer_tag;
  static constexpr char const* name = "adamw";  ///< names the policy in error messages

  double lr = 1e-3;                             ///< learning rate, finite, >= 0
  double beta1 = 0.9;                           ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;                         ///< second-moment decay, in [0, 1)
  double eps = 1e-8;                            ///< added to sqrt(v / (1 - beta2^t)), finite, >= 0
  double weight_decay = 1e-2;                   ///< decoupled: p *= 1 - lr * weight_decay each step, finite, >= 0
  sparse_mode sparse = sparse_mode::lazy;       ///< treatment of entries a sparse step does not touch
  element_type state_type = element_type::f32;  ///< moments in f32, or bf16 with stochastic rounding
  std::uint64_t seed = 0;                       ///< keys the stochastic-rounding stream (bf16 states)

  friend bool operator==(adamw const&, adamw const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, adamw const& v) {
    h("adamw", v.lr, v.beta1, v.beta2, v.eps, v.weight_decay, v.sparse, v.state_type, v.seed);
  }

  /// Two moments (m, v) per element, in state_type; per-entry steps for catch_up.
  [[nodiscard]] state_layout layout() const noexcept { return {2, state_type, sparse == sparse_mode::catch_up}; }

  /// Throws errc::invalid_argument for a non-finite or negative lr, eps or weight_decay and betas
  /// outside [0, 1); errc::unsupported for a state_type other than f32 or bf16.
  void validate() const { detail::optim::validate_adam_options(*this); }

  /// The constants of step t (t >= 1).
  [[nodiscard]] adam_step_constants kernel(std::uint64_t t) const {
    return {lr, beta1, beta2, eps, weight_decay, true, t};
  }
};
// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::adamw> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::adamw const& o, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "adamw{{.lr = {}, .beta1 = {}, .beta2 = {}, .eps = {}, .weight_decay = {}, .sparse = {}, "
                          ".state_type = {}, .seed = {}}}",
                          o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.sparse, sluice::to_string(o.state_type),
                          o.seed);
  }
};
