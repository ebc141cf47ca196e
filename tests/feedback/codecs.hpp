// The codecs the feedback tests run over: the whole compress/ catalogue plus the dense grid test
// codec, so every codec is checked for mass conservation and fused == unfused.
#pragma once

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/cast.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/power_sgd.hpp>
#include <sluice/compress/qsgd.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/sign.hpp>
#include <sluice/compress/threshold_top_k.hpp>
#include <sluice/compress/top_k.hpp>

#include "support/feedback_reference.hpp"

#define SLUICE_TEST_HAVE_BLOCK_TOP_K 1
#define SLUICE_TEST_HAVE_MAXMIN 1

namespace sluice::test {

/// Calls f(codec) for each codec under test.
template <class F>
void for_each_codec(F&& f) {
  f(top_k{.ratio = 0.05});
  f(block_top_k{.ratio = 0.05});
  f(threshold_top_k{.ratio = 0.05});
  f(random_k{.ratio = 0.05});
  f(random_k{.ratio = 0.05, .rescale = true});
  f(maxmin_quantize{.bits = 4});
  f(maxmin_quantize{.bits = 2, .bucket = 128, .round = rounding::stochastic});
  f(sign{});
  f(qsgd{});
  f(cast{});
  f(cast{.to = element_type::bf16, .round = rounding::stochastic});
  f(identity{});
  f(power_sgd{.rank = 2});
  f(grid_codec{});
}

}  // namespace sluice::test
