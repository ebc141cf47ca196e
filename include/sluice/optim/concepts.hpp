// The Optimizer concept: a regular policy value (sgd, adam, adamw) that updates caller-owned fp32
// parameters from a dense or sparse gradient, with all mutable state in an optimizer_state.
// Declarations only: the state is defined in optim/state.hpp, sparse_view in core/sparse.hpp.
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
template <class T, SparseIndex Index>
struct sparse_view;

/// Opt-in tag: an optimizer declares `using optimizer_concept = optimizer_tag;`.
struct optimizer_tag {};

/// An optimizer for parameters of type T (fp32 master weights: T = float).
///  - layout(): what its optimizer_state holds (moments, their precision, per-entry counters);
///    `optimizer_state<O, T> s(o, n, tensor_id)` sizes a state from it.
///  - validate(): throws errc::invalid_argument for values outside their documented ranges.
///  - step(s, params, grad [, shadow]): one dense step over a tensor or a fused bucket.
///  - step(s, params, sparse [, shadow]): one step from a sparse gradient (element indices, or
///    block indices when sparse.block_size > 1); untouched entries follow the policy's sparse_mode.
///  - flush(s, params [, shadow]): brings catch_up entries up to the current step (before
///    evaluation or checkpointing parameters); a no-op for lazy states.
/// The optional shadow (std::span<Eigen::bfloat16> or std::span<Eigen::half>, one per parameter)
/// receives the updated parameters rounded to nearest in the same pass, for upload to a GPU; sparse
/// steps write only the entries they touch. Every call validates first and throws sluice::error
/// before changing anything.
template <class O, class T = float>
concept Optimizer = std::regular<O> && std::derived_from<typename O::optimizer_concept, optimizer_tag> &&
    requires(O const& o, optimizer_state<O, T>& s, std::span<T> params, std::span<T const> grad,
             sparse_view<T const, std::uint32_t> sparse, sparse_view<T const, std::uint64_t> sparse64,
             std::span<Eigen::bfloat16> bf16, std::span<Eigen::half> f16) {
  { o.layout() } -> std::same_as<state_layout>;
  o.validate();
  o.step(s, params, grad);
  o.step(s, params, sparse);
  o.step(s, params, sparse64);
  o.step(s, params, grad, bf16);
  o.step(s, params, sparse, f16);
  o.flush(s, params);
};

}  // namespace sluice
