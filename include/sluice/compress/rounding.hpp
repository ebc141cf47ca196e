// How quantizers (maxmin_quantize, cast) round a value onto their grid.
#pragma once

#include <cstdint>

namespace sluice {

/// Rounding of quantizers.
///
/// `nearest` is deterministic and biased: a value between two levels always goes to the closer
/// one, and a value that is not on the grid (for max-min, the grid is min + q * unit of its bucket,
/// so an exact 0 is on it only by chance) decodes to a different value every time it is sent. With
/// error feedback the bias is carried in the residual and corrected on the next step; without
/// feedback, or when many ranks send nearly equal values, use `stochastic`, whose expectation is
/// the input.
enum class rounding : std::uint8_t {
  nearest = 0,     ///< round to the nearest level: error <= unit / 2, biased
  stochastic = 1,  ///< round up with probability equal to the fractional part: unbiased
};

}  // namespace sluice
