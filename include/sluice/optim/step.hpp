// sluice::step and sluice::flush: the one entry that runs any Optimizer on a tensor (dense or sparse
// gradient, with or without a low-precision shadow). It validates everything first and throws
// sluice::error before changing anything, so every optimizer gets the same checks and messages.
#pragma once

#include <cstdint>
#include <span>

#include <sluice/core/sparse.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>

namespace sluice {

namespace detail::optim {
/// The shadow element check of the step and flush overloads that write one.
template <class S>
constexpr void check_shadow() noexcept {
  static_assert(ShadowElement<S>,
                "sluice::step and sluice::flush: the shadow copy of the parameters is written as sluice::bfloat16 or "
                "sluice::half "
                "(sluice::ShadowElement), not as this type; pass a std::span<sluice::bfloat16> or "
                "std::span<sluice::half>, or leave the shadow argument out to keep the fp32 parameters only");
}
}  // namespace detail::optim

/// One dense step of optimizer o over a tensor or a fused bucket: params.size() == grad.size() ==
/// s.size(); s.step() advances by one. Throws sluice::error (errc::invalid_argument for a policy
/// or state that does not fit, errc::size_mismatch for sizes) before changing anything.
template <Optimizer O>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, std::span<float const> grad) {
  detail::optim::step_dense(o, s, params, grad, std::span<detail::optim::no_shadow>{}, O::name);
}
/// Dense step that also writes the updated parameters, rounded to nearest, to `shadow`
/// (shadow.size() == params.size()).
template <Optimizer O, class S>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, std::span<float const> grad,
          std::span<S> shadow) {
  detail::optim::check_shadow<S>();
  detail::optim::step_dense(o, s, params, grad, shadow, O::name);
}

/// One step from a sparse gradient with 32-bit element indices, or block indices when
/// grad.block_size > 1 (grad.extent == params.size()). Entries it does not touch follow the
/// policy's sparse_mode; s.step() advances by one.
template <Optimizer O>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, sparse_view<float const> grad) {
  detail::optim::step_sparse(o, s, params, grad, std::span<detail::optim::no_shadow>{}, O::name);
}
/// Sparse step (32-bit indices) that also writes the entries it updates to `shadow`.
template <Optimizer O, class S>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, sparse_view<float const> grad,
          std::span<S> shadow) {
  detail::optim::check_shadow<S>();
  detail::optim::step_sparse(o, s, params, grad, shadow, O::name);
}

/// Sparse step with 64-bit indices (tensors of 2^32 elements or more).
template <Optimizer O>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, sparse_view<float const, std::uint64_t> grad) {
  detail::optim::step_sparse(o, s, params, grad, std::span<detail::optim::no_shadow>{}, O::name);
}
/// Sparse step (64-bit indices) that also writes the entries it updates to `shadow`.
template <Optimizer O, class S>
void step(O const& o, optimizer_state<O>& s, std::span<float> params, sparse_view<float const, std::uint64_t> grad,
          std::span<S> shadow) {
  detail::optim::check_shadow<S>();
  detail::optim::step_sparse(o, s, params, grad, shadow, O::name);
}

/// Brings the entries of a catch_up state up to s.step() (before evaluating or checkpointing the
/// parameters); no new step, and a no-op for lazy states.
template <Optimizer O>
void flush(O const& o, optimizer_state<O>& s, std::span<float> params) {
  detail::optim::flush(o, s, params, std::span<detail::optim::no_shadow>{}, O::name);
}
/// flush that also rewrites the whole shadow from the parameters.
template <Optimizer O, class S>
void flush(O const& o, optimizer_state<O>& s, std::span<float> params, std::span<S> shadow) {
  detail::optim::check_shadow<S>();
  detail::optim::flush(o, s, params, shadow, O::name);
}

}  // namespace sluice
