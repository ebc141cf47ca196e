// The validated steps behind sluice::step, sluice::flush and step_all: check everything, then bump
// the step count and run the policy's kernel (dense, sparse, or catch-up only). Nothing changes on
// a throw.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/core/error.hpp>
#include <sluice/core/float16.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/detail/instances.hpp>
#include <sluice/optim/detail/kernel.hpp>
#include <sluice/optim/state.hpp>

namespace sluice::detail::optim {

/// Runs the policy's validate() and prefixes the tensor id to its message on failure.
template <class O>
void validate_for(O const& o, std::uint32_t tensor) {
  try {
    o.validate();
  } catch (error const& e) {
    throw error(e.kind(), fmt::format("tensor {}: {}", tensor, e.what()));
  }
}

template <class O, class Sh>
void check_dense(O const& o, optimizer_state<O, float> const& s, std::span<float> params, std::size_t grad,
                 std::span<Sh> shadow, char const* who) {
  validate_for(o, s.tensor());
  check_state(s, o.layout(), params.size(), who);
  require(grad == params.size(), errc::size_mismatch, "{} (tensor {}): gradient of {} elements for {} parameters", who,
          s.tensor(), grad, params.size());
  check_shadow(shadow, params.size(), s.tensor(), who);
}

template <class O, class Sh, class Index>
void check_sparse(O const& o, optimizer_state<O, float> const& s, std::span<float> params,
                  sparse_view<float const, Index> g, std::span<Sh> shadow, char const* who) {
  validate_for(o, s.tensor());
  check_state(s, o.layout(), params.size(), who);
  require(g.extent == params.size(), errc::size_mismatch,
          "{} (tensor {}): sparse gradient of extent {} for {} parameters", who, s.tensor(), g.extent, params.size());
  g.validate(who);
  check_shadow(shadow, params.size(), s.tensor(), who);
}

/// errc::invalid_argument when the state's step counter cannot count one more step (2^64 - 1
/// steps, or 2^32 - 1 for catch_up states, whose per-entry counters are 32-bit): a wrapped counter
/// would turn bias corrections and catch-up replays into garbage.
template <class O>
void check_step_room(optimizer_state<O, float> const& s, char const* who) {
  std::uint64_t const limit = s.layout().per_entry_steps ? optimizer_state<O, float>::max_catch_up_step
                                                         : std::numeric_limits<std::uint64_t>::max();
  require(s.step() < limit, errc::invalid_argument,
          "{} (tensor {}): the step counter is at {}, its limit; restore a valid checkpoint or start a new state", who,
          s.tensor(), s.step());
}

/// Dense step; `parallel` false runs on the calling thread only (step_all batches small tensors).
template <class O, class Sh>
void step_dense(O const& o, optimizer_state<O, float>& s, std::span<float> params, std::span<float const> grad,
                std::span<Sh> shadow, char const* who, bool parallel = true) {
  check_dense(o, s, params, grad.size(), shadow, who);
  check_step_room(s, who);
  std::uint64_t const t = ++state_access::step(s);
  dispatch_dense(o.kernel(t), s, params, grad.data(), shadow, o.seed, t - 1, parallel);
}

template <class O, class Sh, class Index>
void step_sparse(O const& o, optimizer_state<O, float>& s, std::span<float> params, sparse_view<float const, Index> g,
                 std::span<Sh> shadow, char const* who, bool parallel = true) {
  check_sparse(o, s, params, g, shadow, who);
  check_step_room(s, who);
  std::uint64_t const t = ++state_access::step(s);
  dispatch_sparse(o.kernel(t), s, params, g, shadow, o.seed, t - 1, parallel);
}

/// Brings every entry up to the current step (catch_up) and rewrites the shadow; no new step.
template <class O, class Sh>
void flush(O const& o, optimizer_state<O, float>& s, std::span<float> params, std::span<Sh> shadow, char const* who) {
  check_dense(o, s, params, params.size(), shadow, who);
  std::uint64_t const t = s.step();
  if (t == 0) {
    if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow.data(), params.data(), params.size());
    return;
  }
  dispatch_dense(o.kernel(t), s, params, static_cast<float const*>(nullptr), shadow, o.seed, t, true);
}

/// Common validation of policy values.
inline void require_finite(double x, char const* policy, char const* name) {
  require(std::isfinite(x), errc::invalid_argument, "{}: {} = {} is not finite", policy, name, x);
}
inline void require_beta(double x, char const* policy, char const* name) {
  require(x >= 0 && x < 1, errc::invalid_argument, "{}: {} = {} is outside [0, 1)", policy, name, x);
}
inline void require_nonnegative(double x, char const* policy, char const* name) {
  require(std::isfinite(x) && x >= 0, errc::invalid_argument, "{}: {} = {} must be finite and >= 0", policy, name, x);
}
inline void require_state_type(element_type e, char const* policy) {
  require(e == element_type::f32 || e == element_type::bf16, errc::unsupported,
          "{}: state_type {} is not supported; use f32 or bf16", policy, to_string(e));
}

// adam and adamw share their options and their checks.
template <class A>
void validate_adam_options(A const& o) {
  require_nonnegative(o.lr, A::name, "lr");
  require_beta(o.beta1, A::name, "beta1");
  require_beta(o.beta2, A::name, "beta2");
  require_nonnegative(o.eps, A::name, "eps");
  require_nonnegative(o.weight_decay, A::name, "weight_decay");
  require_state_type(o.state_type, A::name);
}

}  // namespace sluice::detail::optim
