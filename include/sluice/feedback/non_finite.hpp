// first_non_finite: the scan a pipeline runs over every gradient of a step before encoding any,
// so that non_finite_policy::skip_step skips the whole step atomically; on_non_finite: what a
// feedback policy does with what the scan found (also what the device backend applies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <sluice/core/element.hpp>
#include <sluice/feedback/detail/kernels.hpp>

namespace sluice {

/// Index of the first NaN or Inf in `grad`, or std::size_t(-1) when every value is finite. One
/// parallel read pass.
template <Element T>
std::size_t first_non_finite(std::span<T const> grad) {
  return detail::feedback::first_non_finite_of(grad);
}

/// What feedback policy `policy` (its name, for the message) does before it changes anything when
/// the gradient of slice `s` holds a NaN or Inf at `index` (what first_non_finite returned, not
/// std::size_t(-1)) in `step`, under `p`: throw_error throws errc::non_finite naming the tensor,
/// element and step; skip_step records the skip in s.state().report() and returns true (send
/// nothing); propagate returns false (encode, counting with feedback_state::record_non_finite).
inline bool on_non_finite(non_finite_policy p, feedback_slice const& s, std::size_t index, std::uint64_t step,
                          char const* policy) {
  return detail::feedback::on_non_finite(p, s, index, step, policy);
}

}  // namespace sluice
