// The Optimizer concept: a regular policy value (sgd, adam, adamw) that sluice::step uses to update
// caller-owned fp32 parameters from a dense or sparse gradient, with all mutable state in an
// optimizer_state. Declarations only: the state is defined in optim/state.hpp, sparse_view in
// core/sparse.hpp, the step constants beside their optimizers.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include <sluice/core/concepts.hpp>

namespace sluice {

/// What an optimizer's state holds (optim/state.hpp).
struct state_layout;
/// The state of optimizer O for one tensor (optim/state.hpp).
template <class O, class T>
class optimizer_state;
/// A non-owning sparse tensor (core/sparse.hpp).
template <class T, class Index>
struct sparse_view;

/// The per-step constants of sluice::sgd (optim/sgd.hpp).
struct sgd_step_constants;
/// The per-step constants of sluice::adam and sluice::adamw (optim/adam.hpp).
struct adam_step_constants;

/// Opt-in tag: an optimizer declares `using optimizer_concept = optimizer_tag;`.
struct optimizer_tag {};

/// The element type of a shadow, the low-precision copy of the parameters that sluice::step and
/// sluice::flush write in the same pass (for upload to a GPU): bfloat16 or half.
template <class S>
concept ShadowElement = std::same_as<S, bfloat16> || std::same_as<S, half>;

/// The per-step constants the optimizer kernels run on: sgd_step_constants (SGD) or
/// adam_step_constants (Adam, AdamW). A new optimizer reuses one of these update rules.
template <class K>
concept StepConstants = std::same_as<K, sgd_step_constants> || std::same_as<K, adam_step_constants>;

/// An optimizer policy: a regular value that sluice::step and sluice::flush (optim/step.hpp) use to
/// update caller-owned fp32 parameters, all mutable state kept in an optimizer_state<O>. It
/// provides what the entry needs and nothing else:
///  - name: a string literal naming the policy in error messages ("adam").
///  - seed: keys the stochastic-rounding stream of bf16 moments.
///  - layout(): what its optimizer_state holds (moments, their precision, per-entry counters);
///    `optimizer_state<O> s(o, n, tensor_id)` sizes a state from it.
///  - validate(): throws errc::invalid_argument (or errc::unsupported) for values outside their
///    documented ranges; the entry calls it before anything else.
///  - kernel(t): the constants of step t >= 1 (a StepConstants type), computed from the policy's
///    values; sluice::cuda's element functors read the same constants.
/// The steps themselves, dense or sparse, with or without shadow, and their validation are the
/// entry's, the same for every optimizer.
template <class O>
concept Optimizer = std::regular<O> && std::derived_from<typename O::optimizer_concept, optimizer_tag> &&
    requires(O const& o, std::uint64_t t) {
  { O::name } -> std::convertible_to<char const*>;
  { o.seed } -> std::convertible_to<std::uint64_t>;
  { o.layout() } -> std::same_as<state_layout>;
  o.validate();
  { o.kernel(t) } -> StepConstants;
};

}  // namespace sluice
