// The result of an exact top-k selection (top_k::select): the magnitude key and tie count that
// describe which elements were selected.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

/// Result of a top-k selection: exactly the elements whose ranking key (the bit pattern of |x|,
/// sign cleared, as a non-negative int32; 16-bit types widened to the float layout) is > `key`,
/// plus the first `ties` elements (in index order) whose key == `key`, are selected.
/// key == no_key selects nothing.
struct top_k_threshold {
  static constexpr std::int64_t no_key = std::int64_t{1} << 31;  ///< above every key
  std::int64_t key = no_key;
  std::size_t ties = 0;
  friend bool operator==(top_k_threshold const&, top_k_threshold const&) = default;
};

}  // namespace sluice
