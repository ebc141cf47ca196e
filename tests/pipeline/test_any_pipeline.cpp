// sluice::any_pipeline: codec, feedback and optimizer chosen at run time from values, the pipelines
// compiled once in a library (sluice_add_any_pipeline): the same bits as the pipeline of the same
// policies, and the errors of a choice that cannot run.
#include <doctest/doctest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include <sluice/pipeline/any.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

template <class Make>
std::vector<model_params> train(int n, unsigned staleness, int steps, Make make) {
  std::vector<model_params> out(static_cast<std::size_t>(n), model_params(model()));
  auto errors = test::run_local(n, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    auto pipe = make(ep, small_buckets(staleness));
    auto spans = p.spans();
    pipe->attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(r, static_cast<std::uint64_t>(s), p, g);
      pipe->step(views(g));
    }
    pipe->synchronize();
    out[static_cast<std::size_t>(r)] = p;
  });
  test::rethrow_first(errors);
  return out;
}

TEST_CASE("any_pipeline: a run-time choice gives the bits of the pipeline of the same policies") {
  auto const chosen = train(3, 1, 5, [](local_transport& ep, pipeline_options o) {
    any_codec const codec = top_k{.ratio = 0.05};  // as parsed from a command line
    any_feedback const feedback = residual{};
    any_optimizer const opt = sgd{.lr = 0.1, .momentum = 0.9};
    return std::make_unique<any_pipeline<local_transport>>(codec, feedback, opt, std::move(ep), o);
  });
  auto const fixed = train(3, 1, 5, [](local_transport& ep, pipeline_options o) {
    return std::make_unique<pipeline<top_k, residual, sgd, local_transport>>(
        top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1, .momentum = 0.9}, std::move(ep), o);
  });
  for (std::size_t r = 0; r < chosen.size(); ++r) CHECK(chosen[r] == fixed[r]);
}

TEST_CASE("any_pipeline: a codec the linked library was built without is refused, naming it and the fix") {
  auto ts = local_transport::create(1);  // the library holds top_k only (tests/pipeline/CMakeLists.txt)
  CHECK_THROWS_WITH_AS((any_pipeline<local_transport>{maxmin_quantize{}, residual{}, sgd{}, std::move(ts[0])}),
                       doctest::Contains("add it to sluice_add_any_pipeline"), error);
  any_pipeline<local_transport> ok{top_k{.ratio = 0.1}, no_feedback{}, adamw{}, std::move(ts[0])};
  CHECK(ok.describe().find("top_k") != std::string::npos);
}

TEST_CASE("any_pipeline: docs/pipeline.md's example") {
  // What a trainer's command line parser gives: the library linked here holds top_k's pipelines.
  auto parse_codec = [](char const* const* args) -> any_codec {
    require(std::string_view(args[1]) == "top_k", errc::invalid_argument, "this test's trainer knows top_k only");
    return top_k{.ratio = 0.05};
  };
  char const* const argv[] = {"trainer", "top_k", nullptr};
  std::vector<model_params> out(2, model_params(model()));
  rethrow_first(run_local(2, [&](local_transport& transport) {
    int const rank = transport.rank();
    pipeline_options const options = small_buckets(1);
    sluice::layout const layout = model();
    model_params p(model());
    auto params = p.spans();
    // example-begin any
    sluice::any_codec codec = parse_codec(argv);  // a std::variant of the codecs: identity, top_k, qsgd, ...
    sluice::any_pipeline pipe{codec, sluice::residual{}, sluice::adam{.lr = 1e-3}, std::move(transport), options};
    pipe.attach(layout, params);  // the same calls as sluice::pipeline
    // example-end any
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = 0; s < 3; ++s) {
      gradients(rank, s, p, g);
      pipe.step(views(g));
    }
    pipe.synchronize();
    out[static_cast<std::size_t>(rank)] = p;
  }));
  CHECK(out[0] == out[1]);
}

}  // namespace
