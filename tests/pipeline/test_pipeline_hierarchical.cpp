// The two-tier pipeline (by_hierarchical) and heterogeneous batches on local worlds of threads:
// replicas stay bit-identical, the dense sum equals the flat ring's within rounding, a killed member
// or leader fails every rank, and set_batch_sizes averages sum b_r g_r / sum b.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

// Trains `steps` steps on a world of `n` with the given pipeline arguments; every rank's
// parameters after synchronize().
template <class C, class F, class O, class Choice>
std::vector<model_params> train(int n, C codec, F feedback, O opt, Choice choice, unsigned staleness, int steps,
                                std::vector<std::size_t> const& batches = {},
                                pipeline_options const& options = small_buckets()) {
  std::vector<model_params> out(static_cast<std::size_t>(n), model_params(model()));
  auto errors = test::run_local(n, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    pipeline_options o = options;
    o.staleness = staleness;
    pipeline pipe{codec, feedback, opt, ep, o, choice};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    if (!batches.empty()) pipe.set_batch_sizes(batches);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(r, static_cast<std::uint64_t>(s), p, g);
      pipe.step(views(g));
    }
    pipe.synchronize();
    out[static_cast<std::size_t>(r)] = p;
  });
  test::rethrow_first(errors);
  return out;
}

void check_replicas(std::vector<model_params> const& p) {
  for (std::size_t r = 1; r < p.size(); ++r) CHECK(p[r] == p[0]);
}

TEST_CASE("hierarchical: the dense sum equals the flat ring's within rounding; replicas bit-identical") {
  for (int g : {2, 3}) {  // groups {0,1},{2,3} and {0,1,2},{3}
    CAPTURE(g);
    auto const tiers = train(4, identity{}, no_feedback{}, sgd{.lr = 0.1}, by_hierarchical{.group_size = g}, 0, 5);
    auto const flat = train(4, identity{}, no_feedback{}, sgd{.lr = 0.1}, by_ring_allreduce{}, 0, 5);
    check_replicas(tiers);
    for (std::size_t t = 0; t < tiers[0].tensors.size(); ++t)
      for (std::size_t i = 0; i < tiers[0].tensors[t].size(); ++i)
        REQUIRE(tiers[0].tensors[t][i] == doctest::Approx(flat[0].tensors[t][i]).epsilon(1e-5));
  }
}

TEST_CASE("hierarchical: compressed between leaders with feedback on the group's sum, every codec path") {
  model_params const start(model());
  auto const check = [&](std::vector<model_params> const& p) {
    check_replicas(p);
    CHECK(p[0] != start);
  };
  check(train(4, top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, by_hierarchical{.group_size = 2}, 1, 6));
  check(train(4, maxmin_quantize{.bits = 4}, residual{}, sgd{.lr = 0.1}, by_hierarchical{.group_size = 2}, 0, 6));
  check(train(4, random_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, by_hierarchical{.group_size = 3}, 2, 6));
  // One group: the leader's compressed exchange is with itself; members get its result.
  check(train(3, top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, by_hierarchical{.group_size = 3}, 0, 4));
}

TEST_CASE("hierarchical, gathered frames: flat's sum bit for bit, every sparse codec, staleness and group shape") {
  // Nothing bypasses compression, so every bucket is a sparse codec's: flat sums them by the
  // sparse allgather, and the gathered frames must give the same bits.
  pipeline_options o = small_buckets();
  o.bucketing.bypass_below_elements = 0;
  o.bucketing.bypass_max_dims = 0;
  auto const same = [&](auto codec, auto opt, int n, int g, unsigned s, bool sparse_apply) {
    CAPTURE(n);
    CAPTURE(g);
    CAPTURE(s);
    CAPTURE(sparse_apply);
    pipeline_options x = o;
    x.sparse_apply = sparse_apply;
    auto const gathered =
        train(n, codec, residual{}, opt, by_hierarchical{.group_size = g, .sparse = hierarchical_sparse::gather_frames},
              s, 5, {}, x);
    auto const flat = train(n, codec, residual{}, opt, by_sparse_allgather{}, s, 5, {}, x);
    check_replicas(gathered);
    CHECK(gathered[0] == flat[0]);
    CHECK(gathered[0] != model_params(model()));
  };
  same(top_k{.ratio = 0.05}, adam{.lr = 1e-2}, 4, 2, 1, false);
  same(top_k{.ratio = 0.05}, sgd{.lr = 0.1}, 4, 3, 0, true);          // groups {0,1,2},{3}
  same(block_top_k{.ratio = 0.05}, adam{.lr = 1e-2}, 5, 2, 2, true);  // three leaders: frames relayed on
  same(random_k{.ratio = 0.05}, sgd{.lr = 0.1}, 3, 3, 1, false);      // one group
  // The leader's sum is another computation: it does not give flat's bits.
  CHECK(
      train(4, top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, by_hierarchical{.group_size = 2}, 1, 5, {}, o)[0] !=
      train(4, top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, by_sparse_allgather{}, 1, 5, {}, o)[0]);
}

TEST_CASE("hierarchical: groups from LOCAL_WORLD_SIZE, or a clear error without it") {
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  auto const p = train(4, top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, by_hierarchical{}, 0, 3);
  check_replicas(p);
  ::unsetenv("LOCAL_WORLD_SIZE");
  auto ts = local_transport::create(1);
  CHECK_THROWS_WITH_AS((pipeline{top_k{}, residual{}, sgd{}, ts[0], pipeline_options{}, by_hierarchical{}}),
                       doctest::Contains("LOCAL_WORLD_SIZE"), error);
}

TEST_CASE("hierarchical: a killed member or leader makes every rank fail, no hang") {
  for (auto sparse : {hierarchical_sparse::sum_on_leader, hierarchical_sparse::gather_frames})
    for (int dying : {1, 2}) {  // a member of group 0, the leader of group 1
      CAPTURE(dying);
      CAPTURE(static_cast<int>(sparse));
      auto errors = test::run_local(4, [&](local_transport& ep) {
        model_params p(model());
        pipeline_options o = small_buckets(1);
        o.timeout = std::chrono::milliseconds(2'000);
        pipeline pipe{top_k{.ratio = 0.05},
                      residual{},
                      adam{.lr = 1e-2},
                      ep,
                      o,
                      by_hierarchical{.group_size = 2, .sparse = sparse}};
        auto spans = p.spans();
        pipe.attach(model(), spans);
        std::vector<std::vector<float>> g;
        for (std::uint64_t s = 0; s < 20; ++s) {
          if (ep.rank() == dying && s == 2) {
            pipe.transport().kill();
            throw error(errc::peer_lost, "killed itself");
          }
          gradients(ep.rank(), s, p, g);
          pipe.step(views(g));
        }
        pipe.synchronize();
      });
      for (auto const& e : errors) {
        REQUIRE(e);
        try {
          std::rethrow_exception(e);
        } catch (error const& x) {
          CHECK((x.code() == errc::peer_lost || x.code() == errc::timeout));
        }
      }
    }
}

TEST_CASE("set_batch_sizes: the average is sum b_r g_r / sum b; equal batches change no bit") {
  constexpr int n = 3;
  std::vector<std::size_t> const batches{1, 2, 5};
  auto const weighted = train(n, identity{}, no_feedback{}, sgd{.lr = 1.0}, by_ring_allreduce{}, 0, 1, batches);
  check_replicas(weighted);
  model_params const p0(model());
  std::vector<std::vector<std::vector<float>>> g(n);
  for (int r = 0; r < n; ++r) gradients(r, 0, p0, g[static_cast<std::size_t>(r)]);
  for (std::size_t t = 0; t < p0.tensors.size(); ++t)
    for (std::size_t i = 0; i < p0.tensors[t].size(); ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r)
        sum += static_cast<double>(batches[static_cast<std::size_t>(r)]) * g[static_cast<std::size_t>(r)][t][i];
      double const expected = p0.tensors[t][i] - sum / 8.0;
      REQUIRE(weighted[0].tensors[t][i] == doctest::Approx(expected).epsilon(1e-5));
    }
  auto const equal = train(n, top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, by_codec{}, 1, 4, {7, 7, 7});
  auto const plain = train(n, top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, by_codec{}, 1, 4);
  CHECK(equal[0] == plain[0]);
}

TEST_CASE("hierarchical: weighted averaging is sum b_r g_r / sum b through the two tiers") {
  std::vector<std::size_t> const batches{3, 1, 2, 6};  // groups {0,1},{2,3}; sum 12
  auto const weighted =
      train(4, identity{}, no_feedback{}, sgd{.lr = 1.0}, by_hierarchical{.group_size = 2}, 0, 1, batches);
  check_replicas(weighted);
  model_params const p0(model());
  std::vector<std::vector<std::vector<float>>> g(4);
  for (int r = 0; r < 4; ++r) gradients(r, 0, p0, g[static_cast<std::size_t>(r)]);
  for (std::size_t t = 0; t < p0.tensors.size(); ++t)
    for (std::size_t i = 0; i < p0.tensors[t].size(); ++i) {
      double sum = 0;
      for (int r = 0; r < 4; ++r)
        sum += static_cast<double>(batches[static_cast<std::size_t>(r)]) * g[static_cast<std::size_t>(r)][t][i];
      REQUIRE(weighted[0].tensors[t][i] == doctest::Approx(p0.tensors[t][i] - sum / 12.0).epsilon(1e-5));
    }
}

TEST_CASE("set_batch_sizes: ranks with other sizes fail on every rank before the step is exchanged") {
  auto errors = test::run_local(2, [&](local_transport& ep) {
    model_params p(model());
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, ep, small_buckets(0)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::size_t> const mine =
        ep.rank() == 0 ? std::vector<std::size_t>{4, 8} : std::vector<std::size_t>{8, 4};
    std::vector<std::vector<float>> g;
    gradients(ep.rank(), 0, p, g);
    pipe.step(views(g));
    pipe.set_batch_sizes(mine);
    gradients(ep.rank(), 1, p, g);
    pipe.step(views(g));
  });
  for (auto const& e : errors) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (error const& x) {
      CHECK(x.code() == errc::size_mismatch);
      CHECK(std::string(x.what()).find("batch sizes") != std::string::npos);
    }
  }
  auto ts = local_transport::create(2);
  pipeline pipe{top_k{}, residual{}, sgd{}, ts[0]};
  CHECK_THROWS_AS(pipe.set_batch_sizes(std::vector<std::size_t>{1}), error);
  CHECK_THROWS_AS(pipe.set_batch_sizes(std::vector<std::size_t>{1, 0}), error);
}

}  // namespace
