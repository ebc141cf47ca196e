// A trainer's translation unit built against sluice::kernels (which defines
// SLUICE_SEPARATE_KERNELS): the optimizer kernels its pipelines run come from that library, not
// from this unit. The pipelines must still give the hand composition's parameters bit for bit
// (fp32 and bf16 moments, dense and sparse gradients, SGD and Adam); test_separate_kernels_object
// checks that this object defines none of the kernels, and test_optim_separate runs the
// optimizer suite, whose digests pin the kernels' bits, against the library.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"

#if !defined(SLUICE_SEPARATE_KERNELS)
#error "test_separate_kernels links sluice::kernels, which defines SLUICE_SEPARATE_KERNELS"
#endif

namespace {

using namespace sluice;
using namespace sluice::test;

constexpr int world = 3;

// The pipeline at staleness 1 against the hand composition: after step t the trainer holds the
// hand composition's parameters after t updates.
template <class C, class F, class O>
void check_against_hand(C codec, F feedback, O opt, int steps = 5) {
  CAPTURE(fmt::format("{} + {} + {}", codec, feedback, opt));
  constexpr unsigned staleness = 1;
  std::vector<std::vector<model_params>> trajectory(world);
  auto errors = test::run_local(world, [&](local_transport& ep) {
    model_params p(model());
    pipeline pipe{codec, feedback, opt, ep, small_buckets(staleness)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(ep.rank(), static_cast<std::uint64_t>(s), p, g);
      pipe.step(views(g));
      trajectory[static_cast<std::size_t>(ep.rank())].push_back(p);
    }
    pipe.synchronize();
    trajectory[static_cast<std::size_t>(ep.rank())].push_back(p);
  });
  test::rethrow_first(errors);
  std::vector<std::vector<model_params>> history(world);
  errors = test::run_local(world, [&](local_transport& ep) {
    model_params p(model());
    hand_composition<C, F, O> hand(codec, feedback, opt, ep, small_buckets(staleness), model(), p);
    auto& h = history[static_cast<std::size_t>(ep.rank())];
    h.push_back(p);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(ep.rank(), static_cast<std::uint64_t>(s), h[static_cast<std::size_t>(std::max(0, s - 1))], g);
      hand.step(static_cast<std::uint64_t>(s), g);
      hand.write(p);
      h.push_back(p);
    }
  });
  test::rethrow_first(errors);
  for (std::size_t r = 0; r < world; ++r) {
    CAPTURE(r);
    auto const& tr = trajectory[r];
    for (std::size_t s = 0; s < static_cast<std::size_t>(steps); ++s) CHECK(tr[s] == history[r][s]);
    CHECK(tr.back() == history[r].back());
    CHECK(tr.back() == trajectory[0].back());
  }
  CHECK_FALSE(trajectory[0].back() == model_params(model()));
}

}  // namespace

TEST_CASE("separate kernels: pipelines give the hand composition's bits with the kernels from sluice::kernels") {
  check_against_hand(top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2});
  check_against_hand(block_top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2, .state_type = element_type::bf16});
  check_against_hand(maxmin_quantize{.bits = 4}, residual{}, adamw{.lr = 1e-2, .state_type = element_type::bf16});
  check_against_hand(top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.05, .momentum = 0.9});
  check_against_hand(identity{}, no_feedback{}, sgd{.lr = 0.05});
}
