// How block_top_k scores a block (l1 or l2): the policy's vocabulary, apart so that the scoring
// kernels (detail/block_score.hpp) and the fused error-feedback path can name it.
#pragma once

#include <cstdint>

namespace sluice {

/// How a block is scored.
enum class block_score : std::uint8_t {
  l1 = 0,  ///< sum of |x|
  l2 = 1,  ///< sum of x^2 (ranks like the L2 norm)
};

}  // namespace sluice
