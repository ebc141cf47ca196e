// The codecs the feedback tests run over: every landed compress/ codec with a default value,
// plus the dense grid test codec, so new codecs join the mass-conservation tests by inclusion.
#pragma once

#include <tuple>

#include <sluice/compress/top_k.hpp>
#if __has_include(<sluice/compress/block_top_k.hpp>)
#include <sluice/compress/block_top_k.hpp>
#define SLUICE_TEST_HAVE_BLOCK_TOP_K 1
#endif
#if __has_include(<sluice/compress/maxmin_quantize.hpp>)
#include <sluice/compress/maxmin_quantize.hpp>
#define SLUICE_TEST_HAVE_MAXMIN 1
#endif
#if __has_include(<sluice/compress/threshold_top_k.hpp>)
#include <sluice/compress/threshold_top_k.hpp>
#define SLUICE_TEST_HAVE_THRESHOLD_TOP_K 1
#endif
#if __has_include(<sluice/compress/random_k.hpp>)
#include <sluice/compress/random_k.hpp>
#define SLUICE_TEST_HAVE_RANDOM_K 1
#endif

#include "support/feedback_reference.hpp"

namespace sluice::test {

/// Calls f(codec) for each codec under test.
template <class F>
void for_each_codec(F&& f) {
  f(top_k{.ratio = 0.05});
  f(grid_codec{});
#ifdef SLUICE_TEST_HAVE_BLOCK_TOP_K
  f(block_top_k{.ratio = 0.05});
#endif
#ifdef SLUICE_TEST_HAVE_MAXMIN
  f(maxmin_quantize{.bits = 4});
#endif
#ifdef SLUICE_TEST_HAVE_THRESHOLD_TOP_K
  f(threshold_top_k{.ratio = 0.05});
#endif
#ifdef SLUICE_TEST_HAVE_RANDOM_K
  f(random_k{.ratio = 0.05});
#endif
}

}  // namespace sluice::test
