// step_all: one optimizer step over many tensors at once, each with its own state and step count,
// without a global lock: small tensors are spread over the threads, large ones split in chunks.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include <sluice/core/error.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/kernel.hpp>
#include <sluice/optim/detail/step.hpp>
#include <sluice/optim/state.hpp>

namespace sluice {

/// One tensor of a step_all call: its state, parameters and dense gradient (same sizes).
template <class O>
struct tensor_step {
  optimizer_state<O>* state = nullptr;  ///< this tensor's state, not shared with another item
  std::span<float> params{};            ///< fp32 master weights, updated in place
  std::span<float const> grad{};        ///< dense gradient, same size
};

/// Steps every tensor once (each state's step count advances by one). Validates every item first
/// and throws before changing any state. Tensors smaller than two cache-sized chunks are stepped
/// whole, several at a time on different threads; larger ones are split over all threads. Distinct
/// step_all or step calls on distinct states may also run concurrently from different threads.
template <Optimizer O>
void step_all(O const& o, std::span<tensor_step<O> const> items) {
  using detail::optim::no_shadow;
  for (auto const& it : items) {
    require(it.state != nullptr, errc::invalid_argument, "step_all: a tensor_step without a state");
    detail::optim::check_dense(o, *it.state, it.params, it.grad.size(), std::span<no_shadow>{}, "step_all");
    detail::optim::check_step_room(*it.state, "step_all");
  }
  for (std::size_t i = 0; i < items.size(); ++i)
    for (std::size_t j = i + 1; j < items.size(); ++j)
      require(items[i].state != items[j].state, errc::invalid_argument,
              "step_all: items {} and {} share the state of tensor {}", i, j, items[i].state->tensor());
  std::size_t const big = 2 * detail::optim::chunk_elements(detail::optim::bytes_per_element(
                                  o.layout().moments, o.layout().moment_type == element_type::bf16));
  parallel_chunks(items.size(), 1, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i)
      if (items[i].params.size() < big)
        detail::optim::step_dense(o, *items[i].state, items[i].params, items[i].grad, std::span<no_shadow>{},
                                  "step_all", false);
  });
  for (auto const& it : items)
    if (it.params.size() >= big)
      detail::optim::step_dense(o, *it.state, it.params, it.grad, std::span<no_shadow>{}, "step_all", true);
}

/// step_all over a container of tensor_step (a std::vector, an array).
template <Optimizer O, class Items>
requires std::is_convertible_v < Items const&, std::span < tensor_step<O>
const >> void step_all(O const& o, Items const& items) { step_all(o, std::span<tensor_step<O> const>(items)); }

}  // namespace sluice
