// sluice::adam: Adam (Kingma & Ba) exactly as torch.optim.Adam computes it, on fp32 master weights.
#pragma once

#include <cstdint>
#include <span>

#include <fmt/core.h>

#include <sluice/core/element.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/adam_kernel.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>

namespace sluice {

/// The constants of one Adam or AdamW step (adam::kernel(t), adamw::kernel(t)), computed once from
/// the policy's values in double and used in float: what sluice::step runs the update with, and
/// what cuda::adam_element::from reads. Its members belong to the kernels and may change with them.
struct adam_step_constants : detail::optim::adam_kernel {
  using detail::optim::adam_kernel::adam_kernel;
};

/// Adam as torch.optim.Adam (amsgrad=False, maximize=False). With g the gradient plus
/// weight_decay * p (L2, coupled), step t = s.step() + 1:
///   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
///   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// Sparse steps: lazy updates only touched entries with the tensor's step count t (torch
/// SparseAdam semantics, but with torch.optim.Adam's eps placement); catch_up first replays the
/// skipped steps with the geometric approximation (docs/optim.md).
struct adam {
  using optimizer_concept = optimizer_tag;
  static constexpr char const* name = "adam";  ///< names the policy in error messages

  double lr = 1e-3;                             ///< learning rate, finite, >= 0
  double beta1 = 0.9;                           ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;                         ///< second-moment decay, in [0, 1)
  double eps = 1e-8;                            ///< added to sqrt(v / (1 - beta2^t)), finite, >= 0
  double weight_decay = 0;                      ///< L2 penalty added to the gradient, finite, >= 0
  sparse_mode sparse = sparse_mode::lazy;       ///< treatment of entries a sparse step does not touch
  element_type state_type = element_type::f32;  ///< moments in f32, or bf16 with stochastic rounding
  std::uint64_t seed = 0;                       ///< keys the stochastic-rounding stream (bf16 states)

  friend bool operator==(adam const&, adam const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, adam const& v) {
    h("adam", v.lr, v.beta1, v.beta2, v.eps, v.weight_decay, v.sparse, v.state_type, v.seed);
  }

  /// Two moments (m, v) per element, in state_type; per-entry steps for catch_up.
  [[nodiscard]] state_layout layout() const noexcept { return {2, state_type, sparse == sparse_mode::catch_up}; }

  /// Throws errc::invalid_argument for a non-finite or negative lr, eps or weight_decay and betas
  /// outside [0, 1); errc::unsupported for a state_type other than f32 or bf16.
  void validate() const { detail::optim::validate_adam_options(*this); }

  /// The constants of step t (t >= 1).
  [[nodiscard]] adam_step_constants kernel(std::uint64_t t) const {
    return {lr, beta1, beta2, eps, weight_decay, false, t};
  }
};
// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::adam> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::adam const& o, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "adam{{.lr = {}, .beta1 = {}, .beta2 = {}, .eps = {}, .weight_decay = {}, .sparse = {}, "
                          ".state_type = {}, .seed = {}}}",
                          o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.sparse, sluice::to_string(o.state_type),
                          o.seed);
  }
};
