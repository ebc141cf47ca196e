// first_non_finite: the scan a pipeline runs over every gradient of a step before encoding any,
// so that non_finite_policy::skip_step skips the whole step atomically.
#pragma once

#include <cstddef>
#include <span>

#include <sluice/core/element.hpp>
#include <sluice/feedback/detail/kernels.hpp>

namespace sluice {

/// Index of the first NaN or Inf in `grad`, or std::size_t(-1) when every value is finite. One
/// parallel read pass.
template <Element T>
std::size_t first_non_finite(std::span<T const> grad) {
  return feedback_detail::first_non_finite_of(grad);
}

}  // namespace sluice
